"""SlotEngine on real CUDA graphs (skipped without CUDA; run on a GPU machine): float32 staggered requests,
plain and fused, each equal to HF generate() for its prompt alone, with stale values planted in free rows."""

from __future__ import annotations

import pytest
import torch
from slot_script import engine_on_session, expected_tokens, plant_stale_values, run_script

from accelerate_graph.core.backends import backend_for
from accelerate_graph.models.loading import load_model

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPU = torch.device("cuda:0")


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_float32_staggered_requests_equal_hf_on_the_gpu(tiny_model_dir, model_type, fused):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch._dynamo.reset()
    model = load_model(tiny_model_dir(model_type), GPU, torch.float32, "sdpa", None).model
    expected = expected_tokens(model)
    engine = engine_on_session(model, backend_for(GPU), fused=fused, buckets=(1, 2, 4), contexts=(16, 32))
    run = run_script(engine, plant=plant_stale_values)
    assert run.tokens == expected
    assert engine.graphs.eager_fallbacks == 0 and not engine.graphs.pending
    if fused:
        assert engine.session.fused.recompiles == 0


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
def test_a_decode_turn_never_waits_for_the_device(tiny_model_dir, fused):
    """What the serving loop does between two reads (load the rows, replay, choose, keep the tokens, start their
    copy to the host) queues work without a synchronizing call: one would stop the host from running a turn
    ahead, and the device would idle through the host's work every step."""
    from accelerate_graph.serve.transfers import TokenRead, launch_mark, upload

    torch._dynamo.reset()
    model = load_model(tiny_model_dir("llama"), GPU, torch.bfloat16, "sdpa", None).model
    engine = engine_on_session(model, backend_for(GPU), fused=fused, chunk=64, buckets=(1, 4), contexts=(16, 32))
    rows = [engine.admit([5 + i, 6, 7, 8, 9]) for i in range(3)]
    tokens = engine.prefill(rows).argmax(-1)
    last = torch.zeros(engine.max_rows, dtype=torch.long, device=GPU)
    torch.cuda.synchronize()
    reads = []
    torch.cuda.set_sync_debug_mode("error")
    try:
        index = upload(rows, GPU)
        last.index_copy_(0, index, tokens)
        for _ in range(12):  # across the context bucket of 16
            mark = launch_mark(GPU)
            chosen = engine.decode(rows, last.index_select(0, index)).argmax(-1)
            last.index_copy_(0, index, chosen)
            reads.append(TokenRead(chosen, mark))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert all(len(read.tokens()) == 3 and read.device_seconds() > 0 for read in reads)
