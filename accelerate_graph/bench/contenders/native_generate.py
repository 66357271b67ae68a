"""generate: our native generate loop (eager prefill, graph replays, the next token chosen on the
device), whole calls timed per new token; its setup is this batch's capture plus the first call."""

from __future__ import annotations

from accelerate_graph.bench.contenders.base import GENERATE, Contender, ContextRun, Tier


def native_generate_calls(run: ContextRun, graphs, batch: int):
    from accelerate_graph.bench.generate_contenders import bench_native_generate

    plan, settings = run.prepared.plan, run.settings
    return bench_native_generate(graphs, batch, plan.prompt_len, settings.new_tokens, run.floors[batch], settings.seed)


NATIVE_GENERATE = Contender(
    "generate",
    Tier.OURS,
    color="tab:brown",
    kind=GENERATE,
    calls=native_generate_calls,
    title="generate",
    label="generate",
    needs_graphs=True,
    stage="generate (our native loop)",
)
