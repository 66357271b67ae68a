"""A chain of decoder layers' projections, MODEL's shapes, replayed as one CUDA graph: what `tune` times.

Each op alone ranked configs differently than a decode step did (H200, 2026-12-01: the 8B's skinny kernels ran
3,682 us a step with one table and 3,837 with a table whose configs had timed better alone). The chain calls
the four folded ops in the layer program's order (q/k/v with the input norm, o with its residual, gate/up with
the second norm and SiLU, down with its residual), every layer on weights of its own, more than the L2 cache
holds, so each call reads its weights from memory as in the step."""

from __future__ import annotations

import math

import torch

from accelerate_graph import settings
from accelerate_graph.fused.kernels.configs import SkinnyConfig
from accelerate_graph.tune.model_shapes import LayerShapes

DTYPE = torch.bfloat16
CHAIN_BYTES = 160 * 2**20  # weights per chain: > 3x the H200's 50 MB L2
MIN_LAYERS, MAX_LAYERS = 8, 32


def layers_for(shapes: LayerShapes) -> int:
    """Layers in a chain: enough to outgrow the L2 cache, at least MIN_LAYERS to average over."""
    return max(MIN_LAYERS, min(MAX_LAYERS, math.ceil(CHAIN_BYTES / max(1, shapes.layer_bytes))))


def graph_us(call, rows: int, repeats: int = 1) -> float:
    """Microseconds a replay of `call` captured as one CUDA graph takes (median), divided by `repeats`; the graph's
    kernel nodes ask for the shared-memory split the decode step's graph of `rows` rows asks for."""
    import triton.testing

    from accelerate_graph.core.backends.cuda import carveout_for, graph_asking, instantiate_asking

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()  # compiles the kernels outside the capture
    torch.cuda.current_stream().wait_stream(side)
    carveout = carveout_for(settings.current().smem_carveout, rows)
    graph = graph_asking(carveout)
    with torch.cuda.graph(graph):
        call()
    instantiate_asking(graph, carveout)
    ms = triton.testing.do_bench(graph.replay, warmup=3, rep=15, return_mode="median")
    return ms * 1e3 / repeats


class Chain:
    """`layers` decoder layers of `shapes` at `rows` rows on `device`, random weights of their own each."""

    def __init__(self, shapes: LayerShapes, rows: int, device: torch.device, layers: int | None = None):
        self.shapes, self.rows, self.device = shapes, rows, device
        self.layers_count = layers or layers_for(shapes)
        gen = torch.Generator(device=device).manual_seed(0)

        def rand(*size, scale=1.0):
            return (torch.randn(*size, device=device, generator=gen) * scale).to(DTYPE)

        calls, hidden = shapes.calls, shapes.hidden
        qkv_n, o_k, inter = sum(calls["qkv"][1]), calls["o"][2], calls["gate_up"][1][0]
        self.layers = [
            {
                "qkv": rand(qkv_n, hidden, scale=hidden**-0.5),
                "qkv_bias": rand(qkv_n) if "qkv" in shapes.biases else None,
                "o": rand(hidden, o_k, scale=o_k**-0.5),
                "o_bias": rand(hidden) if "o" in shapes.biases else None,
                "gate_up": rand(2 * inter, hidden, scale=hidden**-0.5),  # gate's rows, then up's
                "down": rand(hidden, inter, scale=inter**-0.5),
                "down_bias": rand(hidden) if "down" in shapes.biases else None,
                "norm1": rand(hidden, scale=0.1) + 1,
                "norm2": rand(hidden, scale=0.1) + 1,
            }
            for _ in range(self.layers_count)
        ]
        self.x = rand(rows, hidden)
        self.attention = rand(rows, o_k)  # stands for the attention's output, which o reads

    def run(self, cfgs: dict[str, SkinnyConfig]) -> torch.Tensor:
        """The chain on the skinny kernels, each op (ORDER's names) at its config in `cfgs`: the last hidden."""
        from accelerate_graph.fused.kernels import skinny_matmul as sm

        eps, h = self.shapes.eps, self.x
        for layer in self.layers:
            sm.launch("proj", h, layer["norm1"], eps, "llama", [layer["qkv"]], [layer["qkv_bias"]], cfg=cfgs["qkv"])
            o = [layer["o"]], [layer["o_bias"]]
            h2 = sm.launch("residual", self.attention, None, 0.0, "llama", *o, residual=h, cfg=cfgs["o"])[0]
            gate_up = list(layer["gate_up"].chunk(2)), [None, None]
            g = sm.launch("gate_up", h2, layer["norm2"], eps, "llama", *gate_up, cfg=cfgs["gate_up"])[0]
            down = [layer["down"]], [layer["down_bias"]]
            h = sm.launch("residual", g, None, 0.0, "llama", *down, residual=h2, cfg=cfgs["down"])[0]
        return h

    def layer_us(self, cfgs: dict[str, SkinnyConfig]) -> float:
        """Microseconds per layer of the skinny chain at `cfgs`, replayed as one CUDA graph."""
        return graph_us(lambda: self.run(cfgs), self.rows, self.layers_count)

    def torch_chain(self, h: torch.Tensor, attention: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The same chain as the fused step runs it without the skinny kernels: the norms, SiLU and residual adds
        in torch (the skinny kernels' references, which round alike), the matmuls F.linear (q/k/v and gate/up one
        each, as the layer program merges them). Returns the last hidden and every q/k/v projection."""
        from accelerate_graph.fused.kernels.skinny_matmul import reference_rms_norm

        linear, eps = torch.nn.functional.linear, self.shapes.eps
        projections = []  # returned, so that inductor keeps every q/k/v matmul (the chain never reads them)
        for layer in self.layers:
            projections.append(
                linear(reference_rms_norm(h, layer["norm1"], eps, "llama"), layer["qkv"], layer["qkv_bias"])
            )
            h2 = h + linear(attention, layer["o"], layer["o_bias"])
            gate, up = linear(reference_rms_norm(h2, layer["norm2"], eps, "llama"), layer["gate_up"]).chunk(2, dim=-1)
            h = h2 + linear(torch.nn.functional.silu(gate) * up, layer["down"], layer["down_bias"])
        return h, projections

    def inductor_layer_us(self) -> float:
        """Microseconds per layer of torch_chain compiled by inductor with the fused step's settings."""
        from accelerate_graph.compat import torch_internals
        from accelerate_graph.fused import layers as fused_layers
        from accelerate_graph.fused.kernels import pdl

        tuned = fused_layers.tunes_at(self.shapes.hidden, settings.current().inductor_tuning)
        options = fused_layers.inductor_settings(pdl.active(self.device), tuned)
        with torch_internals.inductor_config_patched(options):
            compiled = torch.compile(self.torch_chain, fullgraph=True, dynamic=False)
            compiled(self.x, self.attention)  # compiles (and tunes) outside the timed graph
            return graph_us(lambda: compiled(self.x, self.attention), self.rows, self.layers_count)
