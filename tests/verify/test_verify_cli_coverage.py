"""`cugraph-accel verify` names the slots it replayed and runs what cases.VERIFY covers (--thorough: THOROUGH,
the same code with more windows and replays; not run here, 512 replays a graph cost minutes on the CPU)."""

import json
from dataclasses import asdict

from typer.testing import CliRunner

from accelerate_graph.verify.cases import VERIFY
from cli.main import app

runner = CliRunner()


def test_verify_says_which_slots_it_replayed(tmp_path):
    plan = str(tmp_path / "p.yaml")
    captured = runner.invoke(app, ["capture", "--buckets", "1,2", "--max-cache-len", "32", "--plan", plan])
    assert captured.exit_code == 0, captured.output
    result = runner.invoke(app, ["verify", "--plan", plan, "--steps", "4", "--json", "-"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["coverage"] == asdict(VERIFY)
    assert document["slots"].startswith("slots 1-") and document["slots"].endswith("-31 of 32")
    assert any(row["padding"] for row in document["rows"])  # batch 2 left-padded
    assert f"replayed {document['slots']}, left-padded batches among them" in result.stderr + result.stdout
    assert "each graph judged after 64 replays of it" in result.stderr + result.stdout
