"""Rich tables for each command's results."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

if TYPE_CHECKING:
    from accelerate_graph.core.capture import BucketCapture
    from accelerate_graph.verify.against_eager import VerifyRow

MIB = 1024 * 1024


def capture_table(captures: list[BucketCapture]) -> Table:
    table = Table(title="captured decode graphs (largest bucket first, one shared pool)")
    for name in ("bucket", "context", "capture ms", "graph MiB"):
        table.add_column(name, justify="right")
    for c in captures:
        table.add_row(str(c.bucket), str(c.context), f"{c.seconds * 1000:.1f}", f"{c.memory_bytes / MIB:.2f}")
    table.add_row(
        "total",
        "",
        f"{sum(c.seconds for c in captures) * 1000:.1f}",
        f"{sum(c.memory_bytes for c in captures) / MIB:.2f}",
        style="bold",
    )
    return table


def region_tree(model: str, mode: str, regions: list[dict], fixes: list[str]) -> Tree:
    """The region plan: each region graph or eager, each island with its reason and file:line."""
    tree = Tree(f"decode step of {model}: mode [bold]{mode}[/bold]")
    for region in regions:
        colour = "green" if region["run"] == "graph" else "yellow"
        path = region["path"] or "<model>"
        tree.add(f"{path} {region['class']}: [{colour}]{region['run']}[/{colour}] ({escape(region['reason'])})")
    for fix in fixes:
        tree.add(f"[cyan]fix[/cyan]: {escape(fix)}")
    return tree


def verify_table(rows: list[VerifyRow]) -> Table:
    table = Table(title="replay vs eager")
    for name in ("bucket", "batch", "slots", "max abs", "max rel", "cache abs", "eager noise", "rtol", "result"):
        table.add_column(name, justify="right")
    for r in rows:
        verdict = "[green]pass[/green]" if r.passed else "[red]FAIL[/red]"
        table.add_row(
            str(r.bucket),
            str(r.batch),
            r.slots,
            f"{r.max_abs:.1e}",
            f"{r.max_rel:.1e}",
            f"{r.cache_max_abs:.1e}",
            f"{r.eager_noise_abs:.1e}",
            f"{r.rtol:g}",
            verdict,
        )
    return table
