"""The short tables benchmarks/gpu.sh prints last, one per kind of result file its suites write.

    python3 benchmarks/summary.py bench WORK/bench-*.csv      # `bench --csv` files: ms per contender and batch
    python3 benchmarks/summary.py verify WORK                 # verify-*.json: repeats passed, worst error, memory
    python3 benchmarks/summary.py zoo WORK                    # zoo.json and zoo-cpu.json: counts, differences
    python3 benchmarks/summary.py generate WORK               # generate-bench.json, first-token.json: tok/s
    python3 benchmarks/summary.py agreement WORK              # agreement-*.json: greedy tokens equal, per pair
    python3 benchmarks/summary.py eval WORK                   # eval-*.json: each arm, and what other weights cost
    python3 benchmarks/summary.py tune WORK/tune.json         # `tune --json`: each bucket, each op's tile kinds
    python3 benchmarks/summary.py pytest WORK/tests.log       # failures and the closing line of pytest logs

A file that is missing is named as missing, so a suite cut short still prints what it has.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
import sys
from pathlib import Path

GIB = 2**30
CLOSING = re.compile(r"\b\d+ (passed|failed|skipped|deselected|errors?)\b.* in [\d.]+s")  # pytest's last line


def bench_rows(path: Path) -> list[dict]:
    """The step rows of one `bench --csv` file."""
    with path.open(encoding="utf-8") as handle:
        return [row for row in csv.DictReader(handle) if row["kind"] == "step"]


def bench_table(paths: list[Path]) -> list[str]:
    """One line per (file, cache, batch): each contender's median ms, the floor, and the last contender's
    multiple of the floor; then each contender's setup (capture and compile) summed over its buckets."""
    found = {path: bench_rows(path) for path in paths if path.is_file()}
    contenders = list(dict.fromkeys(row["contender"] for rows in found.values() for row in rows))
    if not contenders:
        return [f"no bench results ({', '.join(str(p) for p in paths) or 'no files'})"]
    last = contenders[-1]
    header = f"{'model':<16}{'cache':>6}{'batch':>6}" + "".join(f"{c + ' ms':>12}" for c in contenders)
    out = [header + f"{'floor ms':>10}{last + ' x floor':>16}"]
    setup_lines = []
    for path, rows in found.items():
        name = path.stem.removeprefix("bench-")
        cells: dict[tuple[int, int], dict[str, dict]] = {}
        setup: dict[str, list[tuple[str, float]]] = {}
        for row in rows:
            cells.setdefault((int(row["context"]), int(row["bucket"])), {})[row["contender"]] = row
            if row.get("setup_seconds"):
                setup.setdefault(row["contender"], []).append((row["bucket"], float(row["setup_seconds"])))
        for (cache, batch), by_contender in sorted(cells.items()):
            floor = float(next(iter(by_contender.values()))["floor_ms"])
            line = f"{name:<16}{cache:>6}{batch:>6}"
            line += "".join(
                f"{float(by_contender[c]['median_ms']):>12.3f}" if c in by_contender else f"{'-':>12}"
                for c in contenders
            )
            ratio = f"{float(by_contender[last]['median_ms']) / floor:.3f}" if last in by_contender else "-"
            out.append(line + f"{floor:>10.3f}{ratio:>16}")
        for contender, buckets in setup.items():
            each = ", ".join(f"{bucket}: {seconds:.1f}" for bucket, seconds in buckets)
            setup_lines.append(f"{name} {contender} setup {sum(s for _, s in buckets):.1f} s ({each})")
    missing = [f"{path}: missing" for path in paths if path not in found]
    return out + setup_lines + missing


def verify_table(work: Path) -> list[str]:
    """One line per verify-*.json: repeats passed, the worst replay error as a multiple of eager's, the peak
    device memory beside its stated bound, verify's seconds (the float32 reference's among them) and the steps
    the reference took a forward."""

    def gib(value) -> str:
        return "-" if value is None else f"{value / GIB:.1f}"

    out = [
        f"{'verify':<34}{'repeats passed':>15}{'worst x eager':>15}{'peak GiB':>10}{'bound GiB':>10}"
        f"{'seconds':>9}{'reference s':>13}{'steps/fwd':>11}"
    ]
    for path in sorted(work.glob("verify-*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        memory = data.get("memory") or {}
        repeats = data.get("repeats") or []
        seconds = data.get("seconds") or {}
        passed = sum(1 for r in repeats if not r["failed"])
        worst = max((r["worst_ratio"] for r in repeats), default=float("nan"))
        reference = seconds.get("float32 reference")
        steps = (data.get("reference") or {}).get("steps_a_forward", "-")
        out.append(
            f"{path.stem.removeprefix('verify-'):<34}{f'{passed} of {len(repeats)}':>15}{worst:>15.2f}"
            f"{gib(memory.get('peak_bytes')):>10}{gib(memory.get('bound_bytes')):>10}"
            f"{sum(seconds.values()):>9.0f}{'-' if reference is None else f'{reference:.0f}':>13}{steps:>11}"
        )
    return out if len(out) > 1 else [f"no verify results in {work}"]


def zoo_table(work: Path) -> list[str]:
    """Where the CPU emulation planned differently from CUDA, the failures past a working static cache, and
    the counts of each run."""
    from accelerate_graph.zoo.report import counts_line, hazard_disagreements, read_results

    runs = {"CPU emulation": work / "zoo-cpu.json", "CUDA graphs": work / "zoo.json"}
    missing = [f"{name}: no results ({path.name} missing: see its log)" for name, path in runs.items()]
    missing = [line for line, path in zip(missing, runs.values()) if not path.exists()]
    if missing:
        return missing
    results = {name: read_results(path) for name, path in runs.items()}
    out = ["where the CPU emulation planned differently from CUDA (mode or hazardous modules):"]
    out += hazard_disagreements(results["CUDA graphs"], results["CPU emulation"]) or ["none"]
    for name, found in results.items():
        failed = [r for r in found if r.failed]
        out.append(f"failures past a working static cache, {name}:")
        out += [f"{r.model_type}: {r.status} at {r.stage}: {r.reason[:240]}" for r in failed] or ["none"]
    out += [f"{name}: {counts_line(found)}" for name, found in results.items()]
    return out


def generate_table(work: Path) -> list[str]:
    """Tokens per second of each generate contender per batch (and its multiple of HF static+compile's), and
    the first token of a new `generate` process (first-token.json)."""
    try:
        report = json.loads((work / "generate-bench.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return [f"no generate bench results in {work}"]
    rows = [r for r in report["rows"] if r["kind"] == "generate"]
    names = list(dict.fromkeys(r["contender"] for r in rows))
    speed = {(r["contender"], r["bucket"]): r["tokens_per_s"] for r in rows}
    try:
        first = {int(k): v for k, v in json.loads((work / "first-token.json").read_text(encoding="utf-8")).items()}
    except (OSError, ValueError):
        first = {}
    out = [f"{'batch':>5}" + "".join(f"{n:>22}" for n in names) + f"{'first token s':>15}"]
    for batch in sorted({r["bucket"] for r in rows}):
        base = speed.get(("hf-generate", batch))
        cells = []
        for name in names:
            value = speed.get((name, batch))
            ratio = f" ({value / base:.2f}x)" if value and base and name != "hf-generate" else ""
            cells.append("-" if value is None else f"{value:,.0f}{ratio}")
        seconds = first.get(batch, {}).get("first_token_s")
        out.append(f"{batch:>5}" + "".join(f"{c:>22}" for c in cells) + f"{'-' if seconds is None else seconds:>15}")
    out.append("tok/s: median of the generate calls; first token: seconds from launching a new generate process")
    return out


def agreement_table(work: Path) -> list[str]:
    """One line per pair of each agreement-*.json (python -m accelerate_graph.eval.agreement): the share of
    greedy tokens equal position by position and the mean common prefix, ours next to HF bf16's own."""
    out = [f"{'model':<20}{'pair':<30}{'tokens equal':>13}{'mean prefix':>14}"]
    for path in sorted(work.glob("agreement-*.json")):
        name = path.stem.removeprefix("agreement-")
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            out.append(f"{name:<20}unreadable")
            continue
        for pair in report["pairs"]:
            prefix = f"{pair['mean_prefix']:.1f} of {report['new_tokens']}"
            out.append(
                f"{name:<20}{pair['first'] + ' vs ' + pair['second']:<30}{pair['token_share']:>12.1%}{prefix:>14}"
            )
    if len(out) == 1:
        return [f"no agreement results in {work}"]
    return out + [
        "greedy generate() of each arm on the same held-out prompts; prefix: tokens before the first difference"
    ]


def _short(value: float) -> str:
    """3 digits, the exponent without its padding: 5.99e-5."""
    mantissa, _, exponent = f"{value:.2e}".partition("e")
    return f"{mantissa}e{int(exponent)}"


def _arm_cell(arm: dict) -> str:
    """KL mean [interval] (the baseline's), KL p99, same top, and the verdict where the arm was judged."""
    kl = arm["kl_mean"]
    mean = (
        f"{_short(kl['value'])} [{_short(kl['low'])}, {_short(kl['high'])}]" if arm["baseline"] else _short(kl["value"])
    )
    cell = f"{mean}, {_short(arm['kl_p99'])}, {arm['same_top']['value']:.1%}"
    verdict = {True: ": pass", False: ": FAIL"}.get(arm["passed"], "")
    return cell + verdict


def eval_table(work: Path) -> list[str]:
    """Markdown tables of each eval-*.json (`eval --json`): a row per model with a cell per arm (KL mean, p99,
    same top, verdict), then what other weights cost (`eval --weights`), as eval printed it."""
    by_model, cost_out, columns = {}, [], None
    for path in sorted(work.glob("eval-*.json")):
        name = path.stem.removeprefix("eval-")
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            by_model[name] = {}
            continue
        by_model[name] = {arm["name"]: _arm_cell(arm) for arm in report["arms"]}
        if "cost" in report:
            columns = report["cost"]["columns"]
            cost_out += [f"| {name} | " + " | ".join(row) + " |" for row in report["cost"]["rows"]]
    if not by_model:
        return [f"no eval results in {work}"]
    arms = list(dict.fromkeys(arm for cells in by_model.values() for arm in cells))  # in the order eval ran them
    out = ["| model | " + " | ".join(arms) + " |", "|---" * (len(arms) + 1) + "|"]
    out += [
        f"| {name} | " + " | ".join(cells.get(arm, "-" if cells else "unreadable") for arm in arms) + " |"
        for name, cells in by_model.items()
    ]
    out.append("each arm: KL mean against the float32 reference (the baseline's with its interval), KL p99, same top")
    if cost_out:
        out += ["", "| model | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|", *cost_out]
    return out


def tune_table(path: Path) -> list[str]:
    """`tune --json`: each bucket's seconds, configs tried (refused or wrong ones among them), a trial's median
    seconds and the chain's us a layer before and chosen; then, by bucket and op, the fastest trial of each
    kind of tile (the words after its sizes in tune's output: "fma ahead", "swap e4m3 x-apart"), fastest first.
    Trials of one op share a sweep's other configs only within that sweep: a hint of which kind wins, the
    chosen configs are the answer."""
    if not path.is_file():
        return [f"{path}: missing"]
    report = json.loads(path.read_text(encoding="utf-8"))
    workers = report.get("compile_workers", 0)
    out = [
        f"{report['model']}, weights {report['weights']}, {workers} compile workers",
        f"{'rows':>4} {'seconds':>8} {'tried':>6} {'refused':>8} {'s a trial':>10} {'before us':>10} {'chosen us':>10}",
    ]
    for bucket in report["buckets"]:
        trials = bucket["trials"]
        refused = sum(1 for trial in trials if trial["us_per_layer"] is None)
        spent = [trial["seconds"] for trial in trials if trial.get("seconds") is not None]
        median = f"{statistics.median_high(spent):.2f}" if spent else "-"  # mostly compiling where not done ahead
        out.append(
            f"{bucket['rows']:>4} {bucket.get('seconds', '-'):>8} {len(trials):>6} {refused:>8} {median:>10} "
            f"{bucket['before_us_per_layer']:>10.2f} {bucket['chosen_us_per_layer']:>10.2f}"
        )
    for bucket in report["buckets"]:
        fastest: dict[str, dict[str, float]] = {}  # op -> kind -> us
        for trial in bucket["trials"]:
            if trial["us_per_layer"] is not None:
                kinds = fastest.setdefault(trial["op"], {})
                kind = " ".join(trial["config"].split()[5:])  # past "n64 k128 w4 s4 x1"
                kinds[kind] = min(kinds.get(kind, trial["us_per_layer"]), trial["us_per_layer"])
        for op, kinds in fastest.items():
            ranked = sorted(kinds.items(), key=lambda item: item[1])
            out.append(f"{bucket['rows']:>4} {op}: " + ", ".join(f"{kind} {us:.2f}" for kind, us in ranked))
    return out


def pytest_lines(paths: list[Path]) -> list[str]:
    """Each log's failures (its -rf lines) and its closing count line."""
    out = []
    for path in paths:
        if not path.is_file():
            out.append(f"{path.name}: missing")
            continue
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        failed = [line[:200] for line in lines if line.startswith(("FAILED", "ERROR"))]
        closing = next((line for line in reversed(lines) if CLOSING.search(line)), "")
        out += failed[:20] + [f"{path.stem}: {closing.strip('= ') or 'no closing line (cut short?)'}"]
    return out


def main(argv: list[str]) -> int:
    kinds = {
        "bench": lambda args: bench_table([Path(a) for a in args]),
        "verify": lambda args: verify_table(Path(args[0])),
        "zoo": lambda args: zoo_table(Path(args[0])),
        "generate": lambda args: generate_table(Path(args[0])),
        "agreement": lambda args: agreement_table(Path(args[0])),
        "eval": lambda args: eval_table(Path(args[0])),
        "tune": lambda args: tune_table(Path(args[0])),
        "pytest": lambda args: pytest_lines([Path(a) for a in args]),
    }
    if not argv or argv[0] not in kinds or (argv[0] != "bench" and len(argv) < 2):
        print(f"usage: summary.py {{{','.join(kinds)}}} PATH... (see the module docstring)", file=sys.stderr)
        return 2
    print("\n".join(kinds[argv[0]](argv[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
