"""drop-in: the model's own HF generate() after `accelerate()` (graphs captured anew for one batch, the
capture in its setup; undone after). Runs with our plan's graphs intact, before torch.compile's.
drop-in-fused: the same with `accelerate(fuse=True)`, the inductor compile in its setup."""

from __future__ import annotations

from accelerate_graph.bench.contenders.base import GENERATE, Contender, ContextRun, Tier
from accelerate_graph.bench.contenders.fused import warm_workers


def _calls(fuse: bool):
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
            fuse=fuse,
        )

    return drop_in_calls


DROP_IN = Contender(
    "drop-in",
    Tier.OURS,
    color="tab:pink",
    kind=GENERATE,
    calls=_calls(False),
    title="drop-in",
    label="drop-in",
    needs_graphs=True,
    stage="drop-in (accelerate() + HF generate)",
)

DROP_IN_FUSED = Contender(
    "drop-in-fused",
    Tier.OURS_RECAPTURED,  # its compile replaces the session's forward while it runs: after the plan's graphs
    color="tab:purple",
    kind=GENERATE,
    calls=_calls(True),
    title="drop-in --fuse",
    label="drop-in, fused",
    needs_graphs=True,
    stage="drop-in, fused (accelerate(fuse=True) + HF generate)",
    on_start=warm_workers,
)
