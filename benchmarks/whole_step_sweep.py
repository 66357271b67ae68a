"""Configs of the skinny kernels chosen inside the whole captured decode step (above one row; batch 1 too
since stop 32, where the 8B's chain undervalued a lookahead tile: -2.0 us a layer there, -3.6 in the step).

step_sweep.py times a chain of the GEMVs alone (o reads a fixed tensor: no attention, rotary or cache write
between them). At 16 and 32 rows the configs it chose beat inductor + cuBLAS in that chain, yet the step
with them replayed slower than cuBLAS's (H200, 2026-12-02, stop 28: Qwen2.5-0.5B at batch 16 1.097 against
0.928 ms). Here the fused step itself, every op on the skinny kernels, is captured once for --rows; then for
each op in turn (step_sweep.descend) every config of its grid: the table's entry replaced in memory, the
batch's graphs captured again with the same compiled layers (under PDL the skinny op is opaque and reads
its config when it runs: no recompile), the replay timed. The chosen configs go into the table when they
beat the table's. Whether the step should run them at all is decided against the shipped step's replay
(profile_step.py's `fused` way, another process): layer_program.SKINNY_WINS_ABOVE_BATCH_1.

A capture costs seconds, so a whole grid (~56 configs an op) does not fit one device call: --candidates
takes step_sweep.py's trial log for the same model and rows (benchmarks/trials/, written by its --log) and
tries the --top fastest configs of each op there.

    python benchmarks/whole_step_sweep.py qwen2.5-0.5b --rows 16 --budget-s 150 \
        --candidates benchmarks/trials/step-trials-qwen2.5-0.5b-16.tsv --top 8 \
        --write-configs accelerate_graph/fused/kernels/skinny_configs.json
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernel_sweep import describe, parse_described, rows_grid_in_a_step  # noqa: E402
from profile_step import replay_ms  # noqa: E402
from step_sweep import ORDER, OpShapes, descend, ops_named, write_chosen  # noqa: E402

from accelerate_graph.core.backends import backend_for  # noqa: E402
from accelerate_graph.core.capture import capture_decode_graphs  # noqa: E402
from accelerate_graph.fused import layer_program  # noqa: E402
from accelerate_graph.fused.kernels import configs, pdl  # noqa: E402
from accelerate_graph.pipeline import CaptureRequest, prepare  # noqa: E402

PROMPT = 128
NAMES = {"qkv": 0, "o": 1, "gate_up": 2, "down": 3}  # step_sweep's op names: their place in folded_calls


class CapturedStep(OpShapes):
    """The fused step of `model` for `rows` rows, every op on the skinny kernels (else the ops the shipped
    step runs there: layer_program's row limits), and its replay time with any configs."""

    def __init__(
        self, model: str, rows: int, cache: int, candidates: dict[str, list] | None = None, every_op: bool = True
    ):
        if every_op:
            layer_program.SKINNY_ABOVE_BATCH_1 = frozenset(layer_program.SKINNY_OPS)
        request = CaptureRequest(
            model=model, buckets=(rows,), max_cache_len=cache, prompt_len=PROMPT, contexts=(256,), fuse=True
        )
        self.prepared = prepare(request)
        self.rows, self.session = rows, self.prepared.session
        calls = layer_program.folded_calls(self.session.fused.layers[0])
        self.shapes = {name: calls[place] for name, place in NAMES.items()}
        self.candidates = candidates or {}

    def grid(self, name: str) -> list[configs.SkinnyConfig]:
        return self.candidates.get(name) or rows_grid_in_a_step(self.rows, self.shapes[name][2])

    def replay_ms(self, cfgs: dict) -> float:
        """The step's replay in ms after capturing it again with `cfgs` (step_sweep's op names)."""
        self.prepared.graphs = None  # the last capture's graphs and pool go first
        gc.collect()
        torch.cuda.empty_cache()
        with configs.entries_replaced({self.key(name): cfg for name, cfg in cfgs.items()}):
            plan = self.prepared.plan
            backend = backend_for(self.session.device)
            self.prepared.graphs = capture_decode_graphs(
                self.session, backend, tuple(plan.buckets), contexts=tuple(plan.contexts)
            )
        return replay_ms(self.prepared.graphs, self.session, self.rows, PROMPT)[0]


def fastest_in_log(text: str, top: int) -> dict[str, list[configs.SkinnyConfig]]:
    """step_sweep.py's trial log ("op<TAB>config<TAB>us" lines): each op's `top` fastest configs."""
    timed: dict[str, list[tuple[float, configs.SkinnyConfig]]] = {}
    for line in text.splitlines():
        if line.strip():
            name, described, us = line.split("\t")
            timed.setdefault(name, []).append((float(us), parse_described(described)))
    return {name: [cfg for _, cfg in sorted(trials, key=lambda t: t[0])[:top]] for name, trials in timed.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--rows", type=int, default=16, help="the batch: its table bucket is configs.m_bucket")
    parser.add_argument("--cache", type=int, default=1024)
    parser.add_argument("--min-gain", type=float, default=0.005, help="relative gain a new config must bring")
    parser.add_argument("--budget-s", type=float, default=150.0, help="stop trying configs after this long")
    parser.add_argument("--write-configs", type=Path)
    parser.add_argument("--log", type=Path, help="every trial: op, config, ms per step")
    parser.add_argument("--candidates", type=Path, help="step_sweep.py's trial log: try its fastest configs")
    parser.add_argument("--top", type=int, default=8, help="with --candidates: configs per op")
    parser.add_argument(
        "--ops",
        type=ops_named,
        default=ORDER,
        help="the ops to sweep, in this order; some of them: the step as shipped (the others may run cuBLAS)",
    )
    args = parser.parse_args()
    ops = args.ops
    if args.rows < 1:
        print("error: --rows must be 1 or more.", file=sys.stderr)
        return 2
    if not (torch.cuda.is_available() and pdl.active(torch.device("cuda"))):
        print(
            "error: needs a GPU with PDL (Hopper): only there do the skinny ops read configs as they run.",
            file=sys.stderr,
        )
        return 2
    candidates = fastest_in_log(args.candidates.read_text(encoding="utf-8"), args.top) if args.candidates else None
    start = time.monotonic()
    step = CapturedStep(args.model, args.rows, args.cache, candidates, every_op=ops == ORDER)
    current = {name: step.table_config(name) for name in ORDER}
    baseline = step.replay_ms(current)
    print(f"{args.model}: {args.rows} rows, captured in {time.monotonic() - start:.0f} s", flush=True)
    print(f"table configs: {baseline:.3f} ms per step ({', '.join(f'{n} {describe(c)}' for n, c in current.items())})")
    deadline = start + args.budget_s
    current, trials = descend(current, step.grid, step.replay_ms, baseline, deadline, args.min_gain, "ms per step", ops)
    final = step.replay_ms(current)
    print(
        f"chosen: {final:.3f} ms per step against the table's {baseline:.3f} ({100 * (1 - final / baseline):.1f}% less)"
    )
    if args.log:
        args.log.write_text("\n".join(trials) + "\n", encoding="utf-8")
    if args.write_configs and final < baseline:
        write_chosen(args.write_configs, {step.key(name): current[name] for name in ops})
    return 0


if __name__ == "__main__":
    sys.exit(main())
