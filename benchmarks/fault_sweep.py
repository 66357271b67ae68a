"""The smallest planted fault `verify` catches, per fault kind and dtype: detection must not weaken.

For each fault with a size (every logit scaled by 1 + eps; the runner-up logit raised past the top one
where the top-2 gap is under a fraction of the row's largest logit; a weight of the batch mean leaking
into every row), bisect on a log scale between a size verify misses and one it catches; the faults
without a size are run once (caught or missed), and so are the faults only a left-padded batch, a late
slot or a long run shows (two of them harmless: they must pass). Each run captures the `tiny` recipe with
the fault in its replay path only (accelerate_graph/verify/faults.py) and verifies it: those last faults
under verify's default cases, the others under one case per graph. Prints a table and writes it into
docs/VERIFY.md's section "Smallest fault caught" (with `--fuse`, the fused step captured as `capture --fuse`
does: its own section; a fault whose code the fused step never runs is listed as not planted). The
paragraphs written by hand after a section's table are kept.

  PYTHONPATH=. python benchmarks/fault_sweep.py                 # CPU emulation, and CUDA when present
  PYTHONPATH=. python benchmarks/fault_sweep.py --devices cpu --rounds 6 --no-docs
  PYTHONPATH=. python benchmarks/fault_sweep.py --fuse
"""

from __future__ import annotations

import argparse
import math
import re
import textwrap
from pathlib import Path

import torch

from accelerate_graph.common.atomic_io import atomic_write_text
from accelerate_graph.core.backends import backend_for
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.models.loading import load_model
from accelerate_graph.quant.quantize import quantize_model
from accelerate_graph.verify.against_eager import verify_graphs
from accelerate_graph.verify.cases import BASIC, VERIFY
from accelerate_graph.verify.faults import COVERAGE_KINDS, KINDS, SIZED, capture_with_fault, fault

BUCKETS = (1, 4)  # bucket 4 also runs batch 2, padded
CONTEXTS = (16,)  # and the cache, 64: the late_slot fault starts at slot 32
CACHE, STEPS, PROMPT = 64, 4, 6
HARMLESS = ("padding_rows_only", "rounding_noise")  # no request sees them: verify must pass them
SECTION = "## Smallest fault caught"
FUSED_SECTION = "## Smallest fault caught under --fuse"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "VERIFY.md"


def caught(model: torch.nn.Module, kind: str, size: float | None, fuse: bool = False) -> bool:
    """Does verify fail with this fault planted? (A fresh session each time: faults leave no trace.) The
    faults of left padding, late slots and long runs under verify's default cases, which reach them; the
    others under one case per graph, as the sizes above were always measured."""
    session = DecodeSession(model, max(BUCKETS), CACHE)
    planted = fault(kind, size)
    graphs, undo = capture_with_fault(session, backend_for(session.device), BUCKETS, planted, CONTEXTS, fuse=fuse)
    coverage = VERIFY if kind in COVERAGE_KINDS else BASIC
    try:
        rows = verify_graphs(graphs, steps=STEPS, prompt_len=PROMPT, coverage=coverage)
    finally:
        undo()
    return not all(r.passed for r in rows)


def smallest_caught(
    model, kind: str, rounds: int, low: float = 1e-6, high: float = 1.0, fuse: bool = False
) -> tuple[float, float]:
    """(largest size missed, smallest size caught) after `rounds` log-scale bisections; inf when even
    `high` is missed, 0 missed when even `low` is caught."""
    if not caught(model, kind, high, fuse):
        return high, math.inf
    if caught(model, kind, low, fuse):
        return 0.0, low
    for _ in range(rounds):
        middle = math.sqrt(low * high)
        if caught(model, kind, middle, fuse):
            high = middle
        else:
            low = middle
    return low, high


def sweep(devices: list[str], rounds: int, fuse: bool = False) -> list[dict]:
    results = []
    for device in devices:
        for dtype in (torch.float32, torch.bfloat16):
            model = load_model("tiny", torch.device(device), dtype).model
            for kind in (*KINDS, *COVERAGE_KINDS):
                if kind == "wrong_context" and device != "cpu":
                    continue  # a device-side assert on a GPU: it would end this process
                if kind == "wrong_scale" and dtype == torch.float32:
                    continue  # FP8 weights run with bf16 activations
                row = {"device": device, "dtype": str(dtype).removeprefix("torch."), "fault": kind}
                try:
                    row.update(measure(model, device, dtype, kind, rounds, fuse))
                except ValueError as err:  # capture_with_fault: the fault's code never ran in a recorded step
                    if "never ran" not in str(err):
                        raise
                    row["not_planted"] = True
                results.append(row)
                print(format_row(row), flush=True)
    return results


def measure(model, device: str, dtype: torch.dtype, kind: str, rounds: int, fuse: bool) -> dict:
    if kind == "wrong_scale":  # on the same model with its decoder in FP8, per channel
        fp8 = load_model("tiny", torch.device(device), dtype).model
        quantize_model(fp8, "fp8")
        missed, smallest = smallest_caught(fp8, kind, rounds, high=16.0, fuse=fuse)
        return {"missed": missed, "caught": smallest}
    if kind in SIZED:
        missed, smallest = smallest_caught(model, kind, rounds, fuse=fuse)
        return {"missed": missed, "caught": smallest}
    return {"caught": caught(model, kind, None, fuse)}


def format_row(row: dict) -> str:
    if row.get("not_planted"):
        verdict = "not planted: its code never runs in this step"
    elif row["fault"] in HARMLESS:
        verdict = "**flagged** (a false alarm)" if row["caught"] else "passes, as it should"
    elif row["fault"] not in SIZED:
        verdict = "caught" if row["caught"] else "**missed**"
    elif math.isinf(row["caught"]):
        verdict = f"**missed** even at {row['missed']:g}"
    else:
        verdict = f"caught at {row['caught']:.2g} (missed at {row['missed']:.2g})"
    return f"| {row['device']} | {row['dtype']} | {row['fault']} | {verdict} |"


def markdown(results: list[dict], rounds: int, fuse: bool = False) -> str:
    step = (
        "the `tiny` recipe's fused step (as `capture --fuse` records it; uncompiled on the CPU emulation) captured"
        if fuse
        else "the `tiny` recipe captured"
    )
    intro = (
        f"Written by `benchmarks/fault_sweep.py{' --fuse' if fuse else ''}`: {step} with one fault planted in its "
        f"replay path only (`accelerate_graph/verify/faults.py`), buckets {BUCKETS}, context buckets {CONTEXTS} + "
        f"cache {CACHE}, {STEPS} steps per case; sizes bisected on a log scale ({rounds} rounds). Sizes: `drift` "
        "scales every logit by 1 + size; `close_flip` raises the runner-up logit past the top one in rows whose "
        "top-2 gap is under size x the row's largest |logit|; `padded_leak` adds size x the batch mean to every row "
        "after the first layer (eager sees only real rows); `rotary_skew` scales every rotary angle by 1 + size; "
        "`cache_noise` adds noise of size x their rms to one layer's written K/V; `wrong_scale` (bf16 only, the "
        "decoder's projections in FP8 per channel) scales output channel 0's scale of the last layer's down "
        "projection by 1 + size. The faults from `ignored_mask` on are those only a left-padded batch, a late "
        "slot (from 32) or a long run (from the 41st replay) shows, run under verify's default cases (the others "
        "under one case per graph); `padding_rows_only` and `rounding_noise` touch nothing a request sees and "
        "must pass."
    )
    lines = [
        FUSED_SECTION if fuse else SECTION,
        "",
        textwrap.fill(intro, 110, break_long_words=False, break_on_hyphens=False),
        "",
        "| device | dtype | fault | verify |",
        "|---|---|---|---|",
        *(format_row(r) for r in results),
        "",
    ]
    return "\n".join(lines)


def write_section(path: Path, section: str) -> None:
    """Replace the section (from its heading, `section`'s first line, up to the next '## ' heading) in `path`,
    or append it; create the file if needed. The paragraphs written by hand after the old section's table stay,
    after the new one's."""
    text = path.read_text() if path.exists() else "# Verification\n\n"
    heading = section.splitlines()[0]
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    found = pattern.search(text)
    if not found:
        atomic_write_text(path, text.rstrip() + "\n\n" + section)
        return
    old = found.group(0).splitlines()
    table = [n for n, line in enumerate(old) if line.startswith("|")]
    notes = "\n".join(old[table[-1] + 1 :]).strip() if table else ""
    rest = text[found.end() :]
    new = "\n\n".join(part for part in (section.strip(), notes) if part) + ("\n\n" if rest else "\n")
    atomic_write_text(path, text[: found.start()] + new + rest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_devices = "cpu,cuda" if torch.cuda.is_available() else "cpu"
    parser.add_argument("--devices", default=default_devices)
    parser.add_argument("--rounds", type=int, default=8, help="bisection rounds per sized fault")
    parser.add_argument("--no-docs", action="store_true", help="print only; leave docs/VERIFY.md alone")
    parser.add_argument("--fuse", action="store_true", help="capture the fused step, as capture --fuse does")
    args = parser.parse_args()
    print("| device | dtype | fault | verify |\n|---|---|---|---|")
    results = sweep(args.devices.split(","), args.rounds, args.fuse)
    if not args.no_docs:
        write_section(DOCS, markdown(results, args.rounds, args.fuse))
        print(f"written to {DOCS}")


if __name__ == "__main__":
    main()
