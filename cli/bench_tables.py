"""Rich tables for `bench`: the environment, one latency table per cache length, generate end to end."""

from __future__ import annotations

from rich.table import Table

from accelerate_graph.bench.results import BenchReport, BenchRow
from accelerate_graph.bench.timing import DRIFT_LIMIT

from .generate_bench_table import end_to_end_table

MIB = 1024 * 1024


def environment_table(report: BenchReport) -> Table:
    env, settings, bandwidth = report.environment, report.settings, report.bandwidth
    table = Table(title="benchmark environment", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    device = env.get("gpu") if env.get("gpu", "none") != "none" else "cpu (graphs emulated; timings say little)"
    rows = [
        ("device", f"{device} ({env.get('device', '?')})"),
        (
            "versions",
            f"torch {env.get('torch')}, transformers {env.get('transformers')}, CUDA {env.get('cuda')}, "
            f"python {env.get('python')}",
        ),
        ("SM clock", f"{env.get('sm_clock_mhz_start')} MHz at start, {env.get('sm_clock_mhz_end')} MHz at end"),
        ("bandwidth", f"{bandwidth.gb_per_s:,.0f} GB/s: {bandwidth.method}, median of {bandwidth.repeats}"),
        (
            "model",
            f"{settings.get('model')} ({settings.get('model_type')}), {settings.get('dtype')}, "
            f"attention {settings.get('attn')}",
        ),
        (
            "method",
            f"median of {settings.get('steps')} steps after {settings.get('warmup')} warm-ups; compile mode "
            f"{settings.get('compile_mode')}",
        ),
        (
            "sweep",
            f"batch sizes {settings.get('buckets')}; "
            + ", ".join(f"cache {c.cache_len} (prompt {c.prompt_len})" for c in report.contexts),
        ),
    ]
    for what, value in rows:
        table.add_row(what, value)
    return table


def _ms(row: BenchRow) -> str:
    return f"{row.median_ms:.3f}" + ("*" if row.drift > DRIFT_LIMIT else "")


def _columns(names: list[str]) -> list[str]:
    columns = ["batch", "floor ms"]
    for name in names:
        columns += [f"{name}\nms"] + ([] if name == "eager" else [f"{name}\nvs eager"]) + [f"{name}\nx floor"]
    if "graph" in names:
        columns += ["capture\nms", "graph\nMiB"]
    if "fused" in names:
        columns += ["fused\nsetup s"]  # compile + capture; each compilation lands in the first bucket needing it
    if "compile" in names:
        columns += ["compile\ns"]
    return columns


def _contender_cells(row: BenchRow | None, name: str) -> list[str]:
    width = 2 if name == "eager" else 3
    if row is None:  # not measured at this bucket (e.g. its graph was not kept)
        return ["-"] * width
    speedup = [] if name == "eager" else ["-" if row.speedup is None else f"{row.speedup:.2f}x"]
    return [_ms(row)] + speedup + [f"{row.x_floor:.1f}x"]


def _setup_cells(rows: dict[str, BenchRow], names: list[str]) -> list[str]:
    cells = []
    if "graph" in names:
        graph = rows.get("graph")
        cells += (
            ["-", "-"] if graph is None else [f"{graph.setup_seconds * 1000:.1f}", f"{graph.memory_bytes / MIB:.1f}"]
        )
    if "fused" in names:
        cells += ["-" if "fused" not in rows else f"{rows['fused'].setup_seconds:.1f}"]
    if "compile" in names:
        cells += ["-" if "compile" not in rows else f"{rows['compile'].setup_seconds:.1f}"]
    return cells


def _cells(rows: dict[str, BenchRow], names: list[str]) -> list[str]:
    any_row = next(iter(rows.values()))
    cells = [str(any_row.bucket), f"{any_row.floor_ms:.3f}"]
    for name in names:
        cells += _contender_cells(rows.get(name), name)
    return cells + _setup_cells(rows, names)


def step_table(report: BenchReport, context: int) -> Table:
    rows = report.step_rows(context)
    names = list(dict.fromkeys(r.contender for r in rows))
    samples = rows[0].samples if rows else 0
    fallbacks = sum(c.eager_fallbacks for c in report.contexts if c.cache_len == context)
    table = Table(
        title=f"decode step, cache length {context}: median ms of {samples} steps",
        caption=f"x floor: median / (bytes a step moves / bandwidth). * median drifted over "
        f"{DRIFT_LIMIT:.0%} between halves: raise --steps. Eager fallbacks (batches above the largest "
        f"bucket): {fallbacks}.",
    )
    for column in _columns(names):
        table.add_column(column, justify="right")
    for bucket in sorted({r.bucket for r in rows}):
        table.add_row(*_cells({r.contender: r for r in rows if r.bucket == bucket}, names))
    if {"fused", "compile"} & set(names):
        table.add_row(*_total_cells(rows, names), style="bold")
    return table


def _total_cells(rows: list[BenchRow], names: list[str]) -> list[str]:
    """'all': what setting up every bucket cost (fused: compile and capture; compile: its compilations)."""

    def total(name: str) -> str:
        seconds = [r.setup_seconds for r in rows if r.contender == name and r.setup_seconds is not None]
        return f"{sum(seconds):.1f}" if seconds else "-"

    tail = (["-", "-"] if "graph" in names else []) + [total(n) for n in ("fused", "compile") if n in names]
    return ["all"] + ["-"] * (len(_columns(names)) - 1 - len(tail)) + tail


def generate_table(report: BenchReport, context: int) -> Table:
    rows = report.generate_rows(context)
    table = Table(
        title=f"end to end, cache length {context}: HF generate (static cache) vs our loop",
        caption="tok/s = batch x new tokens / median call time; x floor = ms per new token / floor ms; "
        "HF's first call includes its torch.compile on a GPU",
    )
    for column in (
        "batch",
        "new tokens",
        "HF first\ncall s",
        "HF\ntok/s",
        "HF\nx floor",
        "our loop\ntok/s",
        "our loop\nx floor",
        "ours vs\nHF",
        "floor\ntok/s",
    ):
        table.add_column(column, justify="right")
    for bucket in sorted({r.bucket for r in rows}):
        pair = {r.contender: r for r in rows if r.bucket == bucket}
        hf, ours = pair["hf-generate"], pair["our-loop"]
        ratio = "-" if ours.speedup is None else f"{ours.speedup:.2f}x"
        table.add_row(
            str(bucket),
            str(hf.new_tokens),
            f"{hf.setup_seconds:.2f}",
            f"{hf.tokens_per_s:,.0f}",
            f"{hf.x_floor:.1f}x",
            f"{ours.tokens_per_s:,.0f}",
            f"{ours.x_floor:.1f}x",
            ratio,
            f"{bucket * 1000.0 / hf.floor_ms:,.0f}",
        )
    return table


def bench_tables(report: BenchReport) -> list[Table]:
    tables = [environment_table(report)]
    for info in report.contexts:
        if report.step_rows(info.cache_len):
            tables.append(step_table(report, info.cache_len))
        contenders = {r.contender for r in report.generate_rows(info.cache_len)}
        if "hf-generate" in contenders:
            tables.append(generate_table(report, info.cache_len))
        if contenders & {"generate", "drop-in", "hf-eager"}:
            tables.append(end_to_end_table(report, info.cache_len))
    return tables
