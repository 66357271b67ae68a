"""The engine's settings on the command line: `settings`, `--set`, the environment, plans that record
them and replays that change them, JSON results that carry them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tiny_models import save_tiny_model
from typer.testing import CliRunner

from accelerate_graph import settings
from cli.errors import DEBUG_ENV
from cli.main import app

runner = CliRunner()
SMALL = ["--buckets", "1", "--max-cache-len", "32", "--context-buckets", "full", "--device", "cpu"]
DIFFERENCE = "this plan was made under other settings"


def invoke(*args, env: dict | None = None):
    return runner.invoke(app, [str(a) for a in args], env={DEBUG_ENV: None, "HF_HUB_OFFLINE": "1", **(env or {})})


def one_error(result, code: int) -> str:
    assert result.exit_code == code, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output and "unexpected" not in lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> str:
    """A tiny llama saved to a folder: capture loads it through the real loading path."""
    return save_tiny_model("llama", tmp_path_factory.mktemp("model") / "llama")


@pytest.fixture(scope="module")
def plan_off(model_folder, tmp_path_factory) -> tuple[Path, dict]:
    """A plan captured with two settings changed, and capture's JSON document."""
    folder = tmp_path_factory.mktemp("plan")
    path, report = folder / "off.plan.yaml", folder / "capture.json"
    result = invoke(
        "capture", model_folder, *SMALL, "--plan", path, "--set", "pdl=off", "--set", "smem_carveout=50",
        "--json", report,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return path, json.loads(report.read_text())


def test_the_settings_command_lists_every_setting_with_its_default_and_why():
    result = invoke("settings", env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    for setting in settings.REGISTRY:
        assert setting.name in result.stdout
    listed = json.loads(invoke("settings", "--json", "-").stdout)["settings"]
    assert [row["name"] for row in listed] == [s.name for s in settings.REGISTRY]
    pdl = listed[0]
    assert pdl["default"] is True and pdl["allowed"] == "on, off" and pdl["why"] and pdl["environment"] is None
    assert pdl["environment_variable"] == "CUGRAPH_ACCEL_PDL"


def test_the_settings_command_shows_the_environments_value():
    listed = json.loads(invoke("settings", "--json", "-", env={"CUGRAPH_ACCEL_PDL": "0"}).stdout)["settings"]
    by_name = {row["name"]: row for row in listed}
    assert by_name["pdl"]["environment"] is False and by_name["mask_kernel"]["environment"] is None


def test_a_plan_records_its_settings_and_the_json_carries_every_value(plan_off):
    path, report = plan_off
    recorded = yaml.safe_load(path.read_text())["settings"]
    assert recorded == settings.DEFAULTS.replace(pdl=False, smem_carveout="50").recorded()
    assert "debug" not in recorded  # changes neither what a graph computes nor how fast
    assert report["settings"] == {**settings.DEFAULTS.as_dict(), "pdl": False, "smem_carveout": "50"}
    assert report["plan"]["settings"] == recorded


def test_a_replay_under_the_plans_settings_says_nothing_of_them(plan_off):
    path, _ = plan_off
    result = invoke("verify", "--plan", path, "--steps", "2", "--json", "-")
    assert result.exit_code == 0, result.output
    assert DIFFERENCE not in result.output
    assert json.loads(result.stdout)["settings"]["pdl"] is False  # the plan's, not the default


def test_a_replay_under_other_settings_says_so_in_one_line(plan_off):
    path, _ = plan_off
    result = invoke("verify", "--plan", path, "--steps", "2", "--set", "pdl=on", "--json", "-",
                    env={"CUGRAPH_ACCEL_MASK_KERNEL": "off"})  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if DIFFERENCE in line]
    assert len(lines) == 1, result.stderr
    assert "pdl off -> on" in lines[0] and "mask_kernel on -> off" in lines[0] and "smem_carveout" not in lines[0]
    carried = json.loads(result.stdout)["settings"]
    assert carried["pdl"] is True and carried["mask_kernel"] is False and carried["smem_carveout"] == "50"


def test_a_plan_without_settings_is_read_as_the_defaults(plan_off, tmp_path):
    path, _ = plan_off
    data = yaml.safe_load(path.read_text())
    del data["settings"]
    old = tmp_path / "old.plan.yaml"
    old.write_text(yaml.safe_dump(data, sort_keys=False))
    result = invoke("verify", "--plan", old, "--steps", "2", "--set", "pdl=off")
    assert result.exit_code == 0, result.output
    assert "pdl on -> off" in result.output


@pytest.mark.parametrize(
    "edit, expected",
    [
        ({"pdll": False}, r"the plan names no setting 'pdll'\. Re-run `cugraph-accel capture`\.$"),
        ({"pdl": "maybe"}, r"the plan sets pdl to 'maybe', which is not on or off\."),
    ],
)
def test_a_plan_with_a_setting_this_version_lacks_is_refused_naming_it(plan_off, tmp_path, edit, expected):
    path, _ = plan_off
    data = yaml.safe_load(path.read_text())
    data["settings"].update(edit)
    bad = tmp_path / "bad.plan.yaml"
    bad.write_text(yaml.safe_dump(data, sort_keys=False))
    line = one_error(invoke("verify", "--plan", bad), 1)
    assert line.startswith(f"error: plan file {bad}: ")
    assert __import__("re").search(expected, line), line


@pytest.mark.parametrize("command", ["capture", "verify", "bench", "generate"])
def test_set_names_an_unknown_setting_in_one_line(command):
    line = one_error(invoke(command, "tiny", "--set", "pdll=off"), 2)
    assert line.startswith("error: --set names no setting 'pdll'. Settings: pdl, ")


@pytest.mark.parametrize(
    "value, expected",
    [
        ("pdl", "error: --set 'pdl' is not NAME=VALUE. Write it as --set pdl=off, say."),
        ("pdl=maybe", "error: --set sets pdl to 'maybe', which is not on or off. Use one of: on, off"),
        ("skinny_b1=on", "error: --set names 'skinny_b1', a setting since renamed 'skinny_batch_1'."),
    ],
)
def test_a_malformed_set_is_one_line(value, expected):
    assert one_error(invoke("capture", "tiny", "--set", value, *SMALL), 2).startswith(expected)


def test_an_environment_typo_is_one_clear_line():
    line = one_error(invoke("capture", "tiny", *SMALL, env={"CUGRAPH_ACCEL_PDLL": "0"}), 2)
    assert line.startswith("error: The environment variable CUGRAPH_ACCEL_PDLL names no setting 'pdll'.")
    line = one_error(invoke("verify", "tiny", env={"CUGRAPH_ACCEL_MASK_KERNEL": "sometimes"}), 2)
    assert line.startswith("error: The environment sets mask_kernel to 'sometimes', which is not on or off.")


def test_allreduce_is_the_setting_and_a_bad_kind_is_named_as_given():
    line = one_error(invoke("capture", "tiny", "--allreduce", "ring", *SMALL), 2)
    assert line.startswith("error: --allreduce sets allreduce to 'ring', which is not auto, nccl or oneshot.")


def test_generate_and_bench_json_carry_the_settings_and_bench_names_those_changed():
    small = ["--buckets", "1", "--max-cache-len", "32", "--device", "cpu"]
    result = invoke("generate", "tiny", *small, "--input-ids", "1,2,3", "--max-new-tokens", "2",
                    "--set", "mask_kernel=off", "--json", "-")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["settings"] == settings.DEFAULTS.replace(mask_kernel=False).as_dict()
    timed = ["--buckets", "1", "--device", "cpu", "--context", "32", "--context-buckets", "full", "--allow-cpu",
             "--steps", "5", "--warmup", "0"]  # fmt: skip
    result = invoke("bench", "tiny", *timed, "--set", "pdl=off", "--set", "rotary_table=off", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "pdl off, rotary_table off" in result.stdout
    result = invoke("bench", "tiny", *timed, "--json", "-")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["settings"] == settings.DEFAULTS.as_dict() and report["run"]["model"] == "tiny"
