"""--plot: latency vs batch size per contender, log scales, the hardware floor drawn.

matplotlib is an optional extra (`pip install 'cugraph-accel[plot]'`): checked before the long
work starts, imported only here, and used without pyplot so no global backend is switched.
"""

from __future__ import annotations

from pathlib import Path

from accelerate_graph.bench.results import GENERATE, BenchReport
from accelerate_graph.common.atomic_io import atomic_write
from accelerate_graph.common.errors import BadOptionError

STYLE = {
    "eager": "tab:red",
    "graph": "tab:green",
    "fused": "tab:orange",
    "compile": "tab:blue",
    "hf-generate": "tab:purple",
    "our-loop": "tab:olive",
}


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise BadOptionError(
            "--plot needs matplotlib, which is not installed.",
            "Install it with: pip install 'cugraph-accel[plot]' (or pip install matplotlib), or drop --plot.",
        ) from None


def _draw_context(axes, report: BenchReport, context: int, floor_label: str) -> None:
    rows = [r for r in report.rows if r.context == context]
    for name in dict.fromkeys(r.contender for r in rows):
        mine = sorted((r for r in rows if r.contender == name), key=lambda r: r.bucket)
        dashed = mine[0].kind == GENERATE
        label = f"{name} (per new token)" if dashed else name
        axes.plot(
            [r.bucket for r in mine],
            [r.median_ms for r in mine],
            marker="o",
            label=label,
            linestyle="--" if dashed else "-",
            color=STYLE.get(name),
        )
    floor = sorted({(r.bucket, r.floor_ms) for r in rows})
    axes.plot([b for b, _ in floor], [f for _, f in floor], color="black", linestyle=":", label=floor_label)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xticks([b for b, _ in floor], [str(b) for b, _ in floor])
    axes.set_title(f"cache length {context}")
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
    for axes, context in zip(axes_list, contexts, strict=True):
        _draw_context(axes, report, context, floor_label)
    axes_list[0].set_ylabel("ms per decode step (median)")
    axes_list[-1].legend(fontsize="small")
    model = report.settings.get("model", "?")
    figure.suptitle(f"decode latency: {model}, {report.settings.get('dtype', '?')} on {gpu if on_gpu else 'the CPU'}")
    return figure


def write_plot(report: BenchReport, path: Path | str) -> None:
    """Write the PNG atomically: a temp file in the same folder, then one rename."""
    require_matplotlib()
    figure = plot_figure(report)
    atomic_write(path, lambda handle: figure.savefig(handle, format="png", dpi=120), binary=True)
