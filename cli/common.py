"""What verify and bench share: find the plan or MODEL, re-capture, narrate it."""

from __future__ import annotations

from pathlib import Path

from accelerate_graph.common.devices import device_label, dtype_name
from accelerate_graph.common.errors import PlanError
from accelerate_graph.core.memory import memory_line, memory_record, peak_bytes
from accelerate_graph.core.plan import DEFAULT_PLAN_PATH, check_plan_compatible, read_plan
from accelerate_graph.fused.layers import inductor_cache_dir
from accelerate_graph.pipeline import CaptureRequest, Hooks, Prepared, prepare, request_from_plan

from .output import Output
from .tables import region_tree


def request_for(model: str | None, plan_path: Path | None, out: Output, **overrides) -> CaptureRequest:
    """MODEL wins; else --plan; else ./cugraph-accel.plan.yaml."""
    if model is not None and plan_path is None:
        return CaptureRequest(model=model, **{k: v for k, v in overrides.items() if v is not None})
    plan = read_plan(plan_path or DEFAULT_PLAN_PATH)
    if model is not None and model != plan.model:
        raise PlanError(
            f"the plan {plan_path} is for {plan.model!r}, not {model!r}.", "Drop MODEL, or capture a plan for it."
        )
    check_plan_compatible(plan, overrides.get("device"))
    out.line(f"graphs cannot cross processes: re-capturing from plan {plan_path or DEFAULT_PLAN_PATH}")
    request = request_from_plan(plan, **overrides)
    if plan.fuse:  # the kernels compiled at capture time, beside the plan
        request.inductor_cache = str(inductor_cache_dir(plan_path or DEFAULT_PLAN_PATH))
    return request


def describe_model(loaded, out: Output) -> None:
    out.line(f"model   {loaded.label}")
    out.line(f"device  {device_label(loaded.device)}; dtype {dtype_name(loaded.dtype)}; attention {loaded.attn}")


def prepare_with_progress(request: CaptureRequest, out: Output) -> Prepared:
    """prepare() with a progress display, the model and the region plan shown as soon as known."""
    with out.progress() as progress:
        stage = progress.add_task("starting", total=None)
        captures = {}

        def bucket_count(count: int) -> None:
            progress.update(stage, visible=False)
            captures["task"] = progress.add_task("capturing buckets", total=count)

        def decided(decision) -> None:
            out.show(region_tree(request.model, decision.regions.mode, decision.regions.regions, decision.fixes))

        hooks = Hooks(
            loaded=lambda loaded: describe_model(loaded, out),
            decided=decided,
            stage=lambda text: progress.update(stage, description=text),
            bucket_count=bucket_count,
            captured=lambda c: progress.advance(captures["task"]),
        )
        prepared = prepare(request, hooks)
    for note in prepared.notes:
        out.note(note)
    return prepared


def report_memory(prepared: Prepared, out: Output, steps: int = 3) -> dict:
    """The command's peak device memory beside its stated bound: one line, and the JSON record."""
    record = memory_record(peak_bytes(prepared.session.device), prepared.memory_bound(steps))
    out.line(memory_line(record))
    return {**record, "preflight": prepared.preflight}
