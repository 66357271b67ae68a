"""Write a bench report as files: one JSON document, or a flat CSV of its rows. Both atomic."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import fields
from pathlib import Path

from accelerate_graph.bench.results import RECORD_KEYS, BenchReport, BenchRow
from accelerate_graph.common.atomic_io import atomic_write_text

CSV_COLUMNS = [RECORD_KEYS.get(f.name, f.name) for f in fields(BenchRow)] + [
    "x_floor",
    "tokens_per_s",
    "under_floor",
    "gpu",
    "bandwidth_gb_per_s",
]


def write_json(report: BenchReport, path: Path | str) -> None:
    atomic_write_text(path, json.dumps(report.to_dict(), indent=2, default=str) + "\n")


def csv_text(report: BenchReport) -> str:
    """One line per row; the device and bandwidth repeated on each, so a line stands on its own."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    shared = {"gpu": report.environment.get("gpu", ""), "bandwidth_gb_per_s": f"{report.bandwidth.gb_per_s:.1f}"}
    for row in report.rows:
        record = {key: "" if value is None else value for key, value in row.record().items()}
        writer.writerow({**record, **shared})
    return buffer.getvalue()


def write_csv(report: BenchReport, path: Path | str) -> None:
    atomic_write_text(path, csv_text(report))
