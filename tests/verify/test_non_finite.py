"""NaN and Inf: every rule of the criterion compares with `>`, which NaN passes. A replay that makes them
fails verify and the check right after capture, with a line naming the graph, step, row and tensor; a model
whose eager step makes them is refused with one clear error before any capture."""

import math
import re

import pytest
import torch
from fault_harness import every, failed, hook_the_captured_head, tiny_session, verify_with

from accelerate_graph.common.errors import NonFiniteError, VerificationError
from accelerate_graph.pipeline import CaptureRequest, prepare
from accelerate_graph.verify.criterion import judge_tensors
from accelerate_graph.verify.faults import fault

CUDA = pytest.param(
    "cuda",
    marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")],
)
LOGIT_LINE = r"graph \(bucket \d, context \d+\), logits of row 0 at step 1: 1 value\(s\) {} in the replay"


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind, value", [("nan_top_logit", "NaN"), ("inf_top_logit", "+Inf")])
def test_a_non_finite_top_logit_in_one_row_fails_every_case(kind, value, dtype, device):
    rows = verify_with(tiny_session(dtype=dtype, device=device), fault(kind))
    assert failed(rows) == every(rows)
    for row in rows:
        assert math.isnan(row.logit_err) and math.isnan(row.ratio)  # no number describes the replay
        assert re.match(LOGIT_LINE.format(re.escape(value)), row.detail), row.detail
        assert f"bucket {row.bucket}, context {row.context}" in row.detail


@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_a_nan_written_into_one_cache_layer_fails_naming_the_layer(device):
    rows = verify_with(tiny_session(dtype=torch.bfloat16, device=device), fault("nan_cache", layer=1))
    assert failed(rows) == every(rows)
    assert all("cache layer 1 K of row 0 at step 1: 1 value(s) NaN" in r.detail for r in rows), rows[0].detail


def test_the_check_right_after_capture_fails_on_a_nan_top_logit(monkeypatch):
    def poison(module, args, out):
        return out.index_fill(-1, out[0].reshape(-1).argmax().reshape(1), float("nan"))

    hook_the_captured_head(monkeypatch, poison)
    request = CaptureRequest(model="tiny", buckets=(2,), dtype="bfloat16", device="cpu", max_cache_len=32)
    with pytest.raises(VerificationError, match=r"right after capture.*graph \(bucket 2, context 32\), logits of row"):
        prepare(request)


def _nan_checkpoint(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir("llama"))
    with torch.no_grad():
        model.model.layers[1].self_attn.o_proj.weight[3, 5] = float("nan")
    model.save_pretrained(tmp_path / "nan")
    return str(tmp_path / "nan")


def test_nan_weights_are_refused_before_capture_naming_them(tiny_model_dir, tmp_path, monkeypatch):
    from accelerate_graph import capture_flow

    monkeypatch.setattr(capture_flow, "capture_decode_graphs", lambda *a, **k: pytest.fail("captured"))
    request = CaptureRequest(model=_nan_checkpoint(tiny_model_dir, tmp_path), buckets=(1,), device="cpu")
    request.max_cache_len = 32
    with pytest.raises(NonFiniteError, match=r"not finite, before any graph.*layers\.1\.self_attn\.o_proj\.weight"):
        prepare(request)


def test_nan_weights_exit_non_zero_with_one_line_and_no_traceback(tiny_model_dir, tmp_path):
    from typer.testing import CliRunner

    from cli.main import app

    model = _nan_checkpoint(tiny_model_dir, tmp_path)
    args = ["capture", model, "--device", "cpu", "--buckets", "1", "--max-cache-len", "32"]
    result = CliRunner().invoke(app, [*args, "--plan", str(tmp_path / "p.yaml")])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "o_proj.weight (1 of" in result.output and not (tmp_path / "p.yaml").exists()


def _logits_and_cache(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 2, 50, generator=generator)
    cache = [(torch.randn(2, 2, 3, 4, generator=generator), torch.randn(2, 2, 3, 4, generator=generator))]
    return logits, cache


@pytest.mark.parametrize("run", ["eager", "the float32 reference"])
@pytest.mark.parametrize("where", ["logits", "cache"])
def test_non_finite_eager_or_reference_is_an_error_not_a_verdict(run, where):
    logits, cache = _logits_and_cache()
    runs = {
        "replay": (logits.clone(), cache),
        "eager": (logits.clone(), cache),
        "the float32 reference": (logits, cache),
    }
    bad_logits, bad_cache = runs[run][0].clone(), [(cache[0][0].clone(), cache[0][1])]
    if where == "logits":
        bad_logits[1, 0, 7] = float("-inf")
    else:
        bad_cache[0][0][1, 0, 2, 0] = float("nan")
    runs[run] = (bad_logits, bad_cache)
    order = ("replay", "eager", "the float32 reference")
    with pytest.raises(NonFiniteError, match=f"^{run} (made -Inf logits|wrote NaN into cache layer 0 K)"):
        judge_tensors(tuple(runs[r][0] for r in order), tuple(runs[r][1] for r in order), torch.bfloat16)


def test_a_replay_non_finite_where_the_reference_is_finite_fails_and_a_finite_one_passes():
    logits, cache = _logits_and_cache()
    eager = logits + 1e-3 * torch.randn(logits.shape, generator=torch.Generator().manual_seed(1))
    verdict = judge_tensors((logits.clone(), eager, logits), (cache, cache, cache), torch.bfloat16)
    assert verdict.passed, verdict.failures
    replay = logits.clone()
    replay[2, 1] = float("nan")
    verdict = judge_tensors((replay, eager, logits), (cache, cache, cache), torch.bfloat16)
    assert not verdict.passed and verdict.detail.startswith("logits of row 1 at step 3: 50 value(s) NaN")


def test_finite_values_whose_sum_overflows_are_still_finite():
    """The quick check sums each tensor in float32 (one device sync for all of them): a sum that overflows is
    not a non-finite value, and the exact search behind it finds none."""
    from accelerate_graph.verify.finite import all_finite, replay_failures

    logits, cache = _logits_and_cache()
    huge = [(torch.full_like(keys, 3e38), values) for keys, values in cache]
    assert not all_finite(logits, huge) and replay_failures(logits, logits, huge, huge) == []
    assert all_finite(logits, cache)
