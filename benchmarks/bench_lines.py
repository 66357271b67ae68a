"""One line per step row of `bench --csv` files: which file, contender, batch, median ms and its multiple of
the floor. What the one-call GPU scripts print last.

    python3 benchmarks/bench_lines.py /tmp/logs/bench-8b.csv /tmp/logs/bench-1b.csv
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path


def lines(path: Path) -> list[str]:
    name = path.stem.removeprefix("bench-")
    out = []
    with path.open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row["kind"] == "step":
                ms, floor = float(row["median_ms"]), float(row["floor_ms"])
                out.append(
                    f"{name:5s} {row['contender']:8s} batch {row['bucket']:>2}: {ms:.3f} ms ({ms / floor:.3f}x floor)"
                )
    return out


def main(paths: list[str]) -> int:
    for path in map(Path, paths):
        if path.is_file():
            print("\n".join(lines(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
