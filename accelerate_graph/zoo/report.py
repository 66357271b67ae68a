"""The zoo's outputs: counts, docs/ZOO.md, the JSON file, and where two devices disagree on hazards."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from accelerate_graph.common.atomic_io import atomic_write_text
from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.zoo.configs import EXPERTS, EXPERTS_PER_TOKEN, HIDDEN, LAYERS, VOCAB, WINDOW
from accelerate_graph.zoo.run import STATUSES, ZooResult

COLUMNS = ("type", "features", "status", "mode", "islands", "hazards", "fixes", "verify max abs", "s", "reason")


def now_utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def counts(results: Sequence[ZooResult]) -> dict[str, int]:
    return {status: sum(r.status == status for r in results) for status in STATUSES}


def counts_line(results: Sequence[ZooResult]) -> str:
    c = counts(results)
    ran = len(results) - c["skipped"]
    return (
        f"{ran} types: full {c['full']} / piecewise {c['piecewise']} / refused (eager) {c['eager']} / "
        f"no static cache {c['no-static-cache']} / load failed {c['load-failed']} / "
        f"verify failed {c['verify-failed']} / crashed {c['crashed']}; {c['skipped']} skipped (not decoder-only)"
    )


def _sites(result: ZooResult) -> set[str]:
    """The module classes with hazards: what decides the region plan (kind labels may differ by device:
    a CPU run sees no host-device copies)."""
    return {hazard.split(" in ", 1)[-1] for hazard in result.hazards}


def hazard_disagreements(results: Sequence[ZooResult], other: Sequence[ZooResult]) -> list[str]:
    """Types both runs traced (past the static cache) whose plan mode or hazardous modules differ."""
    theirs = {r.model_type: r for r in other if r.static_cache_works}
    lines = []
    for mine in results:
        peer = theirs.get(mine.model_type)
        if peer is None or not mine.static_cache_works:
            continue
        if mine.mode == peer.mode and _sites(mine) == _sites(peer):
            continue
        lines.append(
            f"{mine.model_type}: this run {mine.mode} [{'; '.join(mine.hazards) or 'no hazard'}], "
            f"the other {peer.mode} [{'; '.join(peer.hazards) or 'no hazard'}]"
        )
    return lines


def json_document(results: Sequence[ZooResult], environment: dict, steps: int = 8) -> dict:
    return {
        "environment": environment,
        "steps": steps,
        "counts": counts(results),
        "results": [asdict(r) for r in results],
    }


def write_json(results: Sequence[ZooResult], path: Path | str, environment: dict, steps: int = 8) -> None:
    atomic_write_text(path, json.dumps(json_document(results, environment, steps), indent=1) + "\n")


def read_results(path: Path | str) -> list[ZooResult]:
    """Results from a file `write_json` wrote (on another device, say)."""
    try:
        document = json.loads(Path(path).read_text())
        return [ZooResult(**entry) for entry in document["results"]]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise BadOptionError(
            f"cannot read zoo results from {path}: {type(err).__name__}: {err}",
            "Give a JSON file `cugraph-accel zoo --json` wrote.",
        ) from err


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _short_fix(fix: str) -> str:
    """A fix's first clause: the table has room for what was done, the JSON keeps the whole sentence."""
    return fix.split(": ", 1)[0][:80]


def _row(r: ZooResult) -> str:
    verify = "" if r.verify_max_abs is None else f"{r.verify_max_abs:.1e}" + ("" if r.verify_passed else " FAIL")
    cells = (
        r.model_type,
        ", ".join(r.features),
        f"**{r.status}**",
        r.mode,
        str(r.islands) if r.mode else "",
        "; ".join(r.hazards),
        "; ".join(_short_fix(f) for f in r.fixes),
        verify,
        f"{r.seconds:.1f}",
        r.reason[:240],
    )
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _header(results: Sequence[ZooResult], environment: dict, steps: int) -> list[str]:
    when = environment.get("generated") or now_utc()
    device = environment.get("device", "?")
    return [
        "# Zoo: every decoder-only causal-LM type in transformers, tiny and random",
        "",
        f"Generated {when} by `cugraph-accel zoo` on {device} ({environment.get('backend', '?')}); "
        f"torch {environment.get('torch', '?')}, transformers {environment.get('transformers', '?')}, "
        f"python {environment.get('python', '?')}.",
        "",
        f"Each type in `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`: its default config shrunk to {LAYERS} layers (more "
        f"where layer kinds mix), hidden {HIDDEN}, vocab {VOCAB}, {EXPERTS} experts ({EXPERTS_PER_TOKEN} per "
        f"token), sliding window {WINDOW}; random weights. A static-cache session, `--mode auto`'s region plan, "
        f"capture of buckets 1, 2, 4, then replay vs eager over a 6-token prompt and {steps} steps (every window "
        "is crossed), full and padded batches. `refused (eager)`: auto chose no graph; `no-static-cache`: an "
        "eager static-cache decode step does not run at all (reason given).",
        "",
        f"**Counts**: {counts_line(results)}",
        "",
        f"**Failures** (verify-failed, or crashed past a working static cache): {_failures(results)}. A crash "
        "at `static-cache` is an error the library raised instead of its own no-static-cache verdict.",
        "",
    ]


def _failures(results: Sequence[ZooResult]) -> str:
    failed = [r.model_type for r in results if r.failed]
    return f"{len(failed)}" + (f" ({', '.join(failed)})" if failed else "")


def zoo_markdown(
    results: Sequence[ZooResult], environment: dict, steps: int = 8, disagreements: Sequence[str] = ()
) -> str:
    ran = [r for r in results if r.status != "skipped"]
    skipped = [r for r in results if r.status == "skipped"]
    lines = _header(results, environment, steps)
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += [_row(r) for r in ran]
    if disagreements:
        lines += ["", "## Where the other device's run planned differently (mode or hazardous modules)", ""]
        lines += [f"- {_cell(line)}" for line in disagreements]
    if skipped:
        lines += ["", "## Skipped: not decoder-only", ""]
        lines += [f"- {r.model_type}: {_cell(r.reason)}" for r in skipped]
    return "\n".join(lines) + "\n"


def write_zoo_markdown(
    results: Sequence[ZooResult], path: Path | str, environment: dict, steps: int = 8, disagreements: Sequence[str] = ()
) -> None:
    """docs/ZOO.md: header (date, device, versions, counts), one table row per type, skipped types last."""
    atomic_write_text(path, zoo_markdown(results, environment, steps, disagreements))
