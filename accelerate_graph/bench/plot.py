"""--plot: latency vs batch size per contender, log scales, the hardware floor drawn.

matplotlib is an optional extra (`pip install 'cugraph-accel[plot]'`): checked before the long
work starts, imported only here, and used without pyplot so no global backend is switched.
"""

from __future__ import annotations

from pathlib import Path

from accelerate_graph.bench.contenders import contender_named
from accelerate_graph.bench.results import GENERATE, BenchReport
from accelerate_graph.common.atomic_io import atomic_write
from accelerate_graph.common.errors import BadOptionError


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise BadOptionError(
            "{plot} needs matplotlib, which is not installed.",
            "Install it with: pip install 'cugraph-accel[plot]' (or pip install matplotlib), or drop {plot}.",
        ) from None


def _color(name: str) -> str | None:
    contender = contender_named(name)
    return contender.color if contender else None


def _draw_context(axes, report: BenchReport, cache_len: int, floor_label: str) -> None:
    rows = [r for r in report.rows if r.cache_len == cache_len]
    for name in dict.fromkeys(r.contender for r in rows):
        mine = sorted((r for r in rows if r.contender == name), key=lambda r: r.batch)
        dashed = mine[0].kind == GENERATE
        label = f"{name} (per new token)" if dashed else name
        axes.plot(
            [r.batch for r in mine],
            [r.median_ms for r in mine],
            marker="o",
            label=label,
            linestyle="--" if dashed else "-",
            color=_color(name),
        )
    floor = sorted({(r.batch, r.floor_ms) for r in rows})
    axes.plot([b for b, _ in floor], [f for _, f in floor], color="black", linestyle=":", label=floor_label)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xticks([b for b, _ in floor], [str(b) for b, _ in floor])
    axes.set_title(f"cache length {cache_len}")
    axes.set_xlabel("batch size")
    axes.grid(True, which="both", alpha=0.3)


def plot_figure(report: BenchReport):
    from matplotlib.figure import Figure

    contexts = [c.cache_len for c in report.contexts]
    figure = Figure(figsize=(5.5 * len(contexts) + 1, 4.8), layout="constrained")
    axes_list = figure.subplots(1, len(contexts), squeeze=False)[0]
    gpu = report.environment.get("gpu", "none")
    on_gpu = gpu not in ("", "none")
    floor_label = f"floor: bytes / {report.bandwidth.gb_per_s:,.0f} GB/s" + ("" if on_gpu else " (CPU copy bandwidth)")
    for axes, cache_len in zip(axes_list, contexts, strict=True):
        _draw_context(axes, report, cache_len, floor_label)
    axes_list[0].set_ylabel("ms per decode step (median)")
    axes_list[-1].legend(fontsize="small")
    model = report.run.get("model", "?")
    figure.suptitle(f"decode latency: {model}, {report.run.get('dtype', '?')} on {gpu if on_gpu else 'the CPU'}")
    return figure


def write_plot(report: BenchReport, path: Path | str) -> None:
    """Write the PNG atomically: a temp file in the same folder, then one rename."""
    require_matplotlib()
    figure = plot_figure(report)
    atomic_write(path, lambda handle: figure.savefig(handle, format="png", dpi=120), binary=True)
