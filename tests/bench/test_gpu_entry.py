"""benchmarks/gpu.sh, the GPU entry: bad suites are refused in one line; a run leaves one archive under $OUT.

On the CPU the `tests` suite runs its cuda-marked tests as skips, which is enough to check the archive."""

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu.sh"


def baseline_tree(tmp_path: Path) -> str:
    """Another source tree for BASELINE: this one's package, as `git archive` of a commit would give."""
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    for folder in ("accelerate_graph", "cli", "recipes"):
        (baseline / folder).symlink_to(REPO / folder)
    return str(baseline)


def gpu_sh(*suites: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **(env or {})}
    return subprocess.run(["bash", str(SCRIPT), *suites], capture_output=True, text=True, env=environ, timeout=300)


@pytest.mark.parametrize("suites", [(), ("tests", "benchmark")])
def test_no_suite_or_an_unknown_one_is_one_line_and_exit_2(suites, tmp_path):
    done = gpu_sh(*suites, env={"OUT": str(tmp_path)})
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1 and "suites: tests bench verify" in done.stderr
    assert not any(tmp_path.iterdir())  # refused before anything ran


def test_a_suite_run_writes_one_archive_and_ends_with_its_tables(tmp_path):
    out = tmp_path / "out"
    done = gpu_sh("tests", env={"OUT": str(out), "TESTS": "tests/bench/test_gpu_bench.py"})
    assert done.returncode == 0, done.stderr
    assert [p.name for p in out.iterdir()] == ["results-tests.tar.gz"]
    with tarfile.open(out / "results-tests.tar.gz") as archive:
        names = {Path(name).name for name in archive.getnames()}
        log = archive.extractfile("./tests-1.log").read().decode()
    assert {"environment.txt", "parts.tsv", "tables.txt", "tests-1.log", "tests-alone-1.log"} <= names
    assert "skipped" in log and "slowest" in log  # cuda-marked tests skip on the CPU; --durations
    tail = done.stdout.splitlines()[-7:]
    assert tail[0] == "== pytest" and re.match(r"tests-1: \d+ skipped in ", tail[1])  # the suite's table
    assert re.match(r"tests-alone-1: \d+ deselected in ", tail[2])  # no alone test in that file: not a failure
    assert tail[3] == "== parts (exit code, seconds)" and tail[4].split()[:2] == ["tests-1", "0"]
    assert tail[5].split()[:2] == ["tests-alone-1", "0"]
    assert tail[-1].startswith(f"wrote {out / 'results-tests.tar.gz'} in ")


def test_cli_parts_run_the_cli_and_keep_its_one_line_refusal_on_the_cpu(tmp_path):
    out = tmp_path / "out"
    done = gpu_sh("bench", env={"OUT": str(out), "BENCH_ENTRIES": "tiny:64", "BASELINE": baseline_tree(tmp_path)})
    assert done.returncode == 1, done.stderr  # a part failed
    with tarfile.open(out / "results-bench.tar.gz") as archive:
        logs = [archive.extractfile(f"./bench-tiny{end}.log").read().decode() for end in ("", "-baseline")]
    for log in logs:  # each CLI ran (under timeout) and refused to time the CPU
        assert "bench needs a CUDA GPU" in log
    assert re.search(r"^bench-tiny: exit [1-9]", done.stdout, re.M)
    assert re.search(r"^bench-tiny-baseline: exit [1-9]", done.stdout, re.M)
    assert "no bench results" in done.stdout


@pytest.mark.slow
def test_verify_entries_capture_then_verify_repeated_and_end_with_their_table(tmp_path):
    out = tmp_path / "out"
    entries = "tiny:32:plain:1 ; tiny:48:plain:1"  # two phases, one after the other
    env = {"OUT": str(out), "VERIFY_ENTRIES": entries, "REPEAT": "2", "BASELINE": baseline_tree(tmp_path)}
    done = gpu_sh("verify", env=env)
    assert done.returncode == 0, done.stdout[-2000:]
    for name in ("tiny-32-plain", "tiny-48-plain", "tiny-32-plain-baseline"):  # each again from the baseline
        row = next(line for line in done.stdout.splitlines() if line.startswith(f"{name} "))
        assert row.split()[1:4] == ["2", "of", "2"]  # both repeats passed
    with tarfile.open(out / "results-verify.tar.gz") as archive:
        names = {Path(name).name for name in archive.getnames()}
    assert {"capture-tiny-32-plain.log", "verify-tiny-32-plain.log", "verify-tiny-32-plain.json"} <= names
    assert "tiny-32-plain.yaml" not in names  # plans stay out of the archive


def test_the_fp8_suite_writes_a_checkpoint_then_verifies_it_beside_the_fp8_entries(tmp_path):
    """fp8: a fine-grained checkpoint of FP8_FROM written by the package's exporter, captured and verified beside
    FP8_VERIFY's entries (--weights fp8), then benched alone (refused on the CPU, in one line). Plain graphs
    here (FP8_MODE): inductor's CPU compile of the fused step ran past the part's 150 s on a loaded machine."""
    out = tmp_path / "out"
    env = {
        "OUT": str(out),
        "FP8_DIR": str(tmp_path / "scratch"),
        "FP8_FROM": "tiny",
        "FP8_CACHE": "64",
        "FP8_MODE": "plain",
        "FP8_VERIFY": "tiny:32:plain:1:fp8",
        "REPEAT": "1",
    }
    done = gpu_sh("fp8", env=env)
    assert done.returncode == 1, done.stdout[-2000:]  # the bench part refuses the CPU
    for part in ("fp8-export", "capture-tiny-fp8-64-plain", "verify-tiny-fp8-64-plain", "verify-tiny-32-plain-fp8"):
        assert re.search(rf"^{part}: exit 0 in", done.stdout, re.M), done.stdout[-2000:]
    assert re.search(r"^bench-tiny-fp8: exit [1-9]", done.stdout, re.M)
    with tarfile.open(out / "results-fp8.tar.gz") as archive:
        assert "bench needs a CUDA GPU" in archive.extractfile("./bench-tiny-fp8.log").read().decode()
    assert (tmp_path / "scratch" / "tiny-fp8" / "config.json").is_file()
    for name in ("tiny-fp8-64-plain", "tiny-32-plain-fp8"):
        row = next(line for line in done.stdout.splitlines() if line.startswith(f"{name} "))
        assert row.split()[1:4] == ["1", "of", "1"]


def test_the_trained_suite_runs_only_the_parts_asked_for_on_one_model(tmp_path):
    """TRAINED_PARTS picks parts; one model trains into its own folder under TRAINED_DIR (the trainer's --out
    is that folder for one model, the parent for several), where its lane finds it. On the CPU the verify
    faults' cuda cases are skips."""
    env = {
        "OUT": str(tmp_path / "out"),
        "TRAINED_DIR": str(tmp_path / "trained"),
        "TRAINED_MODELS": "tiny",
        "TRAIN_ARGS": "--steps 2",
        "TRAINED_PARTS": "train verify-faults",
    }
    done = gpu_sh("trained", env=env)
    assert done.returncode == 0, done.stdout[-2000:]
    assert (tmp_path / "trained" / "tiny" / "config.json").is_file()
    parts = done.stdout[done.stdout.index("== parts") :]
    assert re.search(r"^train +0 ", parts, re.M) and re.search(r"^verify-faults-tiny +0 ", parts, re.M), parts
    assert not re.search(r"^(capture|verify|generate|eval|agreement)-tiny ", parts, re.M), parts


def test_a_profile_entry_profiles_the_fp8_per_row_step(tmp_path):
    """profile: an entry's weights and per-row mode reach profile_step.py, and its JSON says what ran (a smoke
    run on the CPU: no kernels to count)."""
    out = tmp_path / "out"
    # a CPU busy with other tests took the smoke run past the GPU's 170 s limit; gpu_sh stops it at 300
    done = gpu_sh("profile", env={"OUT": str(out), "PROFILE_ENTRIES": "tiny:256:fp8:per-row", "PROFILE_LIMIT": "280"})
    assert done.returncode == 0, done.stdout[-2000:]
    assert re.search(r"^profile-tiny-fp8-per-row: exit 0", done.stdout, re.M)
    with tarfile.open(out / "results-profile.tar.gz") as archive:
        rows = json.loads(archive.extractfile("./profile-tiny-fp8-per-row.json").read())
    assert [(r["batch"], r["weights"], r["per_row"]) for r in rows] == [(b, "fp8", True) for b in (1, 8, 32)]
