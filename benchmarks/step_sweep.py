"""Configs of the skinny kernels chosen inside a step, not one kernel at a time (batch 1, or --rows).

kernel_sweep.py times each op alone, a chain of the same call over copies of its weights; inside the
decode step its ranking did not hold (H200, 2026-12-01: the 8B's skinny kernels ran 3,682 us a step with
one table and 3,837 with the table of a wider sweep that had timed better alone). Here one CUDA graph
holds the GEMVs of --layers decoder layers in the order the layer program runs them (q/k/v merged with
the input norm, o with its residual, gate/up with the second norm and SiLU, down with its residual),
every layer with weights of its own (far more than the L2 cache), as `layer_program` calls them when the
skinny kernels are on. Coordinate descent: for each op in turn, every config of its grid with the others
held, timed as the whole chain's replay; the fastest is kept when it beats the current by more than
--min-gain. The chosen configs go into the skinny kernels' table.

Above one row (--rows 8, say: what SKINNY_ABOVE_BATCH_1 runs) the same chain is also timed the way the
fused step runs it without the skinny kernels: layer_program's merged ops compiled by inductor with the
fused step's settings (its norm and activation kernels, cuBLAS for the matmuls). The line "against
inductor + cuBLAS" says which is faster; the table is written only where the skinny chain wins. The
grid there (kernel_sweep.rows_grid_in_a_step): the swapped, then the plain tensor-core tiles.

--grid fma (above one row): only multiply-and-sum tiles, the products summed over the K walk and reduced
once (kernel_sweep.fma_rows_grid). Stop 38 (H200): every one lost to the table's tensor-core tiles at
Qwen2.5-0.5B's 8 and 16 rows (q/k/v +1.2 us a layer at best, gate/up +18).
--grid whole-k (above one row): only tensor-core tiles whose K block holds a program's whole K walk or slice
(kernel_sweep.whole_k_rows_grid; stop 38, prepared for a GPU).

--lookahead (one row): only tiles that load the next K block before multiplying this one
(kernel_sweep.lookahead_one_row_grid). Stop 32 (H200): Qwen2.5-0.5B's chain 19.12 -> 17.08 us a layer (gate/up
and down), the 8B's 114.02 -> 112.03 (o), the 1B's none better than its table.

    python benchmarks/step_sweep.py llama-3.1-8b --write-configs accelerate_graph/fused/kernels/skinny_configs.json
    python benchmarks/step_sweep.py llama-3.2-1b --rows 8 --write-configs accelerate_graph/fused/kernels/skinny_configs.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernel_sweep import (  # noqa: E402
    MODELS,
    describe,
    fma_rows_grid,
    graph_us,
    lookahead_one_row_grid,
    narrow_rows_grid,
    rows_grid_in_a_step,
    whole_k_rows_grid,
    wide_one_row_grid,
)

from accelerate_graph.compat import torch_internals  # noqa: E402
from accelerate_graph.fused import layer_program  # noqa: E402
from accelerate_graph.fused import layers as fused_layers  # noqa: E402
from accelerate_graph.fused.kernels import configs, pdl  # noqa: E402
from accelerate_graph.fused.kernels import skinny_matmul as sm  # noqa: E402

DTYPE = torch.bfloat16
DEVICE = "cuda"  # a CPU smoke test sets "cpu" (TRITON_INTERPRET=1)
EPS = 1e-6
ORDER = ("gate_up", "down", "qkv", "o")  # the largest first: the others are tuned around it


class OpShapes:
    """Table keys and configs of ORDER's ops for a sweep at `rows` rows whose `shapes` maps each op to (kernel
    op, the ns its table key uses, K): Chain here, whole_step_sweep.CapturedStep."""

    rows: int
    shapes: dict[str, tuple[str, tuple[int, ...], int]]

    def key(self, op: str) -> str:
        kind, ns, k = self.shapes[op]
        return configs.table_key(kind, configs.m_bucket(self.rows), ns, k)

    def table_config(self, op: str) -> configs.SkinnyConfig:
        kind, ns, k = self.shapes[op]
        return configs.config_for(kind, self.rows, ns, k)


ROWS_GRIDS = ("auto", "fma", "whole-k")


class Chain(OpShapes):
    """The projections of `layers` decoder layers of `model`'s shape for `rows` rows, each layer its own
    weights."""

    def __init__(self, model: str, layers: int, rows: int = 1, lookahead: bool = False, rows_grid: str = "auto"):
        hidden, inter, heads, kv, hd, bias = MODELS[model]
        self.rows, self.hidden, self.lookahead, self.rows_grid = rows, hidden, lookahead, rows_grid
        gen = torch.Generator(device=DEVICE).manual_seed(0)
        rand = lambda *s, scale=1.0: (torch.randn(*s, device=DEVICE, generator=gen) * scale).to(DTYPE)  # noqa: E731
        qkv_n = (heads + 2 * kv) * hd
        self.shapes = {  # op -> (kernel op, the ns its table key uses, K)
            "qkv": ("proj", (qkv_n,), hidden),
            "o": ("residual", (hidden,), heads * hd),
            "gate_up": ("gate_up", (inter,), hidden),
            "down": ("residual", (hidden,), inter),
        }
        self.layers = [
            {
                "qkv": rand(qkv_n, hidden, scale=hidden**-0.5),
                "qkv_bias": rand(qkv_n) if bias else None,
                "o": rand(hidden, heads * hd, scale=(heads * hd) ** -0.5),
                "gate_up": rand(2 * inter, hidden, scale=hidden**-0.5),
                "down": rand(hidden, inter, scale=inter**-0.5),
                "norm1": rand(hidden, scale=0.1) + 1,
                "norm2": rand(hidden, scale=0.1) + 1,
            }
            for _ in range(layers)
        ]
        self.x = rand(rows, hidden)
        self.attention = rand(rows, heads * hd)  # stands for the attention's output, which o reads
        self.weight_bytes = sum(t.numel() * 2 for layer in self.layers for t in layer.values() if t is not None)

    def grid(self, op: str) -> list[configs.SkinnyConfig]:
        _, ns, k = self.shapes[op]
        if self.rows > 1 and self.rows_grid == "fma":
            return fma_rows_grid(self.rows, k)
        if self.rows > 1 and self.rows_grid == "whole-k":
            return whole_k_rows_grid(sum(ns), k)
        if self.rows > 1:
            # first the tiles that give more programs (stop 37: o was never swept above one row)
            narrow = narrow_rows_grid(sum(ns), k)
            return narrow + [c for c in rows_grid_in_a_step(self.rows, k) if c not in narrow]
        return lookahead_one_row_grid(k) if self.lookahead else wide_one_row_grid(k)

    def step(self, cfgs: dict) -> None:
        h = self.x
        for layer in self.layers:
            sm.launch("proj", h, layer["norm1"], EPS, "llama", [layer["qkv"]], [layer["qkv_bias"]], cfg=cfgs["qkv"])
            h2 = sm.launch(
                "residual", self.attention, None, 0.0, "llama", [layer["o"]], [None], residual=h, cfg=cfgs["o"]
            )
            gate, up = layer["gate_up"].chunk(2)
            g = sm.launch("gate_up", h2[0], layer["norm2"], EPS, "llama", [gate, up], [None, None], cfg=cfgs["gate_up"])
            h = sm.launch(
                "residual", g[0], None, 0.0, "llama", [layer["down"]], [None], residual=h2[0], cfg=cfgs["down"]
            )[0]

    def layer_us(self, cfgs: dict) -> float:
        """Microseconds per layer of the chain replayed as one CUDA graph (kernel_sweep's timer)."""
        return graph_us([lambda: self.step(cfgs)], self.rows) / len(self.layers)

    def inductor_layer_us(self) -> float:
        """Microseconds per layer of the same chain as the fused step runs it without the skinny kernels:
        layer_program's merged ops (norm, matmul, residual, SiLU), compiled by inductor with the fused
        step's settings (PDL where the device has it, tuning from the hidden size it pays at)."""
        ops = layer_program.MERGED_OPS

        def chain(h, attention):
            projections = []  # returned, so that inductor keeps every q/k/v matmul (the chain never reads them)
            for layer in self.layers:
                projections += ops.norm_projections(h, layer["norm1"], EPS, [layer["qkv"]], [layer["qkv_bias"]])
                h2 = ops.linear_residual(attention, layer["o"], None, h)
                g = ops.norm_gate_up(h2, layer["norm2"], EPS, layer["gate_up"], None)
                h = ops.linear_residual(g, layer["down"], None, h2)
            return h, projections

        settings = fused_layers.inductor_settings(pdl.active(self.x.device), fused_layers.tunes_at(self.hidden))
        was = layer_program.SKINNY_ABOVE_BATCH_1, layer_program.SKINNY_AT_BATCH_1
        layer_program.SKINNY_ABOVE_BATCH_1, layer_program.SKINNY_AT_BATCH_1 = frozenset(), "0"
        try:
            with torch_internals.inductor_config_patched(settings):
                compiled = torch.compile(chain, fullgraph=True, dynamic=False)
                compiled(self.x, self.attention)  # compiles (and tunes) outside the timed graph
                return graph_us([lambda: compiled(self.x, self.attention)], self.rows) / len(self.layers)
        finally:
            layer_program.SKINNY_ABOVE_BATCH_1, layer_program.SKINNY_AT_BATCH_1 = was


def ops_named(text: str) -> tuple[str, ...]:
    """--ops (here and in whole_step_sweep.py): a comma list of ORDER's ops, in the order to sweep them."""
    ops = tuple(op.strip() for op in text.split(",") if op.strip())
    if not ops or set(ops) - set(ORDER):
        raise argparse.ArgumentTypeError(f"--ops takes a comma list of {', '.join(ORDER)}")
    return ops


def descend(current: dict, grid, timed, best: float, deadline: float, min_gain: float, unit: str, ops=ORDER):
    """Coordinate descent over `ops` (ORDER's, or some of them): for each op in turn every config of grid(op),
    the others held, timed by timed(configs); one that beats the best by more than min_gain is kept. Stops
    trying at `deadline` (time.monotonic). Returns the configs and the trials ("op, config, time" lines)."""
    trials = []
    for op in ops:
        for cfg in grid(op):
            if time.monotonic() > deadline:
                break
            if cfg == current[op]:
                continue
            try:
                took = timed({**current, op: cfg})
            except Exception as err:  # noqa: BLE001 - a config the compiler refuses (shared memory, registers)
                print(f"  {op} {describe(cfg)} skipped: {str(err).splitlines()[0][:100]}", flush=True)
                continue
            trials.append(f"{op}\t{describe(cfg)}\t{took:.3f}")
            print(f"  {op:8} {describe(cfg):32} {took:.3f} {unit}", flush=True)  # what a cut call keeps
            if took < best * (1 - min_gain):
                current, best = {**current, op: cfg}, took
        print(f"after {op:8}: {best:.3f} {unit}, {op} {describe(current[op])}", flush=True)
    return current, trials


WRITTEN_BY = "benchmarks/kernel_sweep.py; step_sweep.py (batch 1, and rows); whole_step_sweep.py (rows, in the step)"


def write_chosen(path: Path, chosen: dict[str, configs.SkinnyConfig]) -> None:
    """The chosen configs (table key: config) written into the table at `path`, its other entries kept."""
    kept = configs.read_table(path)
    configs.write_table({**kept, **chosen}, path, torch.cuda.get_device_name(), WRITTEN_BY)
    print(f"wrote {len(chosen)} configs to {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--rows", type=int, default=1, help="rows per call: a batch (table bucket: configs.m_bucket)")
    parser.add_argument("--min-gain", type=float, default=0.005, help="relative gain a new config must bring")
    parser.add_argument(
        "--lookahead", action="store_true", help="one row: only configs that load the next K block ahead"
    )
    parser.add_argument(
        "--grid",
        choices=ROWS_GRIDS,
        default="auto",
        help="above one row: auto (narrow, then swapped and plain tensor-core tiles), fma (multiply-and-sum tiles "
        "only), whole-k (tensor-core tiles holding the whole K walk only)",
    )
    parser.add_argument("--budget-s", type=float, default=240.0, help="stop trying configs after this long")
    parser.add_argument(
        "--ops", type=ops_named, default=ORDER, help="the ops to sweep, in this order (the others keep the table's)"
    )
    parser.add_argument("--write-configs", type=Path)
    parser.add_argument("--log", type=Path, help="every trial: op, config, us per layer")
    args = parser.parse_args()
    ops = args.ops
    start = time.monotonic()
    sm.prepare_split_finish(torch.device(DEVICE))  # the shipped split-K finish (its counters made before capture)
    chain = Chain(args.model, args.layers, args.rows, args.lookahead, args.grid)
    current = {op: chain.table_config(op) for op in ORDER}
    baseline = best = chain.layer_us(current)
    print(f"{args.model}: {args.layers} layers, {args.rows} row(s), {chain.weight_bytes / 2**30:.2f} GiB of weights")
    print(f"table configs: {best:.2f} us per layer ({', '.join(f'{op} {describe(c)}' for op, c in current.items())})")
    current, trials = descend(
        current, chain.grid, chain.layer_us, best, start + args.budget_s, args.min_gain, "us per layer", ops
    )
    final = chain.layer_us(current)
    print(
        f"chosen: {final:.2f} us per layer against the table's {baseline:.2f} ({100 * (1 - final / baseline):.1f}% less)"
    )
    if args.log:
        args.log.write_text("\n".join(trials) + "\n", encoding="utf-8")
    wins = final < baseline
    if args.rows > 1 and ops == ORDER:  # the way the fused step runs above batch 1 without the skinny kernels
        inductor = chain.inductor_layer_us()
        verdict = "the skinny chain is faster" if final < inductor else "inductor + cuBLAS is faster"
        print(f"against inductor + cuBLAS: {inductor:.2f} us per layer ({verdict})")
        wins = wins and final < inductor
    # some ops alone: they run the skinny kernels where the step does (layer_program's row limits), and only
    # their entries are written
    if args.write_configs and wins:
        write_chosen(args.write_configs, {chain.key(op): current[op] for op in ops})
    return 0


if __name__ == "__main__":
    sys.exit(main())
