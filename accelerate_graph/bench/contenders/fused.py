"""fused: our graphs of the step compiled by inductor (what `capture --fuse` makes), captured anew on
the bench's session, with grouped-query decode attention in place of HF's (grouped_attention.stands_in_for)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from accelerate_graph.bench.contenders.base import Contender, ContextRun, SetupColumn, Tier
from accelerate_graph.bench.contenders.graph import replay_step


@contextmanager
def captured_fused(run: ContextRun) -> Iterator:
    """Capture the inductor-compiled step on the same session; a failure costs only the fused rows. A plan
    prepared with --fuse (bench.run.fused_alone, or a fused plan file) has those graphs already."""
    from accelerate_graph.common.errors import CaptureError, VerificationError, is_out_of_memory, render_options
    from accelerate_graph.pipeline import capture_fused

    plan, info = run.prepared.plan, run.info
    if not plan.fuse:
        run.hooks.stage(f"cache {plan.max_cache_len}: compiling the step with inductor, capturing it (fused)")
    try:
        fused = run.graphs if plan.fuse else capture_fused(run.prepared, run.request)
    except (CaptureError, VerificationError) as err:
        info.notes.append(f"no fused row: {render_options(err.message)}")
        fused = None
    except Exception as err:  # noqa: BLE001 - a compiler failure must not cost the other contenders' rows
        if is_out_of_memory(err):
            raise
        info.notes.append(f"no fused row: inductor failed: {' '.join(str(err).split())[:300]}")
        fused = None
    if fused is not None:
        compiled = run.session.fused
        info.notes.append(
            f"fused: inductor compiled the decoder layers in {compiled.compile_seconds:.1f} s "
            f"({compiled.graphs} graph(s), {compiled.recompiles} recompilation(s); {compiled.layer_forward_kind()}); "
            "the fused setup column includes it"
        )
    yield fused


def warm_workers(device, inductor_cache: str | None) -> None:
    from accelerate_graph.fused.layers import warm_compile_workers

    warm_compile_workers(device, inductor_cache)


FUSED = Contender(
    "fused",
    Tier.OURS_RECAPTURED,
    color="tab:orange",
    step=replay_step("fused"),
    scope=captured_fused,
    replays_graphs=True,
    # compile + capture; each compilation lands in the first batch needing it
    columns=(SetupColumn("fused\nsetup s", lambda row: f"{row.setup_seconds:.1f}", summed=True),),
    on_start=warm_workers,
)
