"""One line per step row of `bench --csv` files: which file, contender, batch, median ms and its multiple of
the floor. What the one-call GPU scripts print last.

    python3 benchmarks/bench_lines.py /tmp/logs/bench-8b.csv /tmp/logs/bench-1b.csv
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path


def lines(path: Path) -> list[str]:
    """Each step row, then each contender's setup (capture and compile) summed over its buckets."""
    name = path.stem.removeprefix("bench-")
    out = []
    setup: dict[str, list[tuple[str, float]]] = {}  # contender: (bucket, seconds) of each step row
    with path.open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row["kind"] == "step":
                ms, floor = float(row["median_ms"]), float(row["floor_ms"])
                out.append(
                    f"{name:5s} {row['contender']:8s} batch {row['bucket']:>2}: {ms:.3f} ms ({ms / floor:.3f}x floor)"
                )
                if row.get("setup_seconds"):
                    setup.setdefault(row["contender"], []).append((row["bucket"], float(row["setup_seconds"])))
    for contender, buckets in setup.items():
        each = ", ".join(f"{bucket}: {seconds:.1f}" for bucket, seconds in buckets)
        out.append(f"{name:5s} {contender:8s} setup {sum(s for _, s in buckets):.1f} s ({each})")
    return out


def main(paths: list[str]) -> int:
    for path in map(Path, paths):
        if path.is_file():
            print("\n".join(lines(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
