"""Rich tables for `bench`: the environment, one latency table per cache length, generate end to end."""

from __future__ import annotations

from rich.table import Table

from accelerate_graph import settings as engine_settings
from accelerate_graph.bench.contenders import CONTENDERS, GENERATE, STEP, Contender, SetupColumn, contender_named
from accelerate_graph.bench.results import BASELINE, BenchReport, BenchRow
from accelerate_graph.bench.timing import DRIFT_LIMIT

from .generate_bench_table import ORDER as END_TO_END_ORDER
from .generate_bench_table import end_to_end_table


def tuning_table_line(found: dict | None, none: str | None = None, tune: str = "tune MODEL") -> str:
    """The skinny kernels' table that served (fused/kernels/configs.TableInUse.as_dict), or `none` (default: the
    bf16 step's words); with how many of the model's layer products it holds where it lacks some (`covers`,
    bench.environment.note_table_coverage)."""
    covers = (found or {}).get("covers") or {}
    if not found or not found.get("path"):
        if none is not None:
            return none
        if covers.get("calls"):  # small models run the skinny kernels above batch 1 with or without a table
            return (
                f"none: inductor's kernels at batch 1; {covers['calls']} of this model's layer products at the batches"
                f" above run the skinny kernels' default configs (`cugraph-accel {tune}` makes a table)"
            )
        return "none: the fused step uses inductor's kernels"
    over = f", over the shipped {found['shipped']}" if found.get("shipped") else ""
    held = ""
    if covers and covers["held"] < covers["calls"]:
        held = (
            f"; it holds {covers['held']} of this model's {covers['calls']} layer products at these batches, the"
            f" rest run default configs (`cugraph-accel {tune}` sweeps them)"
        )
    return f"{found['origin']} {found['path']}{over}{held}"


FP8_NO_TABLE = "none: the FP8 kernel runs its default configs (`cugraph-accel tune MODEL --weights fp8` makes one)"


def _weights(described: dict) -> str:
    """The model row's word on FP8: quantized here (--weights), or a checkpoint's own FP8 layers."""
    if described.get("weights", "model") != "model":
        return f"weights {described['weights']}, "
    if described.get("fp8_layers"):
        return f"weights {described['fp8_layers']} (the checkpoint's), "
    return ""


def environment_table(report: BenchReport) -> Table:
    env, settings, bandwidth = report.environment, report.run, report.bandwidth
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
        ("tuning table", tuning_table_line(env.get("tuning_table"))),
        ("bandwidth", f"{bandwidth.gb_per_s:,.0f} GB/s: {bandwidth.method}, median of {bandwidth.repeats}"),
        (
            "model",
            f"{settings.get('model')} ({settings.get('model_type')}), {settings.get('dtype')}, "
            f"{_weights(settings)}"
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
        ("settings", engine_settings.summary(engine_settings.from_recorded(report.settings, "the report"))),
    ]
    if (settings.get("weights", "model") != "model" or settings.get("fp8_layers")) and "fp8_tuning_table" in env:
        rows.insert(
            4,
            ("FP8 tuning table", tuning_table_line(env["fp8_tuning_table"], FP8_NO_TABLE, "tune MODEL --weights fp8")),
        )
    for what, value in rows:
        table.add_row(what, value)
    return table


def _ms(row: BenchRow) -> str:
    return f"{row.median_ms:.3f}" + ("*" if row.drift > DRIFT_LIMIT else "")


def _registered(names: list[str]) -> list[Contender]:
    """The registered contenders among `names`, in the registry's order."""
    return [c for c in CONTENDERS if c.name in names]


def _setup_columns(names: list[str]) -> list[tuple[str, SetupColumn]]:
    return [(c.name, column) for c in _registered(names) for column in c.columns]


def _columns(names: list[str]) -> list[str]:
    columns = ["batch", "floor ms"]
    for name in names:
        vs = [] if name == BASELINE[STEP] else [f"{name}\nvs {BASELINE[STEP]}"]
        columns += [f"{name}\nms", *vs, f"{name}\nx floor"]
    return columns + [column.header for _, column in _setup_columns(names)]


def _contender_cells(row: BenchRow | None, name: str) -> list[str]:
    width = 2 if name == BASELINE[STEP] else 3
    if row is None:  # not measured at this batch (e.g. its graph was not kept)
        return ["-"] * width
    speedup = [] if name == BASELINE[STEP] else ["-" if row.speedup is None else f"{row.speedup:.2f}x"]
    return [_ms(row)] + speedup + [f"{row.x_floor:.1f}x"]


def _cells(rows: dict[str, BenchRow], names: list[str]) -> list[str]:
    any_row = next(iter(rows.values()))
    cells = [str(any_row.batch), f"{any_row.floor_ms:.3f}"]
    for name in names:
        cells += _contender_cells(rows.get(name), name)
    return cells + ["-" if name not in rows else column.cell(rows[name]) for name, column in _setup_columns(names)]


def step_table(report: BenchReport, cache_len: int) -> Table:
    rows = report.step_rows(cache_len)
    present = {r.contender for r in rows}
    names = [c.name for c in CONTENDERS if c.name in present] + sorted(present - {c.name for c in CONTENDERS})
    samples = rows[0].samples if rows else 0
    fallbacks = sum(c.eager_fallbacks for c in report.contexts if c.cache_len == cache_len)
    table = Table(
        title=f"decode step, cache length {cache_len}: median ms of {samples} steps",
        caption=f"x floor: median / (bytes a step moves / bandwidth). * median drifted over "
        f"{DRIFT_LIMIT:.0%} between halves: raise --steps. Eager fallbacks (batches above the largest "
        f"bucket): {fallbacks}.",
    )
    for column in _columns(names):
        table.add_column(column, justify="right")
    for batch in sorted({r.batch for r in rows}):
        table.add_row(*_cells({r.contender: r for r in rows if r.batch == batch}, names))
    if any(column.summed for _, column in _setup_columns(names)):
        table.add_row(*_total_cells(rows, names), style="bold")
    return table


def _total_cells(rows: list[BenchRow], names: list[str]) -> list[str]:
    """'all': what setting up every batch cost, under the columns that sum it (fused: compile and
    capture; compile: its compilations)."""

    def total(name: str) -> str:
        seconds = [r.setup_seconds for r in rows if r.contender == name and r.setup_seconds is not None]
        return f"{sum(seconds):.1f}" if seconds else "-"

    tail = [total(name) if column.summed else "-" for name, column in _setup_columns(names)]
    return ["all"] + ["-"] * (len(_columns(names)) - 1 - len(tail)) + tail


def generate_table(report: BenchReport, cache_len: int) -> Table:
    """Whole generate calls: the baseline (HF generate) first, with its first call; then each other
    contender of whole calls (our loop) against it; then the floor's rate."""
    rows = report.generate_rows(cache_len)
    present = {r.contender for r in rows}
    base = contender_named(BASELINE[GENERATE])
    # the contenders that come with HF generate (our loop); generate, drop-in and hf-eager have their own table
    others = [c for c in CONTENDERS if c.selected_by == base.name and c.name in present]
    table = Table(
        title=f"end to end, cache length {cache_len}: " + " vs ".join(c.title or c.name for c in [base, *others]),
        caption="tok/s = batch x new tokens / median call time; x floor = ms per new token / floor ms; "
        "HF's first call includes its torch.compile on a GPU",
    )
    headers = ["batch", "new tokens", f"{base.label} first\ncall s", f"{base.label}\ntok/s", f"{base.label}\nx floor"]
    for other in others:
        headers += [f"{other.label}\ntok/s", f"{other.label}\nx floor", f"{other.label} vs\n{base.label}"]
    for column in (*headers, "floor\ntok/s"):
        table.add_column(column, justify="right")
    for batch in sorted({r.batch for r in rows}):
        by_name = {r.contender: r for r in rows if r.batch == batch}
        any_row = next(iter(by_name.values()))
        hf = by_name.get(base.name)
        cells = [str(batch), str(any_row.new_tokens)]
        cells += ["-"] * 3 if hf is None else [f"{hf.setup_seconds:.2f}", *_rate_cells(hf)]
        for other in others:
            row = by_name.get(other.name)
            ratio = "-" if row is None or row.speedup is None else f"{row.speedup:.2f}x"
            cells += (["-", "-"] if row is None else _rate_cells(row)) + [ratio]
        table.add_row(*cells, f"{batch * 1000.0 / any_row.floor_ms:,.0f}")
    return table


def _rate_cells(row: BenchRow) -> list[str]:
    return [f"{row.tokens_per_s:,.0f}", f"{row.x_floor:.1f}x"]


def bench_tables(report: BenchReport) -> list[Table]:
    tables = [environment_table(report)]
    for info in report.contexts:
        if report.step_rows(info.cache_len):
            tables.append(step_table(report, info.cache_len))
        contenders = {r.contender for r in report.generate_rows(info.cache_len)}
        if "hf-generate" in contenders:
            tables.append(generate_table(report, info.cache_len))
        if contenders & (set(END_TO_END_ORDER) - {"hf-generate"}):  # hf-generate alone has its own table
            tables.append(end_to_end_table(report, info.cache_len))
    return tables
