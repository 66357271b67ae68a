"""The CLI's failure contract, driven through typer's CliRunner.

Every bad input must end with: the right exit code (2 for a malformed request, 1 for a request that could
not be carried out), exactly one stderr line starting with "error:" that names the problem, and no
traceback (unless --debug). Happy paths use the built-in `tiny` recipe on the CPU (about a second).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from accelerate_graph import __version__
from cli.errors import DEBUG_ENV
from cli.main import app

runner = CliRunner()


# --------------------------------------------------------------------------------------------- helpers


def invoke(*args, env: dict | None = None):
    """Run the CLI in-process. DEBUG_ENV is cleared for the call and restored after it (click's isolation
    restores every key named in `env`), so a `--debug` run cannot leak into later ones."""
    return runner.invoke(app, [str(a) for a in args], env={DEBUG_ENV: None, **(env or {})})


def assert_clean(result) -> None:
    """No exception escaped the command (CliRunner would swallow it silently) and no traceback was printed."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"an exception escaped the CLI: {result.exception!r}\n{result.output}"
    )
    assert "Traceback" not in result.output, result.output


def error_line(result, code: int, *phrases: str) -> str:
    """Assert the failure contract and return the single `error:` line."""
    assert_clean(result)
    assert result.exit_code == code, f"exit {result.exit_code}, wanted {code}:\n{result.output}"
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, f"want exactly one 'error:' line on stderr:\n{result.output}"
    line = lines[0]
    assert "unexpected" not in line, f"a known failure fell through to the generic handler: {line}"
    for phrase in phrases:
        assert phrase.lower() in line.lower(), f"{phrase!r} not in {line!r}"
    return line


def assert_usage_error(result) -> None:
    """click's own usage errors: exit 2 and its 'Usage:' banner, no traceback."""
    assert_clean(result)
    assert result.exit_code == 2, result.output
    assert "Usage:" in result.stderr or "Error" in result.stderr, result.output


def no_tmp_leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture(autouse=True)
def _isolated(monkeypatch):
    # Record DEBUG_ENV's original value, then remove it; monkeypatch restores it at teardown even if an
    # invocation in the test set it.
    monkeypatch.setenv(DEBUG_ENV, "0")
    monkeypatch.delenv(DEBUG_ENV)
    # Hub ids must fail the same way with or without a network.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def no_cuda(monkeypatch):
    """Behave like a machine without a GPU, even on one."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture(scope="module")
def good_plan(tmp_path_factory) -> Path:
    """A real plan for `tiny` on the CPU with buckets 1,2, captured once for the module."""
    folder = tmp_path_factory.mktemp("good-plan")
    path = folder / "p.yaml"
    result = runner.invoke(
        app, ["capture", "tiny", "--device", "cpu", "--buckets", "1,2", "--plan", str(path)], env={DEBUG_ENV: None}
    )
    assert result.exit_code == 0, result.output
    return path


def plan_variant(good_plan: Path, folder: Path, name: str = "variant.yaml", **changes) -> Path:
    """A copy of the good plan with keys changed (value `...` deletes the key)."""
    data = yaml.safe_load(good_plan.read_text())
    for key, value in changes.items():
        if value is ...:
            data.pop(key)
        else:
            data[key] = value
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def write_recipe(folder: Path, text: str, name: str = "r.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


TINY_RECIPE_BODY = (
    "name: mini\nmodel_type: llama\n"
    "config: {hidden_size: 64, intermediate_size: 128, num_hidden_layers: 1, num_attention_heads: 4,\n"
    "         num_key_value_heads: 2, vocab_size: 128}\n"
)


# ------------------------------------------------------------------------------------------ the model


def test_missing_model_folder_absolute(tmp_path):
    missing = tmp_path / "nope"
    line = error_line(invoke("capture", missing), 1, "does not exist")
    assert str(missing) in line


def test_missing_model_folder_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = error_line(invoke("capture", "./nope"), 1, "does not exist")
    assert "./nope" in line


def test_folder_without_config_json(tmp_path):
    folder = tmp_path / "empty-model"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"\0")
    line = error_line(invoke("capture", folder), 1, "config.json")
    assert str(folder) in line


def test_model_path_is_a_file(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(b"\0")
    error_line(invoke("capture", path), 1, "not a model folder")


def test_unknown_hub_id_offline():
    line = error_line(invoke("capture", "someorg/not-a-model"), 1, "not a built-in recipe")
    assert "someorg/not-a-model" in line


def test_verify_with_missing_model_folder(tmp_path):
    error_line(invoke("verify", tmp_path / "nope"), 1, "does not exist")


@pytest.mark.parametrize("command", ["capture", "verify"])
def test_empty_model_argument_is_rejected(command, tmp_path, monkeypatch):
    """An explicitly empty MODEL is malformed: capture must not silently fall back to `tiny`, and verify must
    not load the current folder and print a message with an empty name."""
    monkeypatch.chdir(tmp_path)
    result = invoke(command, "")
    line = error_line(result, 2)
    assert "model" in line.lower() or "empty" in line.lower(), line
    assert not (tmp_path / "cugraph-accel.plan.yaml").exists()


# ---------------------------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    "value, phrase",
    [
        ("0", "below 1"),
        ("-3", "below 1"),
        ("a,b", "not a whole number"),
        ("1,,2", "empty item"),
        ("4,4", "twice"),
        ("", "empty item"),
    ],
)
def test_bad_buckets(value, phrase, tmp_path):
    # The folder does not exist either: --buckets must be rejected first, as a usage error.
    error_line(invoke("capture", tmp_path / "nope", "--buckets", value), 2, "--buckets", phrase)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("value", ["0", "-3", "a,b", "1,,2", "4,4", ""])
def test_bad_buckets_equals_form_on_verify(value, tmp_path):
    error_line(invoke("verify", "--plan", tmp_path / "p.yaml", f"--buckets={value}"), 2, "--buckets")


def test_bad_dtype():
    error_line(invoke("capture", "tiny", "--dtype", "int8"), 2, "--dtype", "int8")


def test_bad_device():
    error_line(invoke("capture", "tiny", "--device", "tpu"), 2, "--device", "tpu", "not a device")


@pytest.mark.parametrize("value", ["cuda:\u0663", "cuda:007", "cuda:99999999999999999999"])
def test_malformed_cuda_index_is_a_clear_error(value, no_cuda):
    """`cuda:N` with a non-ASCII digit, leading zeros or an index torch cannot parse must give a domain error
    naming the device, not 'unexpected RuntimeError' from torch.device()."""
    result = invoke("capture", "tiny", "--device", value)
    assert_clean(result)
    assert result.exit_code in (1, 2), result.output
    error_line(result, result.exit_code, value)


def test_device_cuda_without_gpu(no_cuda):
    error_line(invoke("capture", "tiny", "--device", "cuda"), 1, "no usable CUDA GPU")


def test_bad_mode():
    error_line(invoke("capture", "tiny", "--mode", "bogus"), 2, "--mode", "bogus")


def test_bad_attn():
    error_line(invoke("capture", "tiny", "--attn", "flash"), 2, "--attn", "flash")


def test_prompt_len_not_below_cache_len():
    error_line(invoke("capture", "tiny", "--max-cache-len", "10", "--prompt-len", "20"), 2, "--prompt-len")


@pytest.mark.parametrize(
    "args",
    [
        ["capture", "tiny", "--bogus"],
        ["capture", "a", "b"],
        ["capture", "tiny", "--max-cache-len", "1"],
        ["verify", "--steps", "0"],
        ["bench", "--steps", "3"],
        ["frobnicate"],
    ],
)
def test_click_usage_errors(args):
    assert_usage_error(invoke(*args))


# --------------------------------------------------------------------------------------------- plan files


@pytest.mark.parametrize("command", [["verify"], ["bench"], ["bench", "--allow-cpu"]])
def test_no_plan_file(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    error_line(invoke(*command), 1, "no plan file")


def test_no_plan_file_explicit_path(tmp_path):
    missing = tmp_path / "missing.yaml"
    line = error_line(invoke("verify", "--plan", missing), 1, "no plan file")
    assert str(missing) in line


def test_plan_garbage_yaml(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("model: [tiny\n  : : {\n")
    line = error_line(invoke("verify", "--plan", path), 1, "cannot be read", "capture")
    assert str(path) in line


def test_plan_not_utf8(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    error_line(invoke("verify", "--plan", path), 1, "cannot be read")


def test_plan_is_a_yaml_list(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("- 1\n- 2\n")
    error_line(invoke("verify", "--plan", path), 1, "not a cugraph-accel plan", "capture")


def test_plan_is_empty(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("")
    error_line(invoke("verify", "--plan", path), 1, "not a cugraph-accel plan")


def test_plan_path_is_a_folder(tmp_path):
    error_line(invoke("verify", "--plan", tmp_path), 1, "cannot be read")


def test_plan_unknown_key(good_plan, tmp_path):
    path = plan_variant(good_plan, tmp_path, colour="blue")
    error_line(invoke("verify", "--plan", path), 1, "unknown key", "colour")


def test_plan_missing_key(good_plan, tmp_path):
    path = plan_variant(good_plan, tmp_path, dtype=...)
    error_line(invoke("verify", "--plan", path), 1, "lacks the key", "dtype")


def test_plan_bad_mode(good_plan, tmp_path):
    path = plan_variant(good_plan, tmp_path, mode="auto")
    error_line(invoke("verify", "--plan", path), 1, "mode")


def test_plan_from_other_torch(good_plan, tmp_path):
    env = yaml.safe_load(good_plan.read_text())["environment"]
    path = plan_variant(good_plan, tmp_path, environment={**env, "torch": "1.0.0"})
    error_line(invoke("verify", "--plan", path), 1, "torch 1.0.0", "re-run", "capture")
    error_line(invoke("bench", "--allow-cpu", "--plan", path), 1, "torch 1.0.0", "re-run")


@pytest.mark.parametrize("environment", ["x", None, [1, 2]])
def test_plan_environment_not_a_mapping(environment, good_plan, tmp_path):
    """A plan whose `environment` is not a mapping is corrupt: PlanError naming the plan, not
    'unexpected AttributeError' from check_plan_compatible."""
    path = plan_variant(good_plan, tmp_path, environment=environment)
    line = error_line(invoke("verify", "--plan", path), 1)
    assert str(path) in line


def test_plan_model_not_a_string(good_plan, tmp_path):
    path = plan_variant(good_plan, tmp_path, model=5)
    line = error_line(invoke("verify", "--plan", path), 1)
    assert str(path) in line


@pytest.mark.parametrize("key, value", [("dtype", "int8"), ("device", "tpu"), ("attn", "flash")])
def test_plan_with_invalid_value_blames_the_plan(key, value, good_plan, tmp_path):
    """A bad value inside the plan is a corrupt plan (exit 1, naming the plan file), not a usage error about a
    --dtype/--device/--attn option the user never passed."""
    path = plan_variant(good_plan, tmp_path, **{key: value})
    line = error_line(invoke("verify", "--plan", path), 1, value)
    assert str(path) in line


def test_verify_model_differs_from_plan(good_plan):
    line = error_line(invoke("verify", "other-model", "--plan", good_plan), 1, "'tiny'", "'other-model'")
    assert str(good_plan) in line


# ------------------------------------------------------------------------------------------- recipe files


def test_recipe_unknown_key(tmp_path):
    path = write_recipe(tmp_path, TINY_RECIPE_BODY + "colour: blue\n")
    error_line(invoke("capture", path), 2, "unknown key", "colour")


def test_recipe_unknown_defaults_key(tmp_path):
    path = write_recipe(tmp_path, TINY_RECIPE_BODY + "defaults: {batch: 4}\n")
    error_line(invoke("capture", path), 2, "unknown key", "batch")


def test_recipe_wrong_type(tmp_path):
    path = write_recipe(tmp_path, TINY_RECIPE_BODY + "seed: abc\n")
    error_line(invoke("capture", path), 2, "seed")


def test_recipe_missing_key(tmp_path):
    path = write_recipe(tmp_path, "name: mini\nconfig: {}\n")
    error_line(invoke("capture", path), 2, "model_type")


def test_recipe_garbage_yaml(tmp_path):
    path = write_recipe(tmp_path, "name: [mini\n")
    error_line(invoke("capture", path), 2, "cannot read recipe")


def test_recipe_not_a_mapping(tmp_path):
    path = write_recipe(tmp_path, "- 1\n")
    error_line(invoke("capture", path), 2, "mapping")


def test_recipe_file_missing(tmp_path):
    error_line(invoke("capture", tmp_path / "none.yaml"), 2, "does not exist")


def test_recipe_defaults_buckets_mixed_types(tmp_path):
    """defaults.buckets [1, a] is a malformed recipe: RecipeError (exit 2) naming buckets, not
    'unexpected TypeError' from sorting ints with strings."""
    path = write_recipe(tmp_path, TINY_RECIPE_BODY + "defaults: {buckets: [1, a]}\n")
    error_line(invoke("capture", path), 2, "buckets")


def test_recipe_unknown_model_type(tmp_path):
    """An unknown model_type is a malformed recipe: one short RecipeError line naming it, not an
    'unexpected ValueError' listing every model type transformers knows."""
    path = write_recipe(tmp_path, "name: mini\nmodel_type: nosuchtype\nconfig: {}\n")
    line = error_line(invoke("capture", path), 2, "nosuchtype")
    assert len(line) < 400, f"{len(line)} characters"


def test_recipe_config_value_wrong_type(tmp_path):
    path = write_recipe(tmp_path, "name: mini\nmodel_type: llama\nconfig: {hidden_size: abc}\n")
    error_line(invoke("capture", path), 2, "hidden_size")


def test_recipe_not_a_causal_lm(tmp_path):
    path = write_recipe(tmp_path, "name: mini\nmodel_type: bert\nconfig: {}\n")
    error_line(invoke("capture", path, "--device", "cpu"), 1, "not a decoder-only causal LM")


# -------------------------------------------------------------------------------------------------- bench


def test_bench_on_cpu_needs_allow_cpu(no_cuda):
    error_line(invoke("bench", "tiny"), 2, "needs a CUDA GPU", "--allow-cpu")


def test_bench_cpu_plan_needs_allow_cpu(good_plan):
    error_line(invoke("bench", "--plan", good_plan), 2, "needs a CUDA GPU")


def test_bench_bad_device(tmp_path):
    error_line(invoke("bench", "--plan", tmp_path / "p.yaml", "--device", "tpu"), 2, "not a device")


def test_bench_allow_cpu_writes_json(good_plan, tmp_path):
    out = tmp_path / "bench.json"
    result = invoke("bench", "--allow-cpu", "--plan", good_plan, "--steps", "5", "--warmup", "0", "--json", out)
    assert_clean(result)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert sorted({row["bucket"] for row in report["rows"]}) == [1, 2]
    assert [context["eager_fallbacks"] for context in report["contexts"]] == [0]  # counted, none here
    assert no_tmp_leftovers(tmp_path) == []


def test_bench_eager_plan_refused(tmp_path):
    path = tmp_path / "eager.yaml"
    assert (
        invoke("capture", "tiny", "--device", "cpu", "--buckets", "1", "--mode", "eager", "--plan", path).exit_code == 0
    )
    error_line(invoke("bench", "--allow-cpu", "--plan", path), 2, "no graph to time")


# ---------------------------------------------------------------------------------------- writing plans


def test_capture_plan_under_a_file(tmp_path):
    """The plan's folder cannot be created: a usage error naming the plan path, raised before any
    model is loaded, not 'unexpected FileExistsError' after the capture."""
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    target = blocker / "p.yaml"
    line = error_line(invoke("capture", "tiny", "--device", "cpu", "--buckets", "1", "--plan", target), 2)
    assert str(target) in line
    assert blocker.read_text() == "x"


def test_interrupted_plan_write_keeps_old_plan(tmp_path, monkeypatch):
    path = tmp_path / "p.yaml"
    assert invoke("capture", "tiny", "--device", "cpu", "--buckets", "1", "--plan", path).exit_code == 0
    before = path.read_text()

    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    result = invoke("capture", "tiny", "--device", "cpu", "--buckets", "1,2", "--plan", path, "--force")
    assert_clean(result)
    assert result.exit_code == 130, result.output
    assert "interrupted" in result.stderr
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]


# ----------------------------------------------------------------------------------------- happy paths


def test_capture_then_verify(tmp_path):
    path = tmp_path / "p.yaml"
    result = invoke("capture", "tiny", "--device", "cpu", "--plan", path)
    assert_clean(result)
    assert result.exit_code == 0, result.output
    assert "plan written to" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"], "atomic write left files behind"
    plan = yaml.safe_load(path.read_text())
    assert plan["model"] == "tiny" and plan["mode"] == "full" and plan["buckets"] == [1, 2, 4, 8]

    # Replacing it (--force) is atomic too.
    result = invoke("capture", "tiny", "--device", "cpu", "--buckets", "2,4", "--plan", path, "--force")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]
    assert yaml.safe_load(path.read_text())["buckets"] == [2, 4]

    result = invoke("verify", "--plan", path)
    assert_clean(result)
    assert result.exit_code == 0, result.output
    assert "verified" in result.stdout
    assert result.stderr == ""


def test_capture_default_plan_path_then_verify(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert invoke("capture", "tiny", "--device", "cpu", "--buckets", "1").exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cugraph-accel.plan.yaml"]
    result = invoke("verify")
    assert_clean(result)
    assert result.exit_code == 0, result.output


def test_capture_json_is_valid_json(tmp_path):
    path = tmp_path / "p.yaml"
    result = invoke("capture", "tiny", "--device", "cpu", "--buckets", "1,2", "--plan", path, "--json", "-")
    assert_clean(result)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["plan_path"] == str(path)
    assert data["plan"]["model"] == "tiny"
    assert data["plan"]["buckets"] == [1, 2]
    assert yaml.safe_load(path.read_text())["buckets"] == data["plan"]["buckets"]


def test_verify_json_is_valid_json(good_plan):
    result = invoke("verify", "--plan", good_plan, "--json", "-")
    assert_clean(result)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["passed"] is True
    assert {row["bucket"] for row in data["rows"]} == {1, 2}


def test_verify_single_bucket_plan(tmp_path):
    path = tmp_path / "one.yaml"
    assert invoke("capture", "tiny", "--device", "cpu", "--buckets", "1", "--plan", path).exit_code == 0
    assert yaml.safe_load(path.read_text())["buckets"] == [1]
    result = invoke("verify", "--plan", path)
    assert_clean(result)
    assert result.exit_code == 0, result.output
    assert "replaying 1 of 1 graph (1 batch bucket x 1 context bucket)" in result.stdout


def test_verify_hand_edited_single_bucket_plan(good_plan, tmp_path):
    path = plan_variant(good_plan, tmp_path, buckets=[4], captures=[])
    result = invoke("verify", "--plan", path, "--json", "-")
    assert_clean(result)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert {(r["bucket"], r["batch"]) for r in rows} == {(4, 4), (4, 1)}  # full and padded, at spread slots


def test_capture_eager_then_verify(tmp_path):
    path = tmp_path / "eager.yaml"
    result = invoke("capture", "tiny", "--device", "cpu", "--buckets", "1,2", "--mode", "eager", "--plan", path)
    assert_clean(result)
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(path.read_text())["mode"] == "eager"
    result = invoke("verify", "--plan", path)
    assert_clean(result)
    assert result.exit_code == 0, result.output
    assert "no graph to verify" in result.stdout


# ---------------------------------------------------------------------------------------- global flags


def test_version():
    result = invoke("--version")
    assert_clean(result)
    assert result.exit_code == 0
    assert result.stdout.strip() == f"cugraph-accel {__version__}"


def test_debug_shows_traceback_default_does_not(tmp_path):
    missing = tmp_path / "nope"
    plain = invoke("capture", missing)
    error_line(plain, 1, "does not exist")

    debug = invoke("--debug", "capture", missing)
    assert debug.exit_code == 1
    assert "Traceback" in debug.stderr
    assert "ModelNotFoundError" in debug.stderr
    assert [line for line in debug.stderr.splitlines() if line.startswith("error:")] == [
        line for line in plain.stderr.splitlines() if line.startswith("error:")
    ]


def test_debug_env_variable(tmp_path):
    result = invoke("capture", tmp_path / "nope", env={DEBUG_ENV: "1"})
    assert result.exit_code == 1
    assert "Traceback" in result.stderr


def test_debug_flag_does_not_leak_into_the_next_invocation(tmp_path):
    """`--debug` is per invocation: calling the app again in the same process without it must not print a
    traceback (cli/main.py sets os.environ and never restores it)."""
    missing = str(tmp_path / "nope")
    first = runner.invoke(app, ["--debug", "capture", missing])
    assert "Traceback" in first.stderr
    second = runner.invoke(app, ["capture", missing])
    error_line(second, 1, "does not exist")


def test_verify_repeat_runs_every_case_again_with_new_inputs(good_plan, monkeypatch):
    from accelerate_graph.verify import against_eager

    seeds = []
    real = against_eager._draw
    monkeypatch.setattr(
        against_eager, "_draw", lambda rows, cols, vocab, seed: seeds.append(seed) or real(rows, cols, vocab, seed)
    )
    result = invoke("verify", "--plan", good_plan, "--repeat", "3", "--json", "-")
    assert_clean(result)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    once = len(data["rows"]) // 3
    assert [r["repeat"] for r in data["repeats"]] == [1, 2, 3]
    assert all(r["runs"] == once and r["failed"] == 0 for r in data["repeats"])
    assert len(seeds) == len(set(seeds)) == 3 * (once + 1)  # one prompt and one draw per case, never reused


def test_a_failure_in_a_later_repeat_is_named_in_its_line():
    """Only the first repeat's table is printed: a later repeat's line says which case failed and why."""
    from types import SimpleNamespace

    from cli.verify_cmd import _repeat_line, _repeat_summary

    rows = [
        SimpleNamespace(passed=True, ratio=1.1, bucket=1, batch=1, detail=""),
        SimpleNamespace(passed=False, ratio=1.2, bucket=8, batch=2, detail="3 greedy tokens differ"),
    ]
    summary = _repeat_summary(4, rows)
    assert summary["failed"] == 1 and summary["first_failure"] == "bucket 8, batch 2: 3 greedy tokens differ"
    assert _repeat_line(summary).endswith("first: bucket 8, batch 2: 3 greedy tokens differ")
    assert "first:" not in _repeat_line(_repeat_summary(5, rows[:1]))


def test_verify_says_where_its_time_went(good_plan, monkeypatch):
    """A long verify (minutes at 4096 slots on an 8B) says how its time split between the phases; the JSON
    has the same sums, over every repeat."""
    from types import SimpleNamespace

    from accelerate_graph.verify import against_eager

    ticks = iter(range(10_000))  # verify's clock reads one second later each time: whole seconds per phase
    monkeypatch.setattr(against_eager, "time", SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    result = invoke("verify", "--plan", good_plan, "--repeat", "2", "--json", "-")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    cases = len(data["rows"])  # every case of both repeats: one eager, replay and judging phase each
    seconds = dict(data["seconds"])
    assert 1 <= seconds.pop("long runs") <= cases  # one stretch per graph before its last case
    assert seconds == {"prefill": 2.0, "eager": cases, "replay": cases, "judging": cases}  # float32 model
    assert data["reference"] == {  # a float32 model is its own reference
        "steps_a_forward": 1,
        "share_of_eager": None,
        "noise_share": None,
        "why": "no reference run: a float32 model is its own",
    }
    shown = invoke("verify", "--plan", good_plan)
    assert "verify took" in shown.output and "prefill" in shown.output


def test_verify_says_how_its_float32_reference_ran(tmp_path):
    """In bf16 the reference runs many steps a forward where the session's probe allowed it: verify says so, with
    the share of eager's distance the probe measured, on screen and in the JSON."""
    plan = tmp_path / "bf16.yaml"
    capture = ("capture", "tiny", "--device", "cpu", "--dtype", "bf16", "--buckets", "1", "--max-cache-len", "64")
    assert invoke(*capture, "--plan", str(plan)).exit_code == 0
    result = invoke("verify", "--plan", str(plan), "--json", "-")
    assert result.exit_code == 0, result.output
    reference = json.loads(result.stdout)["reference"]
    assert reference["steps_a_forward"] == 16 and 0 <= reference["share_of_eager"] < 0.02, reference
    shown = invoke("verify", "--plan", str(plan))
    assert "float32 reference: 16 steps a forward (a forward of several tokens" in shown.output


def test_an_error_names_the_keyword_in_python_and_the_flag_on_the_command_line():
    """One error, two spellings of its options: `str(err)` writes the Python keyword, the CLI the flag; the
    exit code is the error's own."""
    from accelerate_graph.common.errors import BadOptionError
    from accelerate_graph.pipeline import CaptureRequest, prepare

    with pytest.raises(BadOptionError) as err:
        prepare(CaptureRequest(model="tiny", device="cpu", max_cache_len=10, prompt_len=20))
    assert str(err.value) == (
        "prompt_len=20 leaves no room in a cache of 10 slots. Lower prompt_len or raise max_cache_len."
    )
    result = invoke("capture", "tiny", "--device", "cpu", "--max-cache-len", "10", "--prompt-len", "20")
    line = error_line(result, err.value.exit_code)
    assert line == (
        "error: --prompt-len 20 leaves no room in a cache of 10 slots. Lower --prompt-len or raise --max-cache-len."
    )


@pytest.mark.parametrize(
    ("placeholder", "keyword", "flag"),
    [
        ("{max_cache_len}", "max_cache_len", "--max-cache-len"),
        ("{mode='eager'}", "mode='eager'", "--mode eager"),
        ("{fuse=False}", "fuse=False", "no --fuse"),
        ("{force=True}", "force=True", "--force"),
        ("{buckets=(1, 8)}", "buckets=(1, 8)", "--buckets 1,8"),
        ("{max_memory_mib=64.5}", "max_memory_mib=64.5", "--max-memory 64.5"),
        ("{contexts}", "contexts", "--context-buckets"),
        ("{device='0\\x1e0'}", "device='0\\x1e0'", "--device '0\\x1e0'"),
        ("{settings.allreduce='nccl'}", "settings.replace(allreduce='nccl')", "--set allreduce=nccl"),
        ("{settings.pdl=False}", "settings.replace(pdl=False)", "--set pdl=off"),
        ('e.g. {"prompt": "Hi"}', 'e.g. {"prompt": "Hi"}', 'e.g. {"prompt": "Hi"}'),  # JSON is no placeholder
    ],
)
def test_an_option_placeholder_is_written_as_keyword_or_flag(placeholder, keyword, flag):
    from accelerate_graph.common.errors import CaptureError
    from cli.errors import describe

    err = CaptureError(placeholder)
    assert str(err) == keyword and describe(err) == (flag, 1)


# --------------------------------------------------------------------------------------------- warnings


def _warn_both() -> None:
    import warnings

    from accelerate_graph.common.errors import EngineWarning

    warnings.warn("no tuning table for Some GPU", EngineWarning, stacklevel=1)
    warnings.warn("a library's own advice", UserWarning, stacklevel=1)


@pytest.mark.parametrize("debug", [False, True])
def test_the_engines_notices_are_one_line_and_others_keep_their_source(debug, capsys, recwarn, monkeypatch):
    """Python's own display (pytest's recorder here) gets every other warning, and ours under --debug."""
    from cli.errors import guarded

    monkeypatch.setattr("cli.errors.debug_enabled", lambda: debug)
    guarded(_warn_both)()
    err = capsys.readouterr().err
    shown_by_python = [str(w.message) for w in recwarn]
    assert "a library's own advice" in shown_by_python
    if debug:
        assert "no tuning table for Some GPU" in shown_by_python and "warning:" not in err
    else:
        assert err == "warning: no tuning table for Some GPU\n"
        assert "no tuning table for Some GPU" not in shown_by_python
