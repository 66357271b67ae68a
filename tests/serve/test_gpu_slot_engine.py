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
