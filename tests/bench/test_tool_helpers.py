"""The pure parts of benchmarks/fault_sweep.py (the docs section it rewrites) and profile_tp.py (kernel classes)."""

import math

import pytest

from benchmarks import fault_sweep
from benchmarks.profile_tp import kernel_class


def test_the_section_is_replaced_up_to_the_next_heading_and_the_rest_kept(tmp_path):
    docs = tmp_path / "VERIFY.md"
    docs.write_text("# Verification\n\nintro\n\n## Smallest fault caught\n\nold table\n\n## Next\n\nkept\n")
    row = {"device": "cpu", "dtype": "float32", "fault": "drift", "missed": 1e-4, "caught": 3e-4}
    fault_sweep.write_section(docs, fault_sweep.markdown([row], rounds=6))
    text = docs.read_text()
    assert "old table" not in text and text.count("## Smallest fault caught") == 1
    assert "| cpu | float32 | drift | caught at 0.0003 (missed at 0.0001) |" in text
    assert text.startswith("# Verification\n\nintro\n") and text.endswith("## Next\n\nkept\n")


def test_the_paragraphs_written_after_the_old_table_follow_the_new_one(tmp_path):
    docs = tmp_path / "VERIFY.md"
    docs.write_text(
        "# Verification\n\n## Smallest fault caught\n\n| a | b |\n|---|---|\n| old | row |\n\n"
        "What the numbers say, by hand.\n\n## Next\n\nkept\n"
    )
    row = {"device": "cpu", "dtype": "float32", "fault": "drift", "missed": 1e-4, "caught": 3e-4}
    fault_sweep.write_section(docs, fault_sweep.markdown([row], rounds=6))
    text = docs.read_text()
    assert "| old | row |" not in text and text.endswith("## Next\n\nkept\n")
    new_row = text.index("| cpu | float32 | drift |")
    assert new_row < text.index("What the numbers say, by hand.") < text.index("## Next")


def test_a_missing_section_is_appended_and_a_missing_file_made(tmp_path):
    docs = tmp_path / "VERIFY.md"
    fault_sweep.write_section(docs, fault_sweep.markdown([], rounds=1))
    assert docs.read_text().startswith("# Verification\n\n## Smallest fault caught\n")


@pytest.mark.parametrize(
    ("row", "verdict"),
    [
        ({"fault": "drift", "missed": 1.0, "caught": math.inf}, "**missed** even at 1"),
        ({"fault": "wrong_context", "caught": True}, "caught"),
        ({"fault": "wrong_context", "caught": False}, "**missed**"),
    ],
)
def test_each_row_says_caught_or_missed(row, verdict):
    assert fault_sweep.format_row({"device": "cuda", "dtype": "bfloat16", **row}).endswith(f"| {verdict} |")


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all-reduce"),
        ("void c10d::symmetric_memory::one_shot_all_reduce_kernel<c10::BFloat16, 2>", "all-reduce"),
        ("ncclDevKernel_AllGather_RING_LL", "all-gather"),
        ("nvjet_sm90_tst_384x8_64x4_2x1_v_bz_TNT", "matmul"),
        ("triton_poi_fused_add_0", "fused (triton)"),
        ("at::native::vectorized_elementwise_kernel", "other"),
    ],
)
def test_tp_kernels_are_classed_with_the_all_reduces_first(name, kind):
    assert kernel_class(name) == kind
