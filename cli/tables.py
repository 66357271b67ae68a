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
    # the rows as DecodeGraphs.captures lists them: largest bucket first
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
    """Per case: replay's error / eager's error against the float32 reference, for the logits (relative
    L2, worst row-step), the next-token distribution (mean KL), greedy tokens (share agreeing) and the
    cache (relative L2, worst layer and row); routers: rows off their bound, accepted at a near-tie."""
    reference = rows[0].reference if rows else "float32"
    table = Table(title=f"replay / eager, each against the reference ({reference})")
    routers = any(r.has_routers for r in rows)
    columns = ["bucket", "batch", "context", "slots", "logits L2", "x eager", "KL", "top-1", "drift", "cache L2"]
    for name in [*columns, *(["router rows"] if routers else []), "result"]:
        table.add_column(name, justify="right")
    for r in rows:
        cells = [
            str(r.bucket),
            str(r.batch),
            str(r.context or ""),
            r.slots,
            f"{r.logit_err:.1e}/{r.eager_err:.1e}",
            f"{r.ratio:.2f}",
            f"{r.kl:.0e}/{r.eager_kl:.0e}",
            f"{r.top1:.2f}/{r.eager_top1:.2f}",
            f"{r.drift:.0e}",
            f"{r.cache_err:.1e}/{r.eager_cache_err:.1e}",
        ]
        if routers:
            cells.append(f"{r.router_accepted}/{r.router_rejected}" if r.router_flips else "0")
        table.add_row(*cells, "[green]pass[/green]" if r.passed else "[red]FAIL[/red]")
    return table
