"""Property tests over CLI arguments that never need a model load.

Every MODEL and plan path lives under a folder that does not exist, so each invocation fails fast (on an
option, on the missing folder, on the missing plan) and the whole file runs in a few seconds. Generation is
derandomized and the example database is off: the same examples run every time.
"""

from __future__ import annotations

import re
from pathlib import Path
from unittest import mock

import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli.errors import DEBUG_ENV
from cli.main import app

runner = CliRunner()

# Never created: nothing under it can exist, whatever name is appended (even "..").
MISSING = Path("/nonexistent-cugraph-accel-fuzz/missing")

FUZZ = settings(
    max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)

bucket_texts = st.text(alphabet="0123456789,- a", max_size=12)
dtype_texts = st.one_of(
    st.sampled_from(["auto", "bf16", "fp16", "fp32", "float", "half", "BF16", " fp32 ", "int8", "", "bfloat16"]),
    st.text(max_size=8),
)
device_texts = st.one_of(
    st.sampled_from(
        ["auto", "cpu", "CPU", " cpu ", "cuda", "cuda:0", "cuda:1", "tpu", "", "cuda:-1", "cuda:x", "mps", "cuda:"]
    ),
    st.text(alphabet="cpuda:0123456789 AUTO\u0663", max_size=10),
    st.text(max_size=8),
)
# One path component, never "/" (that could leave MISSING) nor NUL (argv cannot carry it).
names = st.text(
    alphabet=st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=12
)


def invoke(args: list[str]):
    # DEBUG_ENV cleared for the call, and restored afterwards, so no earlier --debug run can interfere.
    return runner.invoke(app, args, env={DEBUG_ENV: None, "HF_HUB_OFFLINE": "1"})


def assert_contract(result) -> None:
    """Exit 0, 1 or 2; nothing escaped; no traceback; a failure says `error:` (ours) or `Usage:`/`Error`
    (click's usage errors)."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"an exception escaped the CLI: {result.exception!r}\n{result.output}"
    )
    assert result.exit_code in (0, 1, 2), result.output
    assert "Traceback" not in result.output, result.output
    if result.exit_code != 0:
        # click's missing-value error shows only its boxed "Error" panel, without the "Usage:" line.
        assert "error:" in result.output or "Usage:" in result.output or "Error" in result.output, result.output


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


@st.composite
def fast_invocations(draw) -> list[str]:
    """An argument vector for one of the commands, with random option values, that cannot load a model."""
    model = str(MISSING / draw(names))
    plan = str(MISSING / draw(names))
    command = draw(st.sampled_from(["capture", "verify", "verify-model", "bench", "bench-model"]))
    if command == "capture":
        args = ["capture", model]
        if draw(st.booleans()):
            args += ["--buckets", draw(bucket_texts)]
        if draw(st.booleans()):
            args += ["--dtype", draw(dtype_texts)]
        if draw(st.booleans()):
            args += ["--device", draw(device_texts)]
        if draw(st.booleans()):
            args += ["--plan", plan]
        if draw(st.booleans()):
            args += ["--mode", draw(st.sampled_from(["auto", "full", "eager", "bogus", ""]))]
    elif command == "verify":
        args = ["verify", "--plan", plan]
        if draw(st.booleans()):
            args += ["--buckets", draw(bucket_texts)]
    elif command == "verify-model":
        args = ["verify", model, "--buckets", draw(bucket_texts)]
    elif command == "bench":
        args = ["bench", "--plan", plan, "--device", draw(device_texts)]
        if draw(st.booleans()):
            args += ["--buckets", draw(bucket_texts)]
    else:
        args = ["bench", model, "--device", draw(device_texts)]
    if command.startswith("bench") and draw(st.booleans()):
        args.append("--allow-cpu")
    if command.startswith(("capture", "verify")) and draw(st.booleans()):
        args += ["--json", "-"]
    return args


@FUZZ
@given(args=fast_invocations())
@example(args=["capture", str(MISSING / "m"), "--buckets", "-"])
@example(args=["capture", str(MISSING / "m"), "--buckets", "--"])
@example(args=["capture", str(MISSING / "m"), "--buckets", ""])
@example(args=["bench", "--plan", str(MISSING / ".."), "--device", ""])
@example(args=["verify", "--plan", str(MISSING / "p"), "--buckets", " , "])
def test_cli_never_crashes(args):
    result = invoke(args)
    assert_contract(result)
    assert not MISSING.exists(), "a command wrote under a path it should have rejected"


def buckets_valid(text: str) -> bool:
    """The documented rule: comma-separated whole numbers >= 1, no empty items, no duplicates."""
    items = [item.strip() for item in text.split(",")]
    if any(not re.fullmatch(r"-?[0-9]+", item) for item in items):
        return False
    sizes = [int(item) for item in items]
    return all(size >= 1 for size in sizes) and len(set(sizes)) == len(sizes)


@FUZZ
@given(text=bucket_texts)
@example(text="1, 8,16")
@example(text="08,8")
@example(text="-0")
@example(text=" ")
@example(text="1,")
def test_buckets_rejected_exactly_when_invalid(text):
    """--buckets is checked before the model: a valid list reaches the (missing) folder, exit 1; an invalid
    one is a usage error, exit 2, on one `error:` line naming --buckets."""
    result = invoke(["capture", str(MISSING / "m"), f"--buckets={text}", "--device", "cpu", "--dtype", "fp32"])
    assert_contract(result)
    lines = error_lines(result)
    assert len(lines) == 1, result.output
    if buckets_valid(text):
        assert result.exit_code == 1, result.output
        assert "does not exist" in lines[0]
    else:
        assert result.exit_code == 2, result.output
        assert "--buckets" in lines[0]


@FUZZ
@given(text=device_texts)
@example(text="cuda:\u0663")
@example(text="cuda:007")
@example(text="cuda:00")
@example(text="cuda:99999999999999999999")
@example(text=" CUDA:1 ")
def test_device_strings_give_domain_errors(text):
    """On a machine without CUDA, with no plan file: auto/cpu reach the missing plan (exit 1); a cuda device
    is refused for lack of a GPU (exit 1, or 2 when the index is malformed); anything else is 'not a device'
    (exit 2). Never the generic 'unexpected ...' line from an exception torch raised."""
    with mock.patch.object(torch.cuda, "is_available", return_value=False):
        result = invoke(["bench", "--plan", str(MISSING / "p.yaml"), f"--device={text}", "--allow-cpu"])
    assert_contract(result)
    lines = error_lines(result)
    assert len(lines) == 1, result.output
    line = lines[0]
    assert "unexpected" not in line, line
    wanted = text.strip().lower()
    if wanted in ("auto", "cpu"):
        assert result.exit_code == 1 and "no plan file" in line, result.output
    elif re.fullmatch(r"cuda(:(0|[1-9][0-9]{0,8}))?", wanted):
        assert result.exit_code == 1 and "CUDA" in line, result.output
    elif re.fullmatch(r"cuda:[0-9]+", wanted):  # leading zeros or an absurd index: either refusal is fine
        assert result.exit_code in (1, 2), result.output
    else:
        assert result.exit_code == 2 and "not a device" in line, result.output
