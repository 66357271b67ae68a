"""hf-generate: HF generate with a static cache (it compiles itself: last), next to our-loop, our own
decode loop of graph replays (with the plan's graphs: first). Both time whole calls (bench/generate.py)."""

from __future__ import annotations

from accelerate_graph.bench.contenders.base import GENERATE, Contender, ContextRun, Tier


def our_loop_calls(run: ContextRun, graphs, batch: int):
    from accelerate_graph.bench.generate import bench_our_loop

    plan, settings = run.prepared.plan, run.settings
    return bench_our_loop(graphs, batch, plan.prompt_len, settings.new_tokens, run.floors[batch], settings.seed)


def hf_generate_calls(run: ContextRun, graphs, batch: int):
    from accelerate_graph.bench.generate import bench_hf_generate

    plan, settings = run.prepared.plan, run.settings
    return bench_hf_generate(run.session, batch, plan.prompt_len, settings.new_tokens, run.floors[batch], settings.seed)


HF_GENERATE = Contender(
    "hf-generate",
    Tier.HF_GENERATE,
    color="tab:purple",
    kind=GENERATE,
    calls=hf_generate_calls,
    title="HF generate (static cache)",
    label="HF",
    stage="HF generate (its first call compiles)",
)
OUR_LOOP = Contender(
    "our-loop",
    Tier.OURS,
    color="tab:olive",
    kind=GENERATE,
    calls=our_loop_calls,
    title="our loop",
    label="our loop",
    selected_by="hf-generate",
    needs_graphs=True,
    stage="our decode loop",
)
