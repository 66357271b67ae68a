"""bench's table of the `generate` contenders: first call (capture or compile included) and tokens/s."""

from __future__ import annotations

from rich.table import Table

# left to right: HF as it comes, HF compiled, our drop-in, our native loop
ORDER = ("hf-eager", "hf-generate", "drop-in", "drop-in-fused", "generate", "generate-fused")
LABELS = {
    "hf-eager": "HF eager",
    "hf-generate": "HF static+compile",
    "drop-in": "drop-in",
    "drop-in-fused": "drop-in --fuse",
    "generate": "generate",
    "generate-fused": "generate --fuse",
}
OURS = ("drop-in", "drop-in-fused", "generate", "generate-fused")  # each compared with HF static+compile


def end_to_end_table(report, cache_len: int) -> Table:
    rows = report.generate_rows(cache_len)
    names = [name for name in ORDER if any(r.contender == name for r in rows)]
    table = Table(
        title=f"generate, cache length {cache_len}: first call (capture/compile included) and tokens/s",
        caption="first s = setup (capture or compile) + the first call; tok/s = batch x new tokens / median "
        "of later calls; vs HF = tok/s over HF static+compile",
    )
    for column in ["batch", "new tokens"] + [f"{LABELS[n]}\n{c}" for n in names for c in ("first s", "tok/s")]:
        table.add_column(column, justify="right")
    compared = "hf-generate" in names
    for name in OURS:
        if compared and name in names:
            table.add_column(f"{LABELS[name]}\nvs HF", justify="right")
    for bucket in sorted({r.batch for r in rows}):
        mine = {r.contender: r for r in rows if r.batch == bucket}
        cells = [str(bucket), str(next(iter(mine.values())).new_tokens)]
        for name in names:
            row = mine.get(name)
            cells += ["-", "-"] if row is None else [f"{row.setup_seconds or 0:.2f}", f"{row.tokens_per_s:,.0f}"]
        for name in OURS:
            if compared and name in names:
                row, base = mine.get(name), mine.get("hf-generate")
                cells.append("-" if not (row and base) else f"{row.tokens_per_s / base.tokens_per_s:.2f}x")
        table.add_row(*cells)
    return table
