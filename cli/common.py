"""What verify and bench share: find the plan or MODEL, re-capture, narrate it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .options import DEFAULT_PLAN_PATH
from .output import Output

if TYPE_CHECKING:
    from accelerate_graph.core.plan import Plan
    from accelerate_graph.pipeline import CaptureRequest, Prepared


def _same_model(given: str, planned: str) -> bool:
    """MODEL names the plan's model: the same words, or the same folder."""
    if given == planned:
        return True
    return os.path.exists(given) and os.path.exists(planned) and os.path.samefile(given, planned)


@dataclass
class PlanSource:
    """The plan a request was made from, to check the loaded model against."""

    plan: Plan
    path: Path

    def check(self, loaded) -> None:
        from accelerate_graph.core.plan import check_plan_matches_model

        check_plan_matches_model(self.plan, loaded.model, self.path)


def settings_assignments(assignments: list[str] | None, allreduce: str | None = None) -> dict[str, str]:
    """--set NAME=VALUE options (and --allreduce KIND, the allreduce setting) as text by setting name;
    checked with the environment's, so that a bad one is refused before any work."""
    from accelerate_graph import settings

    given = {"allreduce": allreduce} if allreduce is not None else {}
    settings.from_text(given, "--allreduce")  # a bad kind is named as the user wrote it
    given.update(settings.parse_assignments(assignments or []))
    settings.resolve(given)
    return given


def resolve_settings(assignments: dict[str, str], recorded: dict | None = None):
    """The command's settings (the defaults, a plan's `recorded` ones, the environment, then
    `assignments`), current for the rest of the command."""
    from accelerate_graph import settings

    return settings.enter(settings.resolve(assignments, recorded=recorded))


def request_for(
    model: str | None, plan_path: Path | None, out: Output, assignments: dict[str, str], **overrides
) -> tuple[CaptureRequest, PlanSource | None]:
    """MODEL wins; else --plan; else ./cugraph-accel.plan.yaml. The request's settings are `assignments`
    over the environment over the plan's; one line says which of the plan's they change."""
    from accelerate_graph import settings
    from accelerate_graph.common.errors import PlanError
    from accelerate_graph.core.plan import check_plan_compatible, check_plan_weights, read_plan
    from accelerate_graph.models.fingerprint import check_plan_model
    from accelerate_graph.pipeline import CaptureRequest, request_from_plan

    if model is not None and plan_path is None:
        given = {k: v for k, v in overrides.items() if v is not None}
        return CaptureRequest(model=model, settings=resolve_settings(assignments), **given), None
    path = plan_path or DEFAULT_PLAN_PATH
    plan = read_plan(path)
    if model is not None and not _same_model(model, plan.model):
        raise PlanError(
            f"the plan {path} is for {plan.model!r}, not {model!r}.", "Drop MODEL, or capture a plan for it."
        )
    check_plan_compatible(plan, overrides.get("device"))
    check_plan_weights(plan, path, overrides.get("weights"))
    check_plan_model(plan, path)
    resolved = resolve_settings(assignments, recorded=plan.settings)
    out.line(f"graphs cannot cross processes: re-capturing from plan {path}")
    made_with = settings.from_recorded(plan.settings, "the plan").recorded()
    if changed := settings.describe_difference(made_with, resolved):
        out.note(changed)
    request = request_from_plan(plan, settings=resolved, **overrides)
    if plan.fuse:  # the kernels compiled at capture time, beside the plan
        from accelerate_graph.fused.layers import inductor_cache_dir

        request.inductor_cache = str(inductor_cache_dir(path))
    return request, PlanSource(plan, path)


def describe_model(loaded, out: Output) -> None:
    from accelerate_graph.common.devices import device_label, dtype_name

    out.line(f"model   {loaded.label}")
    out.line(f"device  {device_label(loaded.device)}; dtype {dtype_name(loaded.dtype)}; attention {loaded.attn}")


def prepare_with_progress(
    request: CaptureRequest, out: Output, source: PlanSource | None = None, stamps: list | None = None
) -> Prepared:
    """prepare() with a progress display, the model and the region plan shown as soon as known.
    `stamps`: (stage, unix time) appended as each stage starts (generate's start-up breakdown)."""
    import time

    from accelerate_graph.pipeline import Hooks, prepare

    def stamp(text: str) -> None:
        if stamps is not None:
            stamps.append((text, time.time()))

    from .tables import region_tree

    with out.progress() as progress:
        stage = progress.add_task("starting", total=None)
        captures = {}

        def bucket_count(count: int) -> None:
            progress.update(stage, visible=False)
            captures["task"] = progress.add_task("capturing buckets", total=count)

        def decided(decision) -> None:
            out.show(region_tree(request.model, decision.regions.mode, decision.regions.regions, decision.fixes))

        def loaded(loaded) -> None:
            stamp("loaded")
            if source is not None:
                source.check(loaded)
            describe_model(loaded, out)

        hooks = Hooks(
            loaded=loaded,
            decided=decided,
            stage=lambda text: (stamp(text), progress.update(stage, description=text)),
            bucket_count=bucket_count,
            captured=lambda c: progress.advance(captures["task"]),
        )
        prepared = prepare(request, hooks)
    stamp("prepared")
    for note in prepared.notes:
        out.note(note)
    return prepared


def report_memory(prepared: Prepared, out: Output, steps: int = 3) -> dict:
    """The command's peak device memory beside its stated bound: one line, and the JSON record."""
    from accelerate_graph.core.memory import memory_line, memory_record, peak_bytes

    record = memory_record(peak_bytes(prepared.session.device), prepared.memory_bound(steps))
    out.line(memory_line(record))
    return {**record, "preflight": prepared.preflight}
