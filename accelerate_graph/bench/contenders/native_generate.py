"""generate: our native generate loop (eager prefill, graph replays, the next token chosen on the
device), whole calls timed per new token; its setup is this batch's capture plus the first call.
generate-fused: the same loop over the fused graphs (`generate --fuse`), captured anew as `fused` is."""

from __future__ import annotations

from accelerate_graph.bench.contenders.base import GENERATE, Contender, ContextRun, Tier
from accelerate_graph.bench.contenders.fused import captured_fused, warm_workers


def _calls(name: str):
    def calls(run: ContextRun, graphs, batch: int):
        from accelerate_graph.bench.generate_contenders import bench_native_generate

        plan, settings = run.prepared.plan, run.settings
        return bench_native_generate(
            graphs,
            batch,
            plan.prompt_len,
            settings.new_tokens,
            run.floors[batch],
            settings.seed,
            name=name,
            notes=run.info.notes,
        )

    return calls


NATIVE_GENERATE = Contender(
    "generate",
    Tier.OURS,
    color="tab:brown",
    kind=GENERATE,
    calls=_calls("generate"),
    title="generate",
    label="generate",
    needs_graphs=True,
    stage="generate (our native loop)",
)

GENERATE_FUSED = Contender(
    "generate-fused",
    Tier.OURS_RECAPTURED,
    color="tab:olive",
    kind=GENERATE,
    calls=_calls("generate-fused"),
    scope=captured_fused,
    title="generate --fuse",
    label="generate --fuse",
    replays_graphs=True,
    needs_graphs=True,
    stage="generate --fuse (our native loop over the fused graphs)",
    on_start=warm_workers,
)
