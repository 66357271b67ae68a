"""`tune --weights fp8|fp8-block`'s chain: decoder layers of MODEL's shapes with FP8 projections, called as the
fused FP8 program calls them (fused/layer_program.py), replayed as one CUDA graph.

The program runs the norm, one FP8 product over q/k/v (one per projection where block scales keep them apart),
o with its residual, the norm, one product over gate/up (or one each) with silu(gate) * up, then down with its
residual. Here the products are fp8_skinny.launch at the configs tried and the rest is torch (the same for
every config); the weights are random e4m3 values with float32 scales, made on the GPU, every layer its own,
more than the L2 cache holds. What is tuned is a distinct (N, K): the table keys a config by it, so calls of
one shape (k and v apart, say) share one.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from accelerate_graph.fused.kernels.configs import SkinnyConfig
from accelerate_graph.tune.chain import CHAIN_BYTES, MAX_LAYERS, MIN_LAYERS, graph_us
from accelerate_graph.tune.model_shapes import LayerShapes

DTYPE = torch.bfloat16
MAX_ULPS = 2.0  # a candidate's output against the reference, in units of bf16's last place (the kernel tests')
WEIGHT_SPREAD = 100.0  # e4m3 values of about this size (e4m3 holds up to 448)


@dataclasses.dataclass(frozen=True)
class Fp8Call:
    """One FP8 product of a layer: its name ("qkv" or "q", "o", "gate_up" or "gate", ...), N, K, and the op it
    is tuned under (`op`: the names of the calls of its (N, K) joined by "+")."""

    name: str
    n: int
    k: int
    op: str = ""


def _merged(sizes: tuple[int, ...], block: int | None) -> bool:
    """fused/layer_program._mergeable: per-channel scales always, block scales where no block row spans two parts."""
    return block is None or all(size % block == 0 for size in sizes[:-1])


def program_calls(shapes: LayerShapes, block: int | None) -> dict[str, list[Fp8Call]]:
    """The FP8 products of one layer by step of the program (qkv, o, gate_up, down), each named by the op it is
    tuned under."""
    hidden = shapes.hidden
    _, (o_n,), o_k = shapes.calls["o"]
    _, (down_n,), inter = shapes.calls["down"]
    qkv = shapes.parts.get("qkv") or shapes.calls["qkv"][1]
    gate_up = shapes.parts.get("gate_up") or (shapes.calls["gate_up"][1][0],) * 2
    steps = {
        "qkv": [Fp8Call("qkv", sum(qkv), hidden)] if _merged(qkv, block) else
               [Fp8Call(name, n, hidden) for name, n in zip("qkv", qkv)],
        "o": [Fp8Call("o", o_n, o_k)],
        "gate_up": [Fp8Call("gate_up", sum(gate_up), hidden)] if _merged(gate_up, block) else
                   [Fp8Call(name, n, hidden) for name, n in zip(("gate", "up"), gate_up)],
        "down": [Fp8Call("down", down_n, inter)],
    }  # fmt: skip
    names: dict[tuple[int, int], list[str]] = {}
    for calls in steps.values():
        for call in calls:
            names.setdefault((call.n, call.k), []).append(call.name)
    return {
        step: [dataclasses.replace(c, op="+".join(names[(c.n, c.k)])) for c in calls] for step, calls in steps.items()
    }


def tuned_ops(shapes: LayerShapes, block: int | None) -> dict[str, tuple[int, int]]:
    """The ops the sweep tunes, op -> (N, K), the most bytes first (the others are tuned around them)."""
    ops = {c.op: (c.n, c.k) for calls in program_calls(shapes, block).values() for c in calls}
    return dict(sorted(ops.items(), key=lambda item: -item[1][0] * item[1][1]))


def fp8_layer_bytes(shapes: LayerShapes, block: int | None) -> int:
    """Bytes of one layer's FP8 weights (one an element)."""
    return sum(c.n * c.k for calls in program_calls(shapes, block).values() for c in calls)


def fp8_layers_for(shapes: LayerShapes, block: int | None) -> int:
    return max(MIN_LAYERS, min(MAX_LAYERS, math.ceil(CHAIN_BYTES / max(1, fp8_layer_bytes(shapes, block)))))


def random_fp8(n: int, k: int, block: int | None, gen: torch.Generator, device) -> tuple[torch.Tensor, torch.Tensor]:
    """A random e4m3 weight [n, k] and float32 scales (per channel, or per `block` block) whose product has rows
    of about unit norm: a chain of them keeps its activations in range."""
    from accelerate_graph.quant.fp8_format import E4M3, E4M3_MAX, scale_shape

    weight = (torch.randn(n, k, device=device, generator=gen) * WEIGHT_SPREAD).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    size = scale_shape((n, k), block)
    scale = (torch.rand(size, device=device, generator=gen) + 0.5) * (k**-0.5 / WEIGHT_SPREAD)
    return weight, scale


def ulps(got: torch.Tensor, want: torch.Tensor) -> float:
    """The largest error of `got` in units of the last place of `want`'s dtype, against the larger of each
    element and the mean magnitude (tests/quant's measure)."""
    unit = torch.finfo(want.dtype).eps * torch.maximum(want.float().abs(), want.float().abs().mean())
    return ((got.float() - want.float()).abs() / unit).max().item()


class Fp8Chain:
    """`layers` decoder layers of `shapes` with FP8 weights (`block`: None per channel, else block scales) at
    `rows` rows on `device`. `ops`: what the sweep tunes, op -> (N, K); a config whose product is further than
    `max_ulps` from the reference's is wrong."""

    max_ulps = MAX_ULPS

    def __init__(
        self, shapes: LayerShapes, block: int | None, rows: int, device: torch.device, layers: int | None = None
    ):
        self.shapes, self.block, self.rows, self.device = shapes, block, rows, device
        self.steps = program_calls(shapes, block)
        self.ops = tuned_ops(shapes, block)
        self.layers_count = layers or fp8_layers_for(shapes, block)
        gen = torch.Generator(device=device).manual_seed(0)

        def rand(*size, scale=1.0):
            return (torch.randn(*size, device=device, generator=gen) * scale).to(DTYPE)

        def bias(step: str, n: int):
            return rand(n) if step in shapes.biases else None

        self.layers = [
            {
                "calls": {
                    c.name: (*random_fp8(c.n, c.k, block, gen, device), bias(step, c.n))
                    for step, calls in self.steps.items()
                    for c in calls
                },
                "norm1": rand(shapes.hidden, scale=0.1) + 1,
                "norm2": rand(shapes.hidden, scale=0.1) + 1,
            }
            for _ in range(self.layers_count)
        ]
        self.x = rand(rows, shapes.hidden)
        self.attention = rand(rows, self.steps["o"][0].k)  # stands for the attention's output, which o reads
        self._checked: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # op -> (input, reference product)

    def _product(self, layer: dict, call, x: torch.Tensor, cfgs: dict[str, SkinnyConfig]) -> torch.Tensor:
        from accelerate_graph.quant import fp8_skinny

        weight, scale, bias = layer["calls"][call.name]
        return fp8_skinny.launch(x, weight, scale, self.block, bias, cfg=cfgs[call.op])

    def run(self, cfgs: dict[str, SkinnyConfig]) -> torch.Tensor:
        """The chain with each op (`ops`' names) at its config in `cfgs`: the last hidden."""
        from accelerate_graph.fused.kernels.skinny_matmul import reference_rms_norm

        eps, h, steps = self.shapes.eps, self.x, self.steps
        for layer in self.layers:
            xn = reference_rms_norm(h, layer["norm1"], eps, "llama")
            for call in steps["qkv"]:
                self._product(layer, call, xn, cfgs)
            h2 = h + self._product(layer, steps["o"][0], self.attention, cfgs)
            xn = reference_rms_norm(h2, layer["norm2"], eps, "llama")
            halves = [self._product(layer, call, xn, cfgs) for call in steps["gate_up"]]
            gate, up = halves[0].chunk(2, dim=-1) if len(halves) == 1 else halves
            h = h2 + self._product(layer, steps["down"][0], torch.nn.functional.silu(gate) * up, cfgs)
        return h

    def layer_us(self, cfgs: dict[str, SkinnyConfig]) -> float:
        """Microseconds per layer of the chain at `cfgs`, replayed as one CUDA graph."""
        return graph_us(lambda: self.run(cfgs), self.rows, self.layers_count)

    def error_ulps(self, op: str, cfg: SkinnyConfig) -> float:
        """`op`'s product at `cfg` on the first layer's weights (random input rows) against the reference
        (quant/fp8_reference.py), in units of bf16's last place."""
        from accelerate_graph.quant import fp8_skinny
        from accelerate_graph.quant.fp8_reference import reference_fp8_matmul

        call = next(c for calls in self.steps.values() for c in calls if c.op == op)
        weight, scale, bias = self.layers[0]["calls"][call.name]
        if op not in self._checked:
            gen = torch.Generator(device=self.device).manual_seed(1)
            x = torch.randn(self.rows, call.k, device=self.device, generator=gen).to(DTYPE)
            self._checked[op] = x, reference_fp8_matmul(x, weight, scale, self.block, bias)
        x, want = self._checked[op]
        return ulps(fp8_skinny.launch(x, weight, scale, self.block, bias, cfg=cfg), want)

    def torch_chain(self) -> torch.Tensor:
        """The same chain with every product the reference's (the definition): what run() must agree with. The
        q/k/v products are left out: nothing in the chain reads them (error_ulps checks them)."""
        from accelerate_graph.fused.kernels.skinny_matmul import reference_rms_norm
        from accelerate_graph.quant.fp8_reference import reference_fp8_matmul

        def product(layer, call, x):
            return reference_fp8_matmul(x, *layer["calls"][call.name][:2], self.block, layer["calls"][call.name][2])

        eps, h, steps = self.shapes.eps, self.x, self.steps
        for layer in self.layers:
            h2 = h + product(layer, steps["o"][0], self.attention)
            xn = reference_rms_norm(h2, layer["norm2"], eps, "llama")
            halves = [product(layer, call, xn) for call in steps["gate_up"]]
            gate, up = halves[0].chunk(2, dim=-1) if len(halves) == 1 else halves
            h = h2 + product(layer, steps["down"][0], torch.nn.functional.silu(gate) * up)
        return h
