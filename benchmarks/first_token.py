"""Seconds from launching a new `cugraph-accel generate` process to its first token, stage by stage.

Per batch: BATCH prompts of 128 random token ids (--prompt-tokens) (the recipes have random weights and no tokenizer), one new
process running `python3 -m cli generate MODEL --prompts ... --buckets BATCH` with plain graphs; its --json
`startup_unix` stamps say where the time went (imports, load, capture, first token). Prints one line per
batch and the stages; --json writes {batch: {first_token_s, stages, tokens_per_s, ...}}.

Run on a GPU: PYTHONPATH=. python3 benchmarks/first_token.py qwen2.5-0.5b --batches 1,8,32 --json out.json
(`--extra=--device cpu` tries it without a GPU.)
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages

from accelerate_graph.common.atomic_io import atomic_write_text  # noqa: E402
from benchmarks.profile_step import batch_sizes  # noqa: E402


def write_prompts(path: Path, batch: int, tokens: int, seed: int = 0) -> None:
    """`batch` prompts of `tokens` random ids in 100-499, one JSON object a line."""
    draw = random.Random(seed)
    lines = [json.dumps({"input_ids": [draw.randrange(100, 500) for _ in range(tokens)]}) for _ in range(batch)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def stages(launched: float, report: dict) -> list[tuple[str, float]]:
    """(stage, seconds) from the launch through each `startup_unix` stamp: a stage runs from its stamp to the
    next one's."""
    stamps = [("launch", launched)] + [(name, float(at)) for name, at in report.get("startup_unix", [])]
    return [(name, round(end - start, 3)) for (name, start), (_, end) in zip(stamps, stamps[1:])]


def one_process(model: str, batch: int, args: argparse.Namespace, work: Path) -> dict:
    prompts, result = work / f"prompts-{batch}.jsonl", work / f"generate-{batch}.json"
    write_prompts(prompts, batch, args.prompt_tokens)
    command = [sys.executable, "-m", "cli", "generate", model, "--prompts", str(prompts)]
    command += ["--max-new-tokens", str(args.new_tokens), "--buckets", str(batch)]
    command += ["--max-cache-len", str(args.cache), "--json", str(result), *shlex.split(args.extra)]
    launched = time.time()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
        code, tail = done.returncode, (done.stderr or done.stdout).strip().splitlines()[-1:]
    except subprocess.TimeoutExpired:
        code, tail = "timeout", [f"no first token within {args.timeout} s"]
    if code != 0 or not result.is_file():
        return {"exit": code, "error": tail[0] if tail else "no output"}
    report = json.loads(result.read_text(encoding="utf-8"))
    return {
        "exit": 0,
        "first_token_s": round(report["first_token_unix"] - launched, 3),
        "in_call_first_token_ms": round(report["time_to_first_token_s"] * 1000, 1),
        "tokens_per_s": report["tokens_per_second"],
        "host_ms_per_step": report.get("host_ms_per_step"),
        "stages": stages(launched, report),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="qwen2.5-0.5b")
    parser.add_argument("--batches", type=batch_sizes, default="1")
    parser.add_argument("--cache", type=int, default=1024)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--timeout", type=float, default=90, help="seconds a process may take")
    parser.add_argument("--extra", default="", help="more words for generate, e.g. '--device cpu --set pdl=off'")
    parser.add_argument("--json")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as work:
        for batch in args.batches:
            found = results[batch] = one_process(args.model, batch, args, Path(work))
            if found["exit"] != 0:
                print(f"{args.model} batch {batch}: exit {found['exit']}: {found['error']}", flush=True)
                continue
            print(
                f"{args.model} batch {batch}: first token {found['first_token_s']:.2f} s after launch (in-call "
                f"{found['in_call_first_token_ms']:.0f} ms); {found['tokens_per_s']:,.0f} tok/s in one cold call",
                flush=True,
            )
            print("    " + ", ".join(f"{name} {seconds:.2f}" for name, seconds in found["stages"]), flush=True)
    if args.json:
        atomic_write_text(args.json, json.dumps(results, indent=1) + "\n")
    return 0 if all(r["exit"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
