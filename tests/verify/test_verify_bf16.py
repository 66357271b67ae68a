"""`verify` end to end in bf16 on the CPU emulation: correct graphs pass, a replay-only fault fails, an
MoE's routers are found and counted, and the CLI shows the new measures."""

import json

import pytest
import torch
from fault_harness import hook_the_captured_head
from tiny_models import tiny_decoder
from typer.testing import CliRunner

from accelerate_graph.common.errors import VerificationError
from accelerate_graph.core.backends import EmulatedBackend
from accelerate_graph.core.capture import capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.pipeline import CaptureRequest, prepare
from accelerate_graph.verify.against_eager import verify_batch, verify_graphs
from cli.main import app

BF16 = torch.bfloat16


def test_tiny_llama_in_bf16_passes_through_the_real_loading_path(tiny_model_dir):
    request = CaptureRequest(model=tiny_model_dir("llama"), buckets=(1, 4), dtype="bfloat16", device="cpu")
    request.max_cache_len, request.contexts = 64, (32,)
    prepared = prepare(request)  # its check right after capture is verify's own criterion
    rows = verify_graphs(prepared.graphs, steps=6, prompt_len=prepared.plan.prompt_len)
    assert rows and all(r.passed for r in rows), [r.detail for r in rows if not r.passed]
    assert all(r.reference == "float32" and r.eager_err > 0 for r in rows)  # measured against float32
    assert all(r.logit_err <= 2 * r.eager_err + 1e-2 and r.top1 >= r.eager_top1 - 0.1 for r in rows)


def _graphs_with_replay_only(model, fault):
    """Graphs captured with `fault` on the LM head's output; eager and the reference run without it."""
    session = DecodeSession(model, 2, 32)
    handle = model.lm_head.register_forward_hook(lambda module, args, output: fault(output))
    graphs = capture_decode_graphs(session, EmulatedBackend(), (1, 2))
    handle.remove()
    return graphs


def test_every_logit_scaled_by_1_04_in_the_replay_fails_in_bf16():
    graphs = _graphs_with_replay_only(tiny_decoder("llama").to(BF16), lambda out: out * 1.04)
    row = verify_batch(graphs, 2, 2, steps=4, prompt_len=5)
    assert not row.passed and "drifts" in row.detail
    assert abs(row.drift - 0.04) < 0.01


def test_the_check_right_after_capture_uses_the_same_criterion(monkeypatch):
    hook_the_captured_head(monkeypatch, lambda m, a, out: out * 1.04)
    request = CaptureRequest(model="tiny", buckets=(2,), dtype="bfloat16", device="cpu", max_cache_len=32)
    with pytest.raises(VerificationError, match="float32 reference.*drifts"):
        prepare(request)


MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32)


def test_a_tiny_moe_in_bf16_passes_with_its_routers_found():
    session = DecodeSession(tiny_decoder("olmoe", **MOE).to(BF16), 4, 32)
    graphs = capture_decode_graphs(session, EmulatedBackend(), (1, 4))
    rows = verify_graphs(graphs, steps=6, prompt_len=5)
    assert rows and all(r.passed and r.has_routers for r in rows), [r.detail for r in rows if not r.passed]
    assert all(r.router_rejected == 0 and r.eager_router_accepted <= r.eager_router_flips for r in rows)


def test_verify_json_and_table_show_the_measures(tmp_path):
    runner = CliRunner()
    plan = tmp_path / "p.yaml"
    capture = ["capture", "tiny", "--device", "cpu", "--dtype", "bf16", "--buckets", "1,2", "--plan", str(plan)]
    assert runner.invoke(app, [*capture, "--max-cache-len", "64"]).exit_code == 0
    result = runner.invoke(app, ["verify", "--plan", str(plan), "--steps", "3", "--json", "-"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["passed"] and data["criterion"]["tolerances"]["bfloat16"]["factor"] == 2.0
    for key in ("logit_err", "eager_err", "ratio", "kl", "eager_kl", "drift", "top1", "cache_err", "router_flips"):
        assert key in data["rows"][0]
    table = runner.invoke(app, ["verify", "--plan", str(plan), "--steps", "3"])
    assert table.exit_code == 0 and "against the reference (float32)" in table.output and "x eager" in table.output
