"""Batch-1 configs of the skinny kernels chosen inside a step, not one kernel at a time.

kernel_sweep.py times each op alone, a chain of the same call over copies of its weights; inside the
decode step its ranking did not hold (H200, 2026-12-01: the 8B's skinny kernels ran 3,682 us a step with
one table and 3,837 with the table of a wider sweep that had timed better alone). Here one CUDA graph
holds the batch-1 GEMVs of --layers decoder layers in the order the layer program runs them (q/k/v
merged with the input norm, o with its residual, gate/up with the second norm and SiLU, down with its
residual), every layer with weights of its own (far more than the L2 cache), as `layer_program` calls
them when `SKINNY_AT_BATCH_1` is on. Coordinate descent: for each op in turn, every config of its grid
with the others held, timed as the whole chain's replay; the fastest is kept when it beats the current
by more than --min-gain. The chosen configs go into the skinny kernels' table.

    python benchmarks/step_sweep.py llama-3.1-8b --write-configs accelerate_graph/fused/kernels/skinny_configs.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernel_sweep import MODELS, describe, graph_us, wide_one_row_grid  # noqa: E402

from accelerate_graph.fused.kernels import configs  # noqa: E402
from accelerate_graph.fused.kernels import skinny_matmul as sm  # noqa: E402

DTYPE = torch.bfloat16
DEVICE = "cuda"  # a CPU smoke test sets "cpu" (TRITON_INTERPRET=1)
EPS = 1e-6
ORDER = ("gate_up", "down", "qkv", "o")  # the largest first: the others are tuned around it


class Chain:
    """The batch-1 GEMVs of `layers` decoder layers of `model`'s shape, each layer its own weights."""

    def __init__(self, model: str, layers: int):
        hidden, inter, heads, kv, hd, bias = MODELS[model]
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
        self.x = rand(1, hidden)
        self.attention = rand(1, heads * hd)  # stands for the attention's output, which o reads
        self.weight_bytes = sum(t.numel() * 2 for layer in self.layers for t in layer.values() if t is not None)

    def key(self, op: str) -> str:
        kind, ns, k = self.shapes[op]
        return configs.table_key(kind, configs.m_bucket(1), ns, k)

    def table_config(self, op: str) -> configs.SkinnyConfig:
        kind, ns, k = self.shapes[op]
        return configs.config_for(kind, 1, ns, k)

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
        return graph_us([lambda: self.step(cfgs)]) / len(self.layers)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--min-gain", type=float, default=0.005, help="relative gain a new config must bring")
    parser.add_argument("--budget-s", type=float, default=240.0, help="stop trying configs after this long")
    parser.add_argument("--write-configs", type=Path)
    parser.add_argument("--log", type=Path, help="every trial: op, config, us per layer")
    args = parser.parse_args()
    start = time.monotonic()
    chain = Chain(args.model, args.layers)
    current = {op: chain.table_config(op) for op in ORDER}
    baseline = best = chain.layer_us(current)
    print(f"{args.model}: {args.layers} layers, {chain.weight_bytes / 2**30:.2f} GiB of weights")
    print(f"table configs: {best:.2f} us per layer ({', '.join(f'{op} {describe(c)}' for op, c in current.items())})")
    trials = []
    for op in ORDER:
        _, _, k = chain.shapes[op]
        for cfg in wide_one_row_grid(k):
            if time.monotonic() - start > args.budget_s:
                break
            if cfg == current[op]:
                continue
            try:
                us = chain.layer_us({**current, op: cfg})
            except Exception as err:  # a config the compiler refuses (shared memory, registers): skip it
                print(f"  {op} {describe(cfg)} skipped: {str(err).splitlines()[0][:100]}")
                continue
            trials.append(f"{op}\t{describe(cfg)}\t{us:.3f}")
            if us < best * (1 - args.min_gain):
                current, best = {**current, op: cfg}, us
        print(f"after {op:8}: {best:.2f} us per layer, {op} {describe(current[op])} ({time.monotonic() - start:.0f} s)")
    final = chain.layer_us(current)
    print(
        f"chosen: {final:.2f} us per layer against the table's {baseline:.2f} ({100 * (1 - final / baseline):.1f}% less)"
    )
    if args.log:
        args.log.write_text("\n".join(trials) + "\n", encoding="utf-8")
    if args.write_configs and final < baseline:
        kept = configs.read_table(args.write_configs)
        chosen = {chain.key(op): cfg for op, cfg in current.items()}
        written_by = "benchmarks/kernel_sweep.py; batch 1: benchmarks/step_sweep.py"
        configs.write_table({**kept, **chosen}, args.write_configs, torch.cuda.get_device_name(), written_by)
        print(f"wrote {len(current)} configs to {args.write_configs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
