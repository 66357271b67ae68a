"""The server on real CUDA graphs (skipped without CUDA; run on a GPU machine): float32 staggered requests,
plain and fused, each equal to HF generate() for its prompt alone on the same GPU."""

from __future__ import annotations

import asyncio

import pytest
import torch
from serving import BUCKETS, CACHE_LEN, TRAINED_TINY, Engine, hf_greedy, running, staggered, staggered_work, wait_until

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPU = torch.device("cuda:0")


@pytest.mark.parametrize("fuse", [False, True], ids=["plain", "fused"])
def test_staggered_requests_on_cuda_graphs_each_equal_generate_alone(fuse):
    from accelerate_graph.pipeline import CaptureRequest, prepare

    torch.backends.cuda.matmul.allow_tf32 = False
    torch._dynamo.reset()
    tokenizer, greedy = hf_greedy(GPU)
    prompts, new = staggered_work(tokenizer)
    expected = [greedy(p, n) for p, n in zip(prompts, new)]
    request = CaptureRequest(
        model=str(TRAINED_TINY), device="cuda:0", dtype="float32", buckets=BUCKETS, max_cache_len=CACHE_LEN, fuse=fuse
    )
    request.per_row = True
    prepared = prepare(request)
    with running(prepared, Engine(prepared, chunk=16)) as (url, service):
        got = asyncio.run(staggered(url, service.served.name, prompts, new))
        engine = service.scheduler.engine
        assert wait_until(lambda: engine.free_rows() == engine.max_rows)
        metrics = service.scheduler.metrics
        assert metrics.requests["error"] == 0
        # the steps timed on the device, within the host's own measure of them (a step's mark passes as the
        # step before ends, a little before the host sees that end: 10% of slack)
        for kind in ("decode", "prefill"):
            host, device = metrics.seconds(kind)
            assert 0 < device <= 1.1 * host, (kind, host, device)
    assert got == expected
