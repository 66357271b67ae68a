"""Capture a tiny model with a fault planted in its replay path, verify it, and say which cases failed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from tiny_models import tiny_decoder

from accelerate_graph.capture_flow import decide_regions
from accelerate_graph.core.backends import backend_for
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.detect.fixes.moe_experts import SAFE_EXPERTS
from accelerate_graph.quant.quantize import quantize_model
from accelerate_graph.verify.against_eager import verify_graphs
from accelerate_graph.verify.cases import BASIC, Coverage, plan_cases
from accelerate_graph.verify.faults import Fault, capture_with_fault

BUCKETS = (1, 4)  # bucket 4 also runs batch 2, padded
CONTEXTS = (16,)  # and the whole cache, 32: 4 graphs
CACHE = 32
STEPS = 4
PROMPT = 6
MOE = dict(num_local_experts=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)


def tiny_session(model_type: str = "qwen2", dtype=torch.float32, device="cpu", cache: int = CACHE) -> DecodeSession:
    extra = MOE if "moe" in model_type else {}
    if model_type == "gpt2":
        extra = dict(n_embd=64, n_layer=2, n_head=4)
    model = tiny_decoder(model_type, **extra).to(device=device, dtype=dtype)
    session = DecodeSession(model, max(BUCKETS), cache)
    decision = decide_regions(session, "full", BUCKETS[0])  # MoE: capture-safe experts; refuses any hazard
    assert decision.regions.mode == "full"
    return session


def fp8_session(scheme: str, device: str = "cpu") -> DecodeSession:
    """The tiny llama in bf16 with its decoder's projections in FP8 (`scheme` fp8 or fp8-block)."""
    model = tiny_decoder("llama").to(device=device, dtype=torch.bfloat16)
    quantize_model(model, scheme)
    session = DecodeSession(model, max(BUCKETS), CACHE)
    assert decide_regions(session, "full", BUCKETS[0]).regions.mode == "full"
    return session


def verify_with(
    session: DecodeSession, planted: Fault | None, only=None, coverage: Coverage = BASIC, fuse: bool = False
):
    """Rows of verify for `session` captured with `planted` (None: no fault), cases planned with `coverage`;
    `fuse`: the fused step captured, as `capture --fuse` captures it."""
    backend = backend_for(session.device)
    graphs, undo = capture_with_fault(session, backend, BUCKETS, planted, CONTEXTS, only, fuse)
    try:
        plan = plan_cases(graphs.buckets, graphs.contexts, STEPS, PROMPT, coverage=coverage)
        return verify_graphs(graphs, plan=plan)
    finally:
        undo()


def failed(rows) -> set[tuple[int, int, int, str]]:
    return {(r.bucket, r.batch, r.context, r.slots) for r in rows if not r.passed}


def every(rows) -> set[tuple[int, int, int, str]]:
    return {(r.bucket, r.batch, r.context, r.slots) for r in rows}


def moved(rows) -> set[tuple[int, int, int, str]]:
    """The cases whose replay differs from eager anywhere (NaN counts): where a fault that acts only on some
    inputs, such as a flip of near-tied tokens, changed something."""
    return {(r.bucket, r.batch, r.context, r.slots) for r in rows if not r.max_abs == 0}


def hook_the_captured_head(monkeypatch, hook) -> None:
    """Every capture of the flow records the LM head with `hook` (a forward hook) on it; the eager runs that
    judge it, after the capture, run without: a fault only the graphs have, for the check after capture."""
    from accelerate_graph import capture_flow

    real = capture_flow.capture_decode_graphs

    def hooked(session, *args, **kwargs):
        handle = session.model.lm_head.register_forward_hook(hook)
        try:
            return real(session, *args, **kwargs)
        finally:
            handle.remove()

    monkeypatch.setattr(capture_flow, "capture_decode_graphs", hooked)


TRAINED_TINY = Path(__file__).resolve().parents[1] / "assets" / "trained-tiny-llama"


def trained_model_dir() -> str:
    """The trained tiny llama committed with the tests; FAULTS_MODEL_DIR names another trained folder
    (benchmarks/gpu.sh's `trained` suite points it at each model it trains)."""
    return os.environ.get("FAULTS_MODEL_DIR") or str(TRAINED_TINY)


def trained_session(dtype=torch.float32, device="cpu", cache: int = CACHE) -> DecodeSession:
    """A session of the trained model, as loaded for users: peaked next-token distributions, where a random
    tiny model's flat ones make every fault easy to see. Skips a model the whole-step harness cannot take."""
    from accelerate_graph.models.loading import load_model

    folder = trained_model_dir()
    model = load_model(folder, torch.device(device), dtype).model
    if hasattr(model, "get_experts_implementation"):
        # HF's grouped_mm experts copy their offsets to the host in float32 on CUDA: the experts the capture
        # flow's fix takes there (compat hidden_host_read), set here so the faults meet the same step at any dtype
        model.set_experts_implementation(SAFE_EXPERTS)
    session = DecodeSession(model, max(BUCKETS), cache)
    regions = decide_regions(session, "full", BUCKETS[0]).regions
    if regions.mode != "full":
        pytest.skip(f"{folder}: no whole-step capture ({regions.reason})")
    return session
