"""`tune --weights fp8|fp8-block`'s chain: decoder layers of MODEL's shapes with FP8 projections, called as the
fused FP8 program calls them (fused/layer_program.py), replayed as one CUDA graph.

The program runs the norm, one FP8 product over q/k/v (one per projection where block scales keep them apart),
o with its residual, the norm, one product over gate/up (or one each) with silu(gate) * up, then down with its
residual. Here the products are fp8_skinny.launch at the configs tried; with the fp8_fold setting on (as the
step runs them on a GPU) the norms, residual adds and the merged gate/up's activation are folded into those
launches, else they are torch (the same for every config). The weights are random e4m3 values with float32
scales, made on the GPU, every layer its own, more than the L2 cache holds. What is tuned is what the table
keys a config by (N, K, and whether the gate/up is folded), so calls of one shape (k and v apart, say) share one.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import torch

from accelerate_graph.fused.kernels.configs import SkinnyConfig
from accelerate_graph.fused.layer_program import fp8_folds, mergeable
from accelerate_graph.tune.chain import CHAIN_BYTES, MAX_LAYERS, MIN_LAYERS, graph_us
from accelerate_graph.tune.model_shapes import LayerShapes

DTYPE = torch.bfloat16
# a candidate's output against the reference, in units of bf16's last place (the kernel tests' bar); the folded
# gate/up's unit is one last place of its gate, of its up and of its output, root-sum-squared (gated_error_ulps)
MAX_ULPS = 2.0
WEIGHT_SPREAD = 100.0  # e4m3 values of about this size (e4m3 holds up to 448)


@dataclasses.dataclass(frozen=True)
class Fp8Call:
    """One FP8 product of a layer: its name ("qkv" or "q", "o", "gate_up" or "gate", ...), its weight's rows N and
    K, the op it is tuned under (`op`: the names of the calls of its key joined by "+"), and `gate_up`: the
    merged gate/up with silu(gate) * up folded in (N/2 outputs)."""

    name: str
    n: int
    k: int
    op: str = ""
    gate_up: bool = False

    @property
    def key(self) -> tuple[int, int, bool]:
        """What the table keys its config by: outputs, K, folded gate/up."""
        return (self.n // 2 if self.gate_up else self.n), self.k, self.gate_up


def program_calls(shapes: LayerShapes, block: int | None, folds: bool = False) -> dict[str, list[Fp8Call]]:
    """The FP8 products of one layer by step of the program (qkv, o, gate_up, down), each named by the op it is
    tuned under; `folds`: the merged gate/up folds its activation in (the fp8_fold setting)."""
    hidden = shapes.hidden
    _, (o_n,), o_k = shapes.calls["o"]
    _, (down_n,), inter = shapes.calls["down"]
    qkv = shapes.parts.get("qkv") or shapes.calls["qkv"][1]
    gate_up = shapes.parts.get("gate_up") or (shapes.calls["gate_up"][1][0],) * 2
    steps = {
        "qkv": [Fp8Call("qkv", sum(qkv), hidden)] if mergeable(qkv, block) else
               [Fp8Call(name, n, hidden) for name, n in zip("qkv", qkv)],
        "o": [Fp8Call("o", o_n, o_k)],
        "gate_up": [Fp8Call("gate_up", sum(gate_up), hidden, gate_up=folds)] if mergeable(gate_up, block) else
                   [Fp8Call(name, n, hidden) for name, n in zip(("gate", "up"), gate_up)],
        "down": [Fp8Call("down", down_n, inter)],
    }  # fmt: skip
    names: dict[tuple[int, int, bool], list[str]] = {}
    for calls in steps.values():
        for call in calls:
            names.setdefault(call.key, []).append(call.name)
    return {step: [dataclasses.replace(c, op="+".join(names[c.key])) for c in calls] for step, calls in steps.items()}


def tuned_calls(shapes: LayerShapes, block: int | None, folds: bool = False) -> dict[str, Fp8Call]:
    """The ops the sweep tunes, op -> its first call, the most weight bytes first (the others are tuned around
    them)."""
    ops: dict[str, Fp8Call] = {}
    for calls in program_calls(shapes, block, folds).values():
        for call in calls:
            ops.setdefault(call.op, call)
    return dict(sorted(ops.items(), key=lambda item: -item[1].n * item[1].k))


def tuned_ops(shapes: LayerShapes, block: int | None, folds: bool = False) -> dict[str, tuple[int, int]]:
    """The ops the sweep tunes, op -> (outputs, K), the most weight bytes first."""
    return {op: call.key[:2] for op, call in tuned_calls(shapes, block, folds).items()}


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


class Fp8Chain:
    """`layers` decoder layers of `shapes` with FP8 weights (`block`: None per channel, else block scales) at
    `rows` rows on `device`. `ops`: what the sweep tunes, op -> (outputs, K); `gate_up_ops`: those that are the
    folded gate/up (their own table key); a config whose output is further than `max_ulps` from the reference's
    (in error_ulps' units) is wrong. The folds follow the fp8_fold setting in use as the step's do
    (layer_program.fp8_folds)."""

    max_ulps = MAX_ULPS

    def __init__(
        self, shapes: LayerShapes, block: int | None, rows: int, device: torch.device, layers: int | None = None
    ):
        from accelerate_graph import settings

        self.shapes, self.block, self.rows, self.device = shapes, block, rows, device
        self.folds = fp8_folds(settings.current().fp8_fold, True, device.type == "cuda")  # the chain runs the kernel
        self.steps = program_calls(shapes, block, self.folds)
        self.ops = tuned_ops(shapes, block, self.folds)
        self.gate_up_ops = frozenset(op for op, call in tuned_calls(shapes, block, self.folds).items() if call.gate_up)
        # the ops a launch of which folds the norm in (a config may take it apart: norm_apart)
        normed = [c.op for step in ("qkv", "gate_up") for c in self.steps[step]]
        self.normed_ops = frozenset(normed if self.folds else ())
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
        self._checked: dict[tuple[str, str], tuple] = {}  # (step, call) -> (input, launch keywords, measure)

    def _product(self, layer: dict, call, x: torch.Tensor, cfgs: dict[str, SkinnyConfig], **folded) -> torch.Tensor:
        """`call`'s launch at its op's config; `folded`: launch's norm_weight/eps, residual or gate_up."""
        from accelerate_graph.quant import fp8_skinny

        weight, scale, bias = layer["calls"][call.name]
        return fp8_skinny.launch(x, weight, scale, self.block, bias, cfg=cfgs[call.op], **folded)

    def run(self, cfgs: dict[str, SkinnyConfig]) -> torch.Tensor:
        """The chain with each op (`ops`' names) at its config in `cfgs`: the last hidden."""
        if not self.folds:
            return self._unfolded(lambda layer, call, x: self._product(layer, call, x, cfgs))
        eps, h, steps = self.shapes.eps, self.x, self.steps
        for layer in self.layers:
            for call in steps["qkv"]:
                self._product(layer, call, h, cfgs, norm_weight=layer["norm1"], eps=eps)
            h2 = self._product(layer, steps["o"][0], self.attention, cfgs, residual=h)
            normed = dict(norm_weight=layer["norm2"], eps=eps)
            if len(steps["gate_up"]) == 1:
                act = self._product(layer, steps["gate_up"][0], h2, cfgs, gate_up=True, **normed)
            else:
                gate, up = (self._product(layer, call, h2, cfgs, **normed) for call in steps["gate_up"])
                act = torch.nn.functional.silu(gate) * up
            h = self._product(layer, steps["down"][0], act, cfgs, residual=h2)
        return h

    def _unfolded(self, product) -> torch.Tensor:
        """The chain with the norms, residual adds and activation in torch around `product(layer, call, x)`."""
        from accelerate_graph.fused.kernels.skinny_matmul import reference_rms_norm

        eps, h, steps = self.shapes.eps, self.x, self.steps
        for layer in self.layers:
            xn = reference_rms_norm(h, layer["norm1"], eps, "llama")
            for call in steps["qkv"]:
                product(layer, call, xn)
            h2 = h + product(layer, steps["o"][0], self.attention)
            xn = reference_rms_norm(h2, layer["norm2"], eps, "llama")
            halves = [product(layer, call, xn) for call in steps["gate_up"]]
            gate, up = halves[0].chunk(2, dim=-1) if len(halves) == 1 else halves
            h = h2 + product(layer, steps["down"][0], torch.nn.functional.silu(gate) * up)
        return h

    def layer_us(self, cfgs: dict[str, SkinnyConfig]) -> float:
        """Microseconds per layer of the chain at `cfgs`, replayed as one CUDA graph."""
        return graph_us(lambda: self.run(cfgs), self.rows, self.layers_count)

    def error_ulps(self, op: str, cfg: SkinnyConfig) -> float:
        """`op`'s launches at `cfg` on the first layer's weights (random input rows), each as the chain calls it
        (folded or not), against the reference (quant/fp8_reference.py, torch around it): the worst error in
        units of bf16's last place; the folded gate/up's against the exact silu(gate) * up of the reference's
        float32 sums, in units of gate's, up's and the output's last places carried through silu (a correct
        kernel's roundings cost at most 1.22 there, at any gate)."""
        from accelerate_graph.quant import fp8_skinny

        worst = 0.0
        for step, call in self._calls_of(op):
            weight, scale, bias = self.layers[0]["calls"][call.name]
            x, kwargs, measure = self._checked_call(step, call)
            error = measure(fp8_skinny.launch(x, weight, scale, self.block, bias, cfg=cfg, **kwargs))
            if math.isnan(error):
                return error
            worst = max(worst, error)
        return worst

    def compile_only(self, op: str, cfg: SkinnyConfig) -> None:
        """Compiles `op`'s kernels at `cfg` into Triton's cache as error_ulps and run launch them (the same
        specializations: shapes, dtypes, folds), running nothing."""
        from accelerate_graph.quant import fp8_skinny

        with fp8_skinny.compiling_only():
            for step, call in self._calls_of(op):
                weight, scale, bias = self.layers[0]["calls"][call.name]
                x, kwargs = self._call_inputs(step, call)
                fp8_skinny.launch(x, weight, scale, self.block, bias, cfg=cfg, **kwargs)

    def _call_inputs(self, step: str, call: Fp8Call) -> tuple[torch.Tensor, dict]:
        """Random input rows for `call` at `step` and the launch keywords the chain's run passes there."""
        gen = torch.Generator(device=self.device).manual_seed(1)
        x = torch.randn(self.rows, call.k, device=self.device, generator=gen).to(DTYPE)
        norm = (torch.randn(call.k, device=self.device, generator=gen) * 0.1 + 1).to(DTYPE)
        residual = torch.randn(self.rows, call.key[0], device=self.device, generator=gen).to(DTYPE)
        kwargs: dict = {}
        if self.folds and step in ("qkv", "gate_up"):
            kwargs = dict(norm_weight=norm, eps=self.shapes.eps)
        if call.gate_up:
            kwargs["gate_up"] = True
        elif self.folds and step in ("o", "down"):
            kwargs["residual"] = residual
        return x, kwargs

    def _checked_call(self, step: str, call: Fp8Call) -> tuple[torch.Tensor, dict, Callable]:
        """_call_inputs and the measure of an output's error against the reference's (once a call)."""
        from accelerate_graph.fused.kernels.skinny_matmul import reference_rms_norm
        from accelerate_graph.quant.fp8_reference import (
            error_ulps,
            gated_error_ulps,
            reference_fp8_matmul,
            reference_fp8_sums,
        )

        if (step, call.name) not in self._checked:
            weight, scale, bias = self.layers[0]["calls"][call.name]
            x, kwargs = self._call_inputs(step, call)
            norm = kwargs.get("norm_weight")
            xn = x if norm is None else reference_rms_norm(x, norm, self.shapes.eps, "llama")
            if call.gate_up:
                gate, up = reference_fp8_sums(xn, weight, scale, self.block, bias).chunk(2, dim=-1)
                measure = functools.partial(gated_error_ulps, gate=gate, up=up)
            else:
                want = reference_fp8_matmul(xn, weight, scale, self.block, bias)
                if "residual" in kwargs:
                    want = kwargs["residual"] + want
                measure = functools.partial(error_ulps, want=want)
            self._checked[(step, call.name)] = x, kwargs, measure
        return self._checked[(step, call.name)]

    def _calls_of(self, op: str) -> list[tuple[str, Fp8Call]]:
        """Each distinct way the chain calls `op`: (its step, its first call there)."""
        found: dict[str, Fp8Call] = {}
        for step, calls in self.steps.items():
            for call in calls:
                if call.op == op:
                    found.setdefault(step, call)
        return list(found.items())

    def torch_chain(self) -> torch.Tensor:
        """The same chain with every product the reference's (the definition) and torch around them: what run()
        must agree with, folded or not."""
        from accelerate_graph.quant.fp8_reference import reference_fp8_matmul

        def product(layer, call, x):
            weight, scale, bias = layer["calls"][call.name]
            return reference_fp8_matmul(x, weight, scale, self.block, bias)

        return self._unfolded(product)
