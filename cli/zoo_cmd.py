"""`cugraph-accel zoo`: every decoder-only causal-LM type, tiny and random, captured and verified."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from accelerate_graph.common.errors import BadOptionError

from .errors import guarded
from .options import DeviceOpt, EmulateFlag, ForceFlag, JsonOpt, SetOpt
from .output import STDOUT, Output

if TYPE_CHECKING:
    from accelerate_graph.zoo.run import ZooResult

# zoo/run.py's ENTRY_TIMEOUT_S, repeated so that --help needs no torch (a test checks they agree)
DEFAULT_TIMEOUT_S = 120.0

TypesOpt = Annotated[
    str | None,
    typer.Option("--types", help="Model types, comma-separated (default: every causal-LM type transformers knows)."),
]
StepsOpt = Annotated[
    int,
    typer.Option(
        "--steps", min=8, help="Decode steps verified per batch (prompt 6: crosses the tiny sliding window of 4)."
    ),
]
MarkdownOpt = Annotated[Path | None, typer.Option("--markdown", help="Write the matrix as markdown, e.g. docs/ZOO.md.")]
IsolateOpt = Annotated[
    bool | None,
    typer.Option(
        "--isolate/--no-isolate",
        help="One child process per type (default: on CUDA only, where a device-side assert ends the process).",
    ),
]
WorkersOpt = Annotated[int, typer.Option("--workers", min=1, help="Child processes at a time (with --isolate).")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=1, help="Seconds per type before its child is killed.")]
CompareOpt = Annotated[
    Path | None,
    typer.Option(
        "--compare", help="A zoo JSON from another device: list the types whose plan or hazardous modules differ."
    ),
]

STATUS_STYLE = {
    "full": "green",
    "piecewise": "green",
    "eager": "yellow",
    "no-static-cache": "dim",
    "load-failed": "dim",
    "skipped": "dim",
    "verify-failed": "red",
    "crashed": "red",
}


def _types(text: str | None) -> list[str]:
    from accelerate_graph.zoo.model_types import all_causal_lm_types

    known = all_causal_lm_types()
    if text is None:
        return known
    types = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in types if t not in known]
    if not types or unknown:
        raise BadOptionError(
            f"--types: {', '.join(unknown) or 'nothing given'} is not a causal-LM model type.",
            "Use model_type names from transformers, e.g. llama,qwen2,gpt2.",
        )
    return types


def zoo_table(results: list[ZooResult]) -> Table:
    table = Table(title="zoo: tiny random models, --mode auto, replay vs eager")
    for name in ("type", "features", "status", "mode", "islands", "hazards", "verify max abs", "s", "reason"):
        table.add_column(name, overflow="fold")
    for r in results:
        if r.status == "skipped":
            continue
        style = STATUS_STYLE.get(r.status, "")
        verify = "" if r.verify_max_abs is None else f"{r.verify_max_abs:.1e}"
        table.add_row(
            r.model_type,
            ", ".join(r.features),
            f"[{style}]{r.status}[/{style}]",
            r.mode,
            str(r.islands) if r.mode else "",
            escape("; ".join(r.hazards)),
            verify,
            f"{r.seconds:.1f}",
            escape(r.reason[:160]),
        )
    return table


@guarded
def zoo(
    types: TypesOpt = None,
    device: DeviceOpt = "auto",
    emulate: EmulateFlag = False,
    steps: StepsOpt = 8,
    markdown: MarkdownOpt = None,
    json: JsonOpt = None,
    isolate: IsolateOpt = None,
    workers: WorkersOpt = 1,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    compare: CompareOpt = None,
    force: ForceFlag = False,
    assignments: SetOpt = None,
) -> None:
    """Capture and verify a tiny random model of every decoder-only causal-LM type; print the matrix.

    Exit code 1 when a type whose eager static-cache decode works fails verify or crashes.

    Examples:

      cugraph-accel zoo --types llama,falcon,mistral --device cpu

      cugraph-accel zoo --device cuda --workers 8 --markdown docs/ZOO.md --json zoo.json

      cugraph-accel zoo --types llama --device cpu --json -   # the JSON document on stdout

      cugraph-accel zoo --device cuda --set smem_carveout=off  # every entry under one setting changed
    """
    from accelerate_graph.common.atomic_io import check_writable
    from accelerate_graph.common.devices import resolve_device
    from accelerate_graph.common.environment import environment_info
    from accelerate_graph.zoo.report import (
        counts_line,
        hazard_disagreements,
        json_document,
        now_utc,
        read_results,
        write_zoo_markdown,
    )
    from accelerate_graph.zoo.run import run_zoo

    from .common import resolve_settings, settings_assignments

    engine = resolve_settings(settings_assignments(assignments))
    out = Output(json)
    for path, what in ((markdown, "markdown"), (None if json == STDOUT else json, "JSON results")):
        if path is not None:
            check_writable(path, what, force)
    chosen = _types(types)
    other = read_results(compare) if compare else None
    target = resolve_device(device)
    isolated = target.type == "cuda" if isolate is None else isolate
    with out.progress() as progress:
        task = progress.add_task("zoo", total=len(chosen))

        def advance(result: ZooResult) -> None:
            progress.update(task, advance=1, description=f"{result.model_type}: {result.status}")

        results = run_zoo(
            chosen, target, emulate, steps, isolated, workers, timeout, on_result=advance, settings=engine
        )
    out.show(zoo_table(results))
    disagreements = hazard_disagreements(results, other) if other is not None else []
    for line in disagreements:
        out.note(f"hazards differ from {compare}: {line}")
    environment = {
        **environment_info(target),
        "device": str(target),
        "generated": now_utc(),
        "backend": "emulated graphs" if emulate or target.type != "cuda" else "CUDA graphs",
    }
    out.emit_json({**json_document(results, environment, steps), "settings": engine.as_dict()})
    if markdown is not None:
        write_zoo_markdown(results, markdown, environment, steps, disagreements)
        out.line(f"matrix written to {markdown}")
    failed = [r for r in results if r.failed]
    out.line(counts_line(results))
    if failed:
        out.line(f"[red]{len(failed)} type(s) failed[/red]: " + ", ".join(r.model_type for r in failed))
        raise typer.Exit(1)
