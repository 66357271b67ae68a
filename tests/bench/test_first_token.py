"""benchmarks/first_token.py: a new `generate` process per batch, its time to the first token by stage."""

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.first_token import stages, write_prompts

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "first_token.py"


def test_prompts_are_random_ids_one_json_line_a_row_and_the_same_each_run(tmp_path):
    write_prompts(tmp_path / "a.jsonl", batch=3, tokens=5)
    write_prompts(tmp_path / "b.jsonl", batch=3, tokens=5)
    rows = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(len(r["input_ids"]) == 5 and 100 <= min(r["input_ids"]) for r in rows)
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()


def test_each_stage_runs_from_its_stamp_to_the_next():
    report = {"startup_unix": [["python up", 100.5], ["loaded", 102.0], ["first token", 102.25]]}
    assert stages(100.0, report) == [("launch", 0.5), ("python up", 1.5), ("loaded", 0.25)]


def test_a_cpu_run_of_the_tiny_recipe_reports_its_first_token(tmp_path):
    result = tmp_path / "first.json"
    command = [sys.executable, str(SCRIPT), "tiny", "--batches", "2", "--cache", "64", "--prompt-tokens", "8"]
    command += ["--new-tokens", "3", "--extra", "--device cpu", "--json", str(result)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(result.read_text())["2"]
    assert found["exit"] == 0 and 0 < found["first_token_s"] < 240
    assert [name for name, _ in found["stages"]][0] == "launch" and len(found["stages"]) > 3
    assert done.stdout.startswith("tiny batch 2: first token ")


def test_a_failing_process_is_its_exit_and_last_line_and_exit_1(tmp_path):
    result = tmp_path / "first.json"
    command = [sys.executable, str(SCRIPT), "tiny", "--cache", "64", "--extra", "--device cpu", "--json", str(result)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)  # 128 prompt tokens > 64 slots
    assert done.returncode == 1
    found = json.loads(result.read_text())["1"]
    assert found["exit"] == 2 and "no room in a cache of 64 slots" in found["error"]
