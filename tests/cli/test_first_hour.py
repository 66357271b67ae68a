"""What a new user and a fault hunter hit in the first hour (each case failed before its fix).

docs/RELIABILITY.md ("First hour") lists every case with its test.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from accelerate_graph.common.atomic_io import atomic_write_text, check_writable
from accelerate_graph.common.errors import BadOptionError, PlanError, WriteError
from cli.main import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
SMALL = ["--buckets", "1", "--max-cache-len", "32", "--context-buckets", "full"]


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def one_error(result, code: int) -> str:
    assert result.exit_code == code, result.output
    lines = error_lines(result)
    assert len(lines) == 1, result.output
    assert "unexpected" not in lines[0] and "Traceback" not in result.output
    return lines[0]


@pytest.fixture(scope="module")
def tiny_plan(tmp_path_factory) -> Path:
    """A plan of the built-in tiny recipe, small enough to re-capture quickly."""
    path = tmp_path_factory.mktemp("plan") / "tiny.plan.yaml"
    result = runner.invoke(app, ["capture", *SMALL, "--plan", str(path)])
    assert result.exit_code == 0, result.output
    return path


def plan_copy(tiny_plan: Path, tmp_path: Path, edit=None, text_edit=None) -> Path:
    data = yaml.safe_load(tiny_plan.read_text())
    if edit:
        edit(data)
    text = yaml.safe_dump(data, sort_keys=False)
    path = tmp_path / "edited.plan.yaml"
    path.write_text(text_edit(text) if text_edit else text)
    return path


# --- 1. nothing a user has is overwritten by another kind of file ---------------------------------


def test_bench_json_refuses_to_overwrite_the_plan(tiny_plan):
    before = tiny_plan.read_bytes()
    result = runner.invoke(app, ["bench", "--plan", str(tiny_plan), "--json", str(tiny_plan), "--allow-cpu"])
    assert "holds a plan" in one_error(result, 2) and "--force" in result.stderr
    assert tiny_plan.read_bytes() == before


@pytest.mark.parametrize(
    "name, content",
    [
        ("model.safetensors", b"\0" * 16),
        ("pytorch_model.bin", b"\0" * 16),
        ("config.json", b"{}"),
        ("tiny.yaml", b"name: tiny\nmodel_type: llama\n"),
        ("old.plan.yaml", b"format: cugraph-accel-plan/1\n"),
    ],
)
def test_outputs_never_replace_a_plan_recipe_or_model_file_without_force(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(BadOptionError, match="pass force=True to replace it"):
        check_writable(path, "JSON results")
    check_writable(path, "JSON results", force=True)  # said plainly: allowed
    (tmp_path / "results.json").write_text("{}")
    check_writable(tmp_path / "results.json", "JSON results")  # an old result: replaced freely


def test_capture_plan_over_a_model_file_is_refused_before_loading(tiny_model_dir, tmp_path):
    folder = Path(shutil.copytree(tiny_model_dir("llama"), tmp_path / "m"))
    before = (folder / "config.json").read_bytes()
    result = runner.invoke(app, ["capture", str(folder), "--plan", str(folder / "config.json")])
    assert "holds a model file" in one_error(result, 2)
    assert "model " not in result.stdout  # refused before the model was loaded
    assert (folder / "config.json").read_bytes() == before


# --- a plan is never lost: replaced only with --force, one capture at a time --------------------


def test_a_second_capture_is_refused_and_force_replaces(tmp_path):
    plan = tmp_path / "p.yaml"
    assert runner.invoke(app, ["capture", *SMALL, "--plan", str(plan)]).exit_code == 0
    before = plan.read_bytes()
    result = runner.invoke(app, ["capture", "--buckets", "2", "--plan", str(plan)])
    line = one_error(result, 2)
    assert f"{plan} already holds a plan for 'tiny'" in line and "Pass --force" in line
    assert "model " not in result.stdout  # refused before the model was loaded
    assert plan.read_bytes() == before
    forced = runner.invoke(app, ["capture", *SMALL[2:], "--buckets", "2", "--plan", str(plan), "--force"])
    assert forced.exit_code == 0, forced.output
    assert yaml.safe_load(plan.read_text())["buckets"] == [2]
    assert not (tmp_path / "p.yaml.lock").exists()


def test_a_bare_capture_keeps_a_real_models_plan(tiny_plan, tmp_path, monkeypatch):
    """A bare `capture` (the default model, tiny) replaced the plan of the model the user had captured."""
    real = plan_copy(tiny_plan, tmp_path, lambda d: d.update(model="qwen2.5-0.5b"))
    monkeypatch.chdir(tmp_path)
    real.rename(tmp_path / "cugraph-accel.plan.yaml")
    before = (tmp_path / "cugraph-accel.plan.yaml").read_bytes()
    line = one_error(runner.invoke(app, ["capture"]), 2)
    assert "already holds a plan for 'qwen2.5-0.5b'" in line
    assert (tmp_path / "cugraph-accel.plan.yaml").read_bytes() == before


def test_a_plan_written_during_the_capture_is_not_replaced(tmp_path, monkeypatch):
    """Checked again at write time: a plan another tool (taking no lock) wrote while this capture ran."""
    import accelerate_graph.pipeline as pipeline

    plan = tmp_path / "p.yaml"
    other = "format: cugraph-accel-plan/1\nmodel: other-model\n"
    real = pipeline.prepare

    def prepare_then_another_writes(*args, **kwargs):
        prepared = real(*args, **kwargs)
        plan.write_text(other)
        return prepared

    monkeypatch.setattr(pipeline, "prepare", prepare_then_another_writes)
    result = runner.invoke(app, ["capture", *SMALL, "--plan", str(plan)])
    assert "already holds a plan for 'other-model'" in one_error(result, 2)
    assert plan.read_text() == other and "plan written" not in result.stdout


def test_the_plan_lock_names_its_holder_and_a_dead_holders_file_locks_nothing(tmp_path):
    from accelerate_graph.common.file_lock import exclusive_lock, lock_path

    plan = tmp_path / "p.yaml"
    with exclusive_lock(plan, "plan", "Wait."):
        assert lock_path(plan).read_text() == f"{os.getpid()}\n"
        with pytest.raises(WriteError, match=rf"another process \(pid {os.getpid()}\) is writing the plan"):
            with exclusive_lock(plan, "plan", "Wait."):
                pass
    assert not lock_path(plan).exists()
    lock_path(plan).write_text("999999\n")  # left by a killed holder: the kernel dropped its lock
    with exclusive_lock(plan, "plan", "Wait."):
        assert lock_path(plan).read_text() == f"{os.getpid()}\n"


# The real CLI, its capture held at a gate (a file) until the test opens it.
GATED_CLI = """
import os, sys, time
import accelerate_graph.pipeline as pipeline
real = pipeline.prepare
def gated(*args, **kwargs):
    deadline = time.time() + 300
    while not os.path.exists(os.environ["GATE"]) and time.time() < deadline:
        time.sleep(0.05)
    return real(*args, **kwargs)
pipeline.prepare = gated
from cli.main import app
app(prog_name="cugraph-accel")
"""


def test_two_captures_into_one_plan_one_wins(tmp_path):
    """Two captures at once into one folder both printed `plan written`; only one plan survived."""
    plan, gate, lock = tmp_path / "p.yaml", tmp_path / "gate", tmp_path / "p.yaml.lock"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GATE": str(gate)}
    argv = [sys.executable, "-c", GATED_CLI, "capture", *SMALL, "--plan", str(plan)]
    first = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (lock.exists() and lock.read_text().strip() == str(first.pid)):
            assert first.poll() is None and time.monotonic() < deadline, "the first capture never took the lock"
            time.sleep(0.05)
        second = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    finally:
        gate.touch()
        stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr
    assert "plan written" in stdout and "plan written" not in second.stdout
    errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
    assert second.returncode == 1 and len(errors) == 1 and "Traceback" not in second.stderr, second.stderr
    assert f"another process (pid {first.pid}) is writing the plan {plan}" in errors[0]
    assert yaml.safe_load(plan.read_text())["buckets"] == [1] and not lock.exists()


# --- one --json convention; no option swallows the next flag ------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--json", "--allow-cpu"],
        ["zoo", "--markdown", "--json", "x.json"],
        ["capture", "--plan", "--json", "out.json"],
        ["verify", "--buckets", "--steps", "3"],
    ],
)
def test_an_option_never_swallows_the_next_flag(argv):
    line = one_error(runner.invoke(app, argv), 2)
    assert f"{argv[-2] if argv[0] == 'bench' else argv[1]} needs a value" in line


@pytest.mark.parametrize(
    "argv, wanted",
    [(["verify", "--json"], "a PATH, or - for standard output"), (["verify", "--plan"], "its value")],
)
def test_an_option_ending_the_line_is_one_line_asking_for_its_value(argv, wanted):
    """The bare `--json` of capture and verify, deprecated in 0.1.0, is refused like any option missing its value."""
    line = one_error(runner.invoke(app, argv), 2)
    assert f"{argv[-1]} needs a value, but it is the last word. Give {argv[-1]} {wanted}." in line


def test_json_takes_a_path_on_every_command(tiny_plan, tmp_path, monkeypatch):
    """`--json PATH` was read as MODEL on capture and verify unless PATH ended in .json."""
    from cli.argv import check_option_values

    assert check_option_values({"--json"}, ["--json", "tiny"]) == ["--json", "tiny"]
    out = tmp_path / "out.txt"
    result = runner.invoke(app, ["capture", "tiny", "--json", str(out), *SMALL, "--plan", str(tmp_path / "p.yaml")])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["plan"]["model"] == "tiny"
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["verify", "--plan", str(tiny_plan), "--steps", "2", "--json", "results"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "results").read_text())["passed"] is True
    dash = runner.invoke(app, ["verify", "--plan", str(tiny_plan), "--steps", "2", "--json", "-"])
    assert dash.exit_code == 0, dash.output
    assert json.loads(dash.stdout)["passed"] is True


def test_capture_json_on_the_plans_own_path_is_refused(tmp_path):
    plan = str(tmp_path / "p.yaml")
    line = one_error(runner.invoke(app, ["capture", "--plan", plan, "--json", plan]), 2)
    assert "is the plan's own path" in line and not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["capture", "--plan", "-"],
        ["verify", "--plan=-"],
        ["bench", "--allow-cpu", "--plan", "-"],
        ["generate", "--input-ids", "1,2", "--plan", "-"],
    ],
)
def test_plan_dash_is_refused(argv, tmp_path, monkeypatch):
    """`--plan -` wrote a file named `-`."""
    monkeypatch.chdir(tmp_path)
    assert "--plan - names no file" in one_error(runner.invoke(app, argv), 2)
    assert list(tmp_path.iterdir()) == []


def test_json_path_writes_a_file_and_keeps_the_tables(tiny_plan, tmp_path):
    out = tmp_path / "verify.json"
    result = runner.invoke(app, ["verify", "--plan", str(tiny_plan), "--steps", "2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert (
        "replay / eager, each against the reference" in " ".join(result.stdout.split())
        and json.loads(out.read_text())["passed"] is True
    )


def test_zoo_json_dash_prints_the_document(monkeypatch):
    from accelerate_graph.zoo.run import ZooResult

    def fake_run_zoo(types, *args, on_result, **kwargs):
        results = [ZooResult(t, "full", stage="done", mode="full") for t in types]
        for r in results:
            on_result(r)
        return results

    monkeypatch.setattr("accelerate_graph.zoo.run.run_zoo", fake_run_zoo)
    result = runner.invoke(app, ["zoo", "--types", "llama", "--device", "cpu", "--json", "-"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["results"][0]["model_type"] == "llama"


def test_a_seed_with_greedy_decoding_is_said_to_do_nothing(tiny_model_dir):
    """`--seed` without --temperature was silently ignored."""
    argv = ["generate", tiny_model_dir("llama"), "--input-ids", "3,4,5", "--max-new-tokens", "2"]
    argv += ["--buckets", "1", "--max-cache-len", "32", "--device", "cpu", "--seed", "7"]
    greedy = runner.invoke(app, argv)
    assert greedy.exit_code == 0, greedy.output
    assert "note: --seed 7 has no effect: decoding is greedy" in " ".join(greedy.stdout.split())
    sampled = runner.invoke(app, [*argv, "--temperature", "0.7"])
    assert sampled.exit_code == 0 and "has no effect" not in sampled.output, sampled.output


# --- 2. running it: --debug anywhere, help with examples, the README's commands -----------------


def test_debug_works_after_the_subcommand():
    result = runner.invoke(app, ["capture", "--buckets", "0", "--debug"])
    assert result.exit_code == 2 and "No such option" not in result.output
    assert "Traceback" in result.stderr and len(error_lines(result)) == 1
    plain = runner.invoke(app, ["capture", "--buckets", "0"])
    assert "Traceback" not in plain.stderr  # --debug is for one invocation only


@pytest.mark.parametrize("command", ["capture", "verify", "bench", "generate", "zoo", "recipes", "settings", None])
def test_each_commands_help_shows_examples(command):
    result = runner.invoke(app, [command, "--help"] if command else ["--help"])
    assert result.exit_code == 0 and "Examples" in result.stdout
    assert f"cugraph-accel {command or 'capture'}" in result.stdout
    if command is not None:
        assert "--json" in result.stdout and "PATH" in result.stdout


def test_recipes_json_dash_lists_the_recipes():
    result = runner.invoke(app, ["recipes", "--json", "-"])
    assert result.exit_code == 0, result.output
    names = [r["name"] for r in json.loads(result.stdout)["recipes"]]
    assert "tiny" in names and "qwen2.5-0.5b" in names


def test_fuse_kernels_folder_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "p.inductor").write_text("not a folder")
    result = runner.invoke(app, ["capture", "--fuse", "--plan", str(tmp_path / "p.yaml")])
    assert "p.inductor, which is a file" in one_error(result, 2)


def test_readme_and_quickstart_say_how_to_run_the_command():
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert ".venv/bin/activate" in readme and ".venv/bin/cugraph-accel" in readme
    quickstart = makefile.split("quickstart: install", 1)[1].split("\n\n", 1)[0]
    assert "bin/activate" in quickstart.splitlines()[-1]  # the last thing make quickstart prints


def test_the_script_points_at_the_interrupt_safe_entry():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'cugraph-accel = "cli.entry:main"' in pyproject


# --- 3. one line for every fault a user can cause ------------------------------------------------


@pytest.mark.parametrize("length", ["2", "3"])
def test_tiny_cache_lengths_are_one_line(length, tmp_path):
    result = runner.invoke(app, ["capture", "--max-cache-len", length, "--plan", str(tmp_path / "p.yaml")])
    assert f"--max-cache-len {length} is too small" in one_error(result, 2)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garble(path: Path) -> None:
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!" + b"\0" * 64)


@pytest.mark.parametrize("damage, words", [(_truncate, "truncated"), (_garble, "corrupt")])
def test_a_damaged_safetensors_file_is_named(tiny_model_dir, tmp_path, damage, words):
    folder = Path(shutil.copytree(tiny_model_dir("llama"), tmp_path / "m"))
    damage(folder / "model.safetensors")
    result = runner.invoke(app, ["capture", str(folder), "--plan", str(tmp_path / "p.yaml")])
    line = one_error(result, 1)
    assert str(folder / "model.safetensors") in line and words in line


def test_host_out_of_memory_says_memory_not_attention(monkeypatch, tiny_model_dir):
    import torch

    from accelerate_graph.common.errors import ResourceError
    from accelerate_graph.core import decode_session
    from accelerate_graph.models.loading import load_model

    model = load_model(tiny_model_dir("llama"), torch.device("cpu"), torch.float32).model

    def no_memory(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr(decode_session.DecodeSession, "forward", no_memory)
    with pytest.raises(ResourceError) as err:
        decode_session.DecodeSession(model, 4, 32)
    assert "out of host memory" in str(err.value) and "attn" not in str(err.value)
    assert "Lower the largest buckets value or max_cache_len." in str(err.value)


@pytest.mark.parametrize("option", ["--plan", "--json"])
@pytest.mark.parametrize("path", ["/proc/cugraph-accel-test/out.json", "/sys/cugraph-accel-test.json"])
def test_unwritable_special_paths_are_refused_before_any_work(option, path):
    if not Path("/" + path.split("/")[1]).is_dir():
        pytest.skip("no /proc or /sys here")
    result = runner.invoke(app, ["capture", *SMALL, option, path])
    assert "not writable" in one_error(result, 2) and "model " not in result.stdout


def test_a_plan_whose_folder_cannot_be_replaced_fails_before_capture(tmp_path, monkeypatch):
    """The folder cannot take a new file (read-only mount, permissions: root ignores chmod, so the
    refusal is simulated where the probe creates its file)."""
    import tempfile

    real = tempfile.mkstemp

    def refuse(*args, dir=None, **kwargs):
        if dir is not None and Path(dir) == tmp_path:
            raise PermissionError(13, "Permission denied")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    result = runner.invoke(app, ["capture", *SMALL, "--plan", str(tmp_path / "p.yaml")])
    assert "not writable (Permission denied)" in one_error(result, 2) and "model " not in result.stdout


def test_a_write_that_fails_at_the_end_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(PermissionError(13, "Permission denied")))
    with pytest.raises(WriteError, match=r"cannot write .*p\.yaml: Permission denied"):
        atomic_write_text(tmp_path / "p.yaml", "x")
    assert list(tmp_path.iterdir()) == []  # no temp file left


def _interrupt_after(seconds: float, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-m", "cli", *argv], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    time.sleep(seconds)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    return subprocess.CompletedProcess(child.args, child.returncode, out.decode(), err.decode())


def _in_interpreter_start_up(stderr: str) -> bool:
    """A traceback none of whose frames is ours: Ctrl-C came while Python itself was starting (site,
    .pth files), before our first line could install the handler; no Python program can catch that."""
    frames = re.findall(r'File "([^"]+)"', stderr)
    return bool(frames) and not any(frame.startswith(str(ROOT)) for frame in frames)


@pytest.mark.parametrize("seconds", [0.15, 0.5, 1.0, 2.0])  # during the first imports, then torch's
def test_ctrl_c_at_any_moment_exits_130_without_a_traceback(seconds, tmp_path):
    done = _interrupt_after(seconds, ["capture", *SMALL, "--plan", "p.yaml"], tmp_path)
    if "Traceback" in done.stderr and _in_interpreter_start_up(done.stderr):
        pytest.skip("the interrupt came during the interpreter's own start-up (a loaded machine)")
    # -2: ended by the signal before Python ran any of our code (a shell shows 130), nothing printed
    assert done.returncode in (130, -signal.SIGINT), done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr
    assert not (tmp_path / "p.yaml").exists()


def test_the_interrupt_handler_comes_before_any_import_of_ours():
    """cli/entry.py imports only what the interpreter loaded at start-up (and signal, built in), so the handler is in place
    at once; the rest (typer, torch) is imported after it."""
    code = (
        "import sys; before = set(sys.modules); import cli.entry; "
        "new = set(sys.modules) - before - {'cli', 'cli.entry', 'signal'}; print(sorted(new)); sys.exit(bool(new))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout


# --- 4. nothing changes silently -----------------------------------------------------------------


def test_a_shrunk_prompt_is_said_and_recorded(tmp_path):
    result = runner.invoke(
        app, ["capture", "--buckets", "1", "--max-cache-len", "8", "--plan", str(tmp_path / "p.yaml"), "--json", "-"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["plan"]["prompt_len"] == 4
    assert any("prompt is 4 tokens, not 16" in note for note in document["notes"])
    assert "prompt is 4 tokens, not 16" in result.stderr


def test_a_prompt_that_fills_the_cache_still_gets_every_step(tmp_path):
    """verify starts its runs early enough for --steps: the prompt is rewound, not the steps cut."""
    plan = str(tmp_path / "p.yaml")
    captured = runner.invoke(
        app, ["capture", "--buckets", "1", "--max-cache-len", "16", "--prompt-len", "15", "--plan", plan]
    )
    assert captured.exit_code == 0, captured.output
    result = runner.invoke(app, ["verify", "--plan", plan, "--json", "-"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["steps_requested"] == 8 and {row["steps"] for row in document["rows"]} == {8}
    assert document["shortened"] == [] and not any("fewer than --steps" in note for note in document["notes"])


def test_a_shortened_verify_run_is_said_and_recorded(tmp_path):
    plan = str(tmp_path / "p.yaml")
    captured = runner.invoke(app, ["capture", "--buckets", "1", "--max-cache-len", "6", "--plan", plan])
    assert captured.exit_code == 0, captured.output
    result = runner.invoke(app, ["verify", "--plan", plan, "--json", "-"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["steps_requested"] == 8 and {row["steps"] for row in document["rows"]} == {5}
    assert [(s["asked"], s["run"], s["why"]) for s in document["shortened"]] == [(8, 5, "context 6 holds slots 0-5")]
    assert any("1 of 1 runs ran fewer than --steps 8" in note for note in document["notes"])
    assert "fewer than --steps 8" in result.stderr


# --- 5. the model is who the plan says ------------------------------------------------------------


def test_a_model_folder_replaced_after_capture_is_refused(tiny_model_dir, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny_model_dir("llama"), folder)
    plan = str(tmp_path / "p.yaml")
    assert runner.invoke(app, ["capture", str(folder), *SMALL, "--plan", plan]).exit_code == 0
    shutil.rmtree(folder)
    shutil.copytree(tiny_model_dir("qwen2"), folder)
    line = one_error(runner.invoke(app, ["verify", "--plan", plan]), 1)
    assert "is not the one plan" in line and "config changed" in line


def test_missing_weights_are_reported_and_not_called_trained(tiny_model_dir, tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    from accelerate_graph.models.loading import load_model

    folder = Path(shutil.copytree(tiny_model_dir("llama"), tmp_path / "m"))
    weights = load_file(folder / "model.safetensors")
    kept = {name: t for name, t in weights.items() if ".layers.1." not in name}
    assert len(kept) < len(weights)
    save_file(kept, folder / "model.safetensors", metadata={"format": "pt"})
    loaded = load_model(str(folder), torch.device("cpu"), torch.float32)
    assert len(loaded.initialised) == len(weights) - len(kept)
    assert "trained" not in loaded.label and "initialised at random" in loaded.label
    assert any("missing from the checkpoint" in note for note in loaded.notes)
    whole = load_model(tiny_model_dir("llama"), torch.device("cpu"), torch.float32)
    # any local folder was labelled "trained weights": its weights are said by where they came from
    assert whole.initialised == [] and "trained" not in whole.label
    assert f"weights from {tiny_model_dir('llama')})" in whole.label


def test_a_relative_model_path_resolves_against_the_plans_folder(tiny_plan, tmp_path, monkeypatch):
    from accelerate_graph.core.plan import read_plan, write_plan

    plan = read_plan(tiny_plan)
    plan.model, plan.model_kind = "./models/m", "folder"
    (tmp_path / "models" / "m").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    write_plan(plan, "plans/p.yaml")  # written relative to the plan's folder
    assert yaml.safe_load(Path("plans/p.yaml").read_text())["model"] == os.path.join("..", "models", "m")
    monkeypatch.chdir(tmp_path / "models")  # and read from anywhere
    again = read_plan(tmp_path / "plans" / "p.yaml")
    assert Path(again.model).resolve() == (tmp_path / "models" / "m").resolve()


# --- 6. plans that should not be accepted -------------------------------------------------------


@pytest.mark.parametrize(
    "edit, text_edit, words",
    [
        (lambda d: d.update(buckets=[1, 1]), None, "list a bucket twice"),
        (lambda d: d.update(model_type="not_a_model"), None, "is not a model type transformers knows"),
        (None, lambda t: t + "mode: full\n", "duplicate key 'mode'"),
        (lambda d: d.update(regions=[{"path": 3}]), None, "regions must each have"),
        # the contexts were blamed for a negative cache length: each field is checked before what reads it
        (lambda d: d.update(max_cache_len=-5, contexts=[8]), None, "max_cache_len -5 must be at least 2"),
        (lambda d: d.update(prompt_len=0, contexts=[8]), None, "prompt_len 0 must be at least 1"),
    ],
)
def test_plan_validation_rejects(tiny_plan, tmp_path, edit, text_edit, words):
    from accelerate_graph.core.plan import read_plan

    path = plan_copy(tiny_plan, tmp_path, edit, text_edit)
    with pytest.raises(PlanError, match=re.escape(words)):
        read_plan(path)
    assert words in one_error(runner.invoke(app, ["verify", "--plan", str(path)]), 1)


def test_plan_regions_must_name_modules_of_the_model(tiny_plan, tmp_path):
    def bogus(data):
        data["regions"] = [{"path": "model.layers.7.mlp", "class": "LlamaMLP", "run": "eager", "reason": "x"}]

    path = plan_copy(tiny_plan, tmp_path, bogus)
    line = one_error(runner.invoke(app, ["verify", "--plan", str(path)]), 1)
    assert "'model.layers.7.mlp', which is no module of tiny" in line


def test_a_plan_for_another_model_type_is_refused(tiny_plan, tmp_path):
    path = plan_copy(tiny_plan, tmp_path, lambda d: d.update(model_type="qwen2", fingerprint={}))
    assert "says model_type 'qwen2', but tiny is 'llama'" in one_error(
        runner.invoke(app, ["verify", "--plan", str(path)]), 1
    )


def test_rewriting_a_file_keeps_its_permissions(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("old")
    path.chmod(0o640)
    atomic_write_text(path, "new")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640 and path.read_text() == "new"
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "fresh.yaml", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "fresh.yaml").stat().st_mode) == 0o644  # not mkstemp's 0600


# --- 7. tables without a terminal; a fast start -----------------------------------------------------


def test_tables_keep_whole_numbers_without_a_terminal(tiny_plan, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    result = runner.invoke(app, ["verify", "--plan", str(tiny_plan), "--steps", "2"])
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    assert re.search(r"\d\.\de[+-]\d\d", result.stdout)


def test_the_cli_starts_without_torch():
    code = "import sys, cli.main; sys.exit(int('torch' in sys.modules or 'transformers' in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, "cli.main imports torch or transformers at import time"


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["capture", "--help"]])
def test_version_and_help_answer_within_a_second(argv):
    """Measured as the child's CPU time (user + system), best of three: wall time on a shared
    machine swings several-fold with the other jobs' load, CPU time does not (importing torch and
    transformers would take seconds of it)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    best = float("inf")
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([sys.executable, "-m", "cli", *argv], env=env, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert done.returncode == 0, done.stderr
        best = min(best, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    assert best < 1.0, f"{argv} took {best:.2f} s of CPU"


def test_constants_repeated_for_a_fast_start_agree():
    from accelerate_graph.core.plan import DEFAULT_PLAN_PATH
    from accelerate_graph.zoo.run import ENTRY_TIMEOUT_S
    from cli.options import DEFAULT_PLAN_PATH as CLI_PLAN_PATH
    from cli.zoo_cmd import DEFAULT_TIMEOUT_S

    assert CLI_PLAN_PATH == DEFAULT_PLAN_PATH and DEFAULT_TIMEOUT_S == ENTRY_TIMEOUT_S


def test_an_interrupted_write_leaves_no_temp_file(tmp_path):
    from accelerate_graph.common import atomic_io

    seen = []

    def write(handle):
        handle.write("half")
        seen.extend(atomic_io._pending)
        atomic_io.discard_pending_writes()  # what the Ctrl-C handler does before it ends the process
        raise SystemExit(130)

    with pytest.raises(SystemExit):
        atomic_io.atomic_write(tmp_path / "p.yaml", write)
    assert len(seen) == 1 and list(tmp_path.iterdir()) == []
