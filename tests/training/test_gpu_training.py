"""Training and the trained tiny model on a real GPU (skipped without CUDA): the loop under bf16 autocast with
fused AdamW for each architecture, and the fused graphs of the committed trained model verified."""

from __future__ import annotations

import json

import pytest
import torch
from test_trained_tiny import FOLDER, invoke
from test_training_smoke import MICRO, loss_before_and_after, micro  # noqa: F401 - micro is a fixture

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("name", list(MICRO))
def test_the_gpu_loop_lowers_the_loss(micro, name):  # noqa: F811 - the fixture
    before, after = loss_before_and_after(micro, name, torch.device("cuda"))
    assert after < before - 0.5, (before, after)


def test_fused_capture_and_verify_pass_on_the_trained_model(tmp_path):
    plan = tmp_path / "trained.plan.yaml"
    captured = invoke("capture", FOLDER, "--fuse", "--buckets", "1,8", "--max-cache-len", "256", "--plan", plan)
    assert captured.exit_code == 0, captured.output
    verified = invoke("verify", "--plan", plan, "--steps", "8", "--repeat", "2", "--json", tmp_path / "verify.json")
    assert verified.exit_code == 0, verified.output
    assert json.loads((tmp_path / "verify.json").read_text())["passed"] is True
