"""The low-precision floor is one rounding of the reference's own values (criterion.FLOOR_ROUNDINGS), not a
fixed 1e-2: a K/V cache three times further from float32 than eager's fails, noise as large as eager's own
error still passes, and so does a replay that rounds its outputs once more than eager."""

import re

import pytest
import torch
from fault_harness import every, failed, tiny_session, verify_with
from test_criterion import bf16_like, cases, judge, noisy_cache

from accelerate_graph.verify.criterion import rounding_error
from accelerate_graph.verify.faults import cache_noise_fault

BF16 = torch.bfloat16


@pytest.mark.parametrize("dtype", [BF16, torch.float16])
def test_the_rounding_error_is_what_rounding_does(dtype):
    values = torch.randn(16, 4096, generator=torch.Generator().manual_seed(0)) * 3
    done = (values.to(dtype).float() - values).norm(dim=-1) / values.norm(dim=-1)
    expected = rounding_error([values], dtype, -1)
    assert torch.allclose(expected, done, rtol=0.1), (expected, done)
    again = rounding_error([values.to(dtype)], dtype, -1)  # from already rounded values: the same
    assert torch.allclose(again, expected, rtol=0.02)


@pytest.mark.parametrize("layer", [0, 1])
@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_a_cache_three_times_further_from_float32_than_eagers_fails(model_type, layer):
    session = tiny_session(model_type, BF16)
    rows = verify_with(session, cache_noise_fault(session, 3.0, layer))
    assert failed(rows) == every(rows)
    assert all(f"cache layer {layer} row" in r.detail for r in rows), [r.detail for r in rows]
    for row in rows:  # the named (layer, row): replay's error about 3x eager's there
        replay, eager = map(float, re.search(r"error ([\d.e-]+) .*\(eager's: ([\d.e-]+)\)", row.detail).groups())
        assert replay > 2.5 * eager, row.detail


@pytest.mark.parametrize("times", [0.5, 1.0])
@pytest.mark.parametrize("layer", [0, 1])
def test_cache_noise_as_large_as_eagers_own_error_passes(times, layer):
    session = tiny_session("llama", BF16)
    rows = verify_with(session, cache_noise_fault(session, times, layer))
    assert rows and all(r.passed for r in rows), [r.detail for r in rows if not r.passed]
    if layer == 1:  # the last layer, whose error is the worst one `cache_err` shows
        assert all(r.cache_err > r.eager_cache_err for r in rows)  # the noise is there


@pytest.mark.parametrize("seed", range(5))
def test_a_replay_rounding_once_more_than_eager_passes(seed):
    """Eager's values, rounded once more (to bf16 after a shift of half a spacing's noise): at most
    eager's error + one rounding, which the floor covers; the logits and every cache layer."""
    reference, cache = cases(seed)
    eager = bf16_like(reference, 1)
    generator = torch.Generator().manual_seed(seed + 10)
    nudge = 1 + torch.randn(eager.shape, generator=generator) * 2**-9
    replay = (eager * nudge).to(BF16).float()
    eager_cache = noisy_cache(cache, 1)
    replay_cache = [
        tuple((t * (1 + 2**-9 * torch.randn(t.shape, generator=generator))).to(BF16).float() for t in layer)
        for layer in eager_cache
    ]
    verdict = judge(replay, eager, reference, cache, replay_cache)
    assert verdict.passed, verdict.failures
