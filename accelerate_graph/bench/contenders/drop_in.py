"""drop-in: the model's own HF generate() after `accelerate()` (graphs captured anew for one batch, the
capture in its setup; undone after). Runs with our plan's graphs intact, before torch.compile's."""

from __future__ import annotations

from accelerate_graph.bench.contenders.base import GENERATE, Contender, ContextRun, Tier


def drop_in_calls(run: ContextRun, graphs, batch: int):
    from accelerate_graph.bench.generate_contenders import bench_drop_in

    settings = run.settings
    return bench_drop_in(
        run.prepared.plan,
        run.session,
        batch,
        settings.new_tokens,
        run.floors[batch],
        settings.seed,
        emulate=run.request.emulate,
    )


DROP_IN = Contender(
    "drop-in",
    Tier.OURS,
    color="tab:pink",
    kind=GENERATE,
    calls=drop_in_calls,
    title="drop-in",
    label="drop-in",
    needs_graphs=True,
    stage="drop-in (accelerate() + HF generate)",
)
