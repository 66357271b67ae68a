"""The gate on the CPU emulation in bf16: the captured graphs pass, a replay that scales every logit by
1.01 or skews every rotary angle by 1% fails, and the measures mean what they say."""

from __future__ import annotations

import pytest
import torch

from accelerate_graph.core.backends import EmulatedBackend
from accelerate_graph.eval.evaluation import evaluate
from accelerate_graph.eval.runs import eager_arm, graph_arm
from accelerate_graph.eval.verdict import judge
from accelerate_graph.eval.windows import cut_windows, encode
from accelerate_graph.generate.prompts import load_tokenizer
from accelerate_graph.pipeline import CaptureRequest, prepare
from accelerate_graph.verify.faults import capture_with_fault, fault

BUCKETS, CONTEXTS, CACHE = (1, 4), (16, 32), 32


@pytest.fixture(scope="module")
def prepared(eval_model_dir):
    request = CaptureRequest(model=eval_model_dir, buckets=BUCKETS, dtype="bfloat16", device="cpu")
    request.max_cache_len, request.contexts = CACHE, CONTEXTS
    torch.set_num_threads(1)
    return prepare(request)


@pytest.fixture(scope="module")
def windows(prepared, eval_model_dir, eval_text):
    with open(eval_text, encoding="utf-8") as file:
        ids = encode(file.read(), load_tokenizer(eval_model_dir), "the eval model")
    return cut_windows(ids, CACHE, 10, CACHE)  # 10 windows: two full batches of 4 and one padded batch of 2


def _with_fault(prepared, windows, planted):
    graphs, undo = capture_with_fault(prepared.session, EmulatedBackend(), BUCKETS, planted, contexts=CONTEXTS)
    try:
        return evaluate(prepared.session, windows, [eager_arm(), graph_arm("graph", graphs)])
    finally:
        undo()


def test_the_captured_graphs_pass_and_eager_is_the_unjudged_baseline(prepared, windows):
    evaluation = evaluate(prepared.session, windows, [eager_arm(), graph_arm("graph", prepared.graphs)])
    eager, graph = evaluation.arms
    assert evaluation.passed and graph.verdict.passed and eager.verdict is None
    assert eager.kl_mean.value > 0  # bf16 eager differs from its float32 reference
    assert 0.9 < graph.same_top.value <= 1 and eager.kl_median <= eager.kl_p99 <= eager.kl_max
    assert graph.kl_vs_baseline.low <= 0 <= graph.kl_vs_baseline.high
    assert evaluation.reference_ppl.low <= evaluation.reference_ppl.value <= evaluation.reference_ppl.high
    assert eager.delta_ppl.value == pytest.approx(eager.ppl.value - evaluation.reference_ppl.value)
    data = evaluation.as_json()
    assert data["passed"] and data["windows"] == 10 and data["scored_tokens"] == 10 * (CACHE - 2)


@pytest.mark.parametrize("planted", [fault("drift", 0.01), fault("rotary_skew", 0.01)], ids=lambda f: f.kind)
def test_a_planted_fault_fails_the_graph_arm(prepared, windows, planted):
    evaluation = _with_fault(prepared, windows, planted)
    graph = evaluation.arms[1]
    assert not evaluation.passed and not graph.verdict.passed
    assert graph.kl_vs_baseline.low > 0 and graph.nll_error_vs_baseline.low > 0
    assert any("KL" in failure for failure in graph.verdict.failures)
    # the margin is a fraction of eager's own error: a wide one admits the same differences
    differences = {"kl": graph.kl_vs_baseline, "nll_error": graph.nll_error_vs_baseline}
    eager = {"kl": evaluation.arms[0].kl_mean.value, "nll_error": evaluation.arms[0].nll_error.value}
    assert not judge(differences, eager, margin=0.0).passed and judge(differences, eager, margin=100.0).passed
