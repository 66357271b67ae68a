"""hf-eager: HF generate() as it comes (dynamic cache, nothing compiled), whole calls per new token."""

from __future__ import annotations

from accelerate_graph.bench.contenders.base import GENERATE, Contender, ContextRun, Tier


def hf_eager_calls(run: ContextRun, graphs, batch: int):
    from accelerate_graph.bench.generate_contenders import bench_hf_eager

    plan, settings = run.prepared.plan, run.settings
    return bench_hf_eager(run.session, batch, plan.prompt_len, settings.new_tokens, run.floors[batch], settings.seed)


HF_EAGER = Contender(
    "hf-eager",
    Tier.OURS,  # no compile, no graphs of its own: safe beside our replays
    color="tab:gray",
    kind=GENERATE,
    calls=hf_eager_calls,
    title="HF eager",
    label="HF eager",
    stage="HF generate, eager",
)
