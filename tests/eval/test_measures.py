"""The parts of eval that need no model: windows, the paired bootstrap, the gate's rule."""

from __future__ import annotations

import pytest
import torch

from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.eval.bootstrap import Interval, Resampler
from accelerate_graph.eval.measures import _quantile
from accelerate_graph.eval.verdict import NOISE_FLOOR, judge
from accelerate_graph.eval.windows import DEFAULT_MAX_WINDOWS, cut_windows, read_token_ids


def test_windows_are_consecutive_slices_and_the_rest_is_left_out():
    windows = cut_windows(list(range(103)), 10, None, 16)
    assert windows.count == 10 and windows.length == 10 and windows.total_tokens == 103
    assert windows.tokens[3].tolist() == list(range(30, 40)) and windows.scored_per_window == 8
    assert cut_windows(list(range(10 * 100)), 10, None, 16).count == DEFAULT_MAX_WINDOWS
    assert cut_windows(list(range(103)), 10, 2, 16).count == 2


def test_one_window_is_refused():
    with pytest.raises(BadOptionError, match="needs 2"):
        cut_windows(list(range(100)), 10, 1, 16)


@pytest.mark.parametrize("content", ["[3, 1, 4, 1, 5]", "3 1\n4\t1 5\n"], ids=["json", "whitespace"])
def test_token_ids_as_json_or_whitespace(tmp_path, content):
    path = tmp_path / "ids"
    path.write_text(content)
    assert read_token_ids(path) == [3, 1, 4, 1, 5]


def test_a_paired_difference_keeps_what_the_windows_share_out_of_its_spread():
    spread = torch.linspace(0, 10, 20, dtype=torch.float64)  # windows of very different difficulty
    resampler = Resampler(20, resamples=500, seed=3)
    difference = resampler.interval(lambda a, b: a - b, spread + 0.1, spread)
    assert difference.value == pytest.approx(0.1) and difference.high - difference.low < 1e-9
    alone = resampler.mean(spread)
    assert alone.low < alone.value < alone.high and alone.high - alone.low > 1
    assert Resampler(20, 500, seed=3).mean(spread) == alone  # seeded: the same intervals again


def test_the_gate_fails_only_an_interval_wholly_above_the_allowance():
    eager = {"kl": 1e-3, "nll_error": 1e-2}
    straddling = Interval(1e-4, -1e-4, 3e-4)
    above = Interval(2e-4, 1e-4, 3e-4)
    assert judge({"kl": straddling, "nll_error": straddling}, eager).passed
    verdict = judge({"kl": above, "nll_error": straddling}, eager)
    assert not verdict.passed and len(verdict.failures) == 1 and "KL" in verdict.failures[0]
    assert judge({"kl": above, "nll_error": straddling}, eager, margin=0.1).passed  # 1e-4 allowed on 1e-3
    nan = Interval(float("nan"), float("nan"), float("nan"))
    assert "not a number" in judge({"kl": nan, "nll_error": straddling}, eager).failures[0]
    tiny = Interval(NOISE_FLOOR / 2, NOISE_FLOOR / 4, NOISE_FLOOR)
    assert judge({"kl": tiny, "nll_error": tiny}, {"kl": 0.0, "nll_error": 0.0}).passed


def test_nearest_rank_quantiles():
    values = torch.arange(1, 101, dtype=torch.float32)
    assert _quantile(values, 0.5) == 50 and _quantile(values, 0.99) == 99 and _quantile(values, 1.0) == 100


def test_the_reference_log_probabilities_stay_on_a_gpu_only_where_they_fit(monkeypatch):
    from accelerate_graph.eval import runs

    gpu, logits = torch.device("cuda", 0), torch.empty(32, 128_256)  # a 128k vocabulary at 32 rows
    need = 510 * logits.numel() * 4 + runs.ARM_HEADROOM  # 510 steps: ~8.4 GB
    assert not runs._keeps_on_device(torch.device("cpu"), 510, logits)
    for free, kept in [(need, True), (need - 1, False), (None, False)]:
        monkeypatch.setattr(runs, "free_bytes", lambda device, free=free: (free, "test"))
        assert runs._keeps_on_device(gpu, 510, logits) is kept


def test_the_references_steps_a_chunk_at_a_time_are_its_steps_one_by_one():
    """eval's float32 reference decodes STEPS_A_FORWARD steps a forward: each step's logits as the stepwise
    reference's, to float32's rounding, across chunk boundaries and a last chunk that is not full."""
    from tiny_models import tiny_decoder

    from accelerate_graph.core.decode_session import DecodeSession
    from accelerate_graph.eval import runs
    from accelerate_graph.verify.reference import STEPS_A_FORWARD, float32_reference, reference_step

    model = tiny_decoder("llama").to(torch.bfloat16)
    session = DecodeSession(model, 2, 64)
    rows = torch.randint(0, 256, (2, 2 * STEPS_A_FORWARD + 7))  # 2 full chunks and 5 steps
    chunked, stepwise = {}, {}
    with float32_reference(session):
        runs._reference_decode(session, rows, lambda i, logits: chunked.setdefault(i, logits.clone()))
        runs._decode(session, rows, reference_step, lambda i, logits: stepwise.setdefault(i, logits.clone()))
    assert sorted(chunked) == sorted(stepwise) == list(range(rows.shape[1] - 2))
    for i in stepwise:  # a K/V rounded to bf16 the other way now and then: 1e-5 of logits ~0.6, bf16's eps 8e-3
        torch.testing.assert_close(chunked[i], stepwise[i], rtol=1e-4, atol=1e-4)
