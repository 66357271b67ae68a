"""Our own decode forward for the common decoder layer, so that fused mode runs fewer, fuller kernels.

HF's Llama-family layer is norm -> q, k, v -> rotary -> cache write -> attention -> o -> residual ->
norm -> gate, up -> act * up -> down -> residual: inductor makes ~14 kernels of it at batch 1 and runs
its matmuls on cuBLAS at larger batches (docs/PERF.md). Written out here, the norm folds into the
projections that read it (q, k and v in one launch; gate and up in another, the activation in its
epilogue) and the residual adds fold into o and down: `LayerOps` says how each of those four
operations runs (the torch reference here, or Triton kernels that read each weight once).

Only layers whose forward is known to be exactly this sequence take it (`program_for`); every other
layer, and every step with more than one token (the prompt), keeps HF's forward. `verify` judges the
result like any other graph. The projections are plain nn.Linear layers, or all FP8 (quant/fp8_linear.py,
one scheme): then each projection is one call of the FP8 product (`fp8_matmul`) after the norm, or with the
fp8_fold setting one call with the norm before it, the residual add after it (or gate/up's activation) folded in.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from accelerate_graph.compat.torch_internals import has_call_hooks
from accelerate_graph.compat.transformers_internals import static_layer_write
from accelerate_graph.fused.grouped_attention import grouped_decode_attention
from accelerate_graph.fused.kernels import configs, skinny_matmul
from accelerate_graph.quant.fp8_format import E4M3
from accelerate_graph.quant.fp8_linear import Fp8Linear
from accelerate_graph.quant.fp8_matmul import (
    fp8_matmul,
    fp8_matmul_residual,
    fp8_norm_gate_up,
    fp8_norm_matmul,
    skinny_kernel_runs,
)
from accelerate_graph.settings import SKINNY_OPS, current

# Decoder layers whose forward is the sequence above with a Llama RMSNorm (x * rsqrt, cast, * w),
# rotate-half rotary embedding, SiLU gated MLP and an optional q/k/v bias. Checked by class name
# *and* structure (`program_for`), so a subclass that changes the forward is not taken.
LLAMA_FAMILY = frozenset({"LlamaDecoderLayer", "Qwen2DecoderLayer", "MistralDecoderLayer"})
_ATTENTION_CHILDREN = {"q_proj", "k_proj", "v_proj", "o_proj"}
_MLP_CHILDREN = {"gate_proj", "up_proj", "down_proj", "act_fn"}
_LAYER_CHILDREN = {"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"}


@dataclass(frozen=True)
class LayerOps:
    """How the four folded operations run (fused/kernels/skinny_matmul.py: the Triton kernels and their
    torch references, which define the rounding), for Llama's RMSNorm and SiLU. `merged`: q/k/v and
    gate/up run as one projection each, over weights `merge_projections` concatenated once; then
    norm_projections gets the one q/k/v weight and norm_gate_up the one gate/up weight (w_up None).
    `fp8`: the ops also take `Fp8Weight`s, so layers of FP8 projections run the program under them."""

    name: str
    norm_projections: Callable
    linear_residual: Callable
    norm_gate_up: Callable
    merged: bool = False
    fp8: bool = False


class Fp8Weight(NamedTuple):
    """An FP8 projection's weight as the ops take it (quant/fp8_format.py): e4m3 [N, K], its float32 scale
    ([N] per channel, or per `block` x `block` block) and the block (None: per channel)."""

    weight: torch.Tensor
    scale: torch.Tensor
    block: int | None


def _weight(module: torch.nn.Module) -> torch.Tensor | Fp8Weight:
    """What the ops multiply by for a projection `program_for` took."""
    if isinstance(module, Fp8Linear):
        return Fp8Weight(module.weight, module.scale, module.block)
    return module.weight


def _project(x: torch.Tensor, weight: torch.Tensor | Fp8Weight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ W^T (+ bias) in x's dtype, as HF's Linear or Fp8Linear rounds it."""
    if isinstance(weight, Fp8Weight):
        return fp8_matmul(x, weight.weight, weight.scale, weight.block, bias)
    return torch.nn.functional.linear(x, weight, bias)


def _ops(name: str, norm_projections, linear_residual, norm_gate_up) -> LayerOps:
    return LayerOps(
        name,
        lambda x, norm_weight, eps, weights, biases: norm_projections(x, norm_weight, eps, "llama", weights, biases),
        linear_residual,
        lambda x, norm_weight, eps, w_gate, w_up: norm_gate_up(x, norm_weight, eps, "llama", w_gate, w_up, "silu"),
    )


REFERENCE_OPS = _ops(
    "torch", skinny_matmul.reference_norm_projections, skinny_matmul.reference_linear_residual,
    skinny_matmul.reference_norm_gate_up,
)  # fmt: skip


# -- q/k/v and gate/up as one projection each, in the model's dtype as HF rounds them -------------------
# Above batch 1 every projection is a cuBLAS call of a few microseconds, bound by its launch, not its
# bytes (Qwen2.5-0.5B at batch 8: 242 matmuls, ~4 us each): one call for q, k and v and one for gate and
# up remove 3 of 7 per layer. The weights are concatenated once (merge_projections) and the modules'
# own weights become views of the concatenation, so memory does not grow and HF's forward (the prompt,
# verify's eager run) reads the same numbers.
MERGED_QKV, MERGED_QKV_BIAS, MERGED_GATE_UP = "cugraph_qkv_weight", "cugraph_qkv_bias", "cugraph_gate_up_weight"
MERGED_QKV_SCALE, MERGED_GATE_UP_SCALE = "cugraph_qkv_scale", "cugraph_gate_up_scale"  # FP8 layers' scales


# At batch 1 each projection is a GEMV: our skinny kernels (the norm and the residual folded in) at the
# configs `cugraph-accel tune` chose for this GPU (fused/kernels/tables/), or inductor's GEMV reductions, whose configs
# are picked anew in each process. Setting skinny_batch_1 "auto": ours for the shapes the table has (a shape
# without one, a --tp shard say, would run an untimed heuristic config); "on" every shape, "off" none.
def skinny_at_batch_1(op: str, ns: tuple[int, ...], k: int) -> bool:
    """Whether a batch-1 call of `op` (output sizes `ns`, reduction `k`) runs the skinny kernels, where the
    device runs them: the skinny_batch_1 setting (settings.current()), then the table."""
    chosen = current().skinny_batch_1
    if chosen != "auto":
        return chosen == "on"
    return configs.in_table(op, 1, ns, k)


def folded_calls(layer: torch.nn.Module) -> list[tuple[str, tuple[int, ...], int]]:
    """(op, output sizes, reduction) of the four folded calls of `layer` (merged)."""
    attention, mlp = layer.self_attn, layer.mlp
    hidden = attention.q_proj.in_features
    qkv = sum(p.out_features for p in (attention.q_proj, attention.k_proj, attention.v_proj))
    return [
        ("proj", (qkv,), hidden),
        ("residual", (attention.o_proj.out_features,), attention.o_proj.in_features),
        ("gate_up", (mlp.gate_proj.out_features,), hidden),
        ("residual", (mlp.down_proj.out_features,), mlp.down_proj.in_features),
    ]


def layer_at_batch_1_is_skinny(layer: torch.nn.Module) -> bool:
    """Whether all four folded calls of `layer` (merged) run the skinny kernels at batch 1, device aside."""
    return all(skinny_at_batch_1(op, ns, k) for op, ns, k in folded_calls(layer))


# Above batch 1 the same kernels run on tensor cores (rows padded to 16) in place of cuBLAS only where a
# whole step measured faster (cuBLAS's kernels take no part in PDL). Setting skinny_batches "auto": each op at
# the shapes and up to the rows of SKINNY_WINS_ABOVE_BATCH_1; "on" every op at every shape and batch, "off"
# none, or a comma list of ops for those alone. A batch past an op's limit runs cuBLAS, in a graph of its
# own (dynamo guards on the rows).
EVERY_ROW = 1 << 62  # skinny_rows_above_batch_1 of an op the setting names: no limit on the rows
# (op, outputs, inputs) -> the most rows at which a step ran faster with that op on the skinny kernels
# (H200, benchmarks/profile_step.py and timing_gap.py, docs/PERF.md).
SKINNY_WINS_ABOVE_BATCH_1: dict[tuple[str, int, int], int] = {
    ("residual", 2048, 2048): 32,  # Llama-3.2-1B's o
    ("residual", 2048, 8192): 32,  # Llama-3.2-1B's down
    ("proj", 1152, 896): 32,  # Qwen2.5-0.5B's q/k/v
    ("residual", 896, 896): 32,  # its o
    ("gate_up", 4864, 896): 32,
    ("residual", 896, 4864): 32,  # its down
}


def ops_above_batch_1(value: str) -> frozenset[str] | None:
    """The ops a skinny_batches value (as settings.py parsed it) runs above batch 1 at every shape and row;
    None for "auto" (SKINNY_WINS_ABOVE_BATCH_1's shapes and rows)."""
    if value == "auto":
        return None
    if value == "off":
        return frozenset()
    if value == "on":
        return frozenset(SKINNY_OPS)
    return frozenset(value.split(","))


def skinny_rows_above_batch_1(op: str, ns: tuple[int, ...], k: int) -> int:
    """The most rows (above one) at which a call of `op` (output sizes `ns`, reduction `k`) runs the skinny
    kernels, where the device runs them: EVERY_ROW for the ops the skinny_batches setting names (0 for the
    others), by default ("auto") SKINNY_WINS_ABOVE_BATCH_1's rows for its shapes (0 for the others)."""
    ops = ops_above_batch_1(current().skinny_batches)
    if ops is None:
        return SKINNY_WINS_ABOVE_BATCH_1.get((op, sum(ns), k), 0)
    return EVERY_ROW if op in ops else 0


def skinny_at(op: str, ns: tuple[int, ...], k: int, rows) -> bool:
    """Whether `rows` rows of `op` run the skinny kernels, device aside. `rows` may be dynamo's symbolic
    size: a comparison with a limit becomes a guard, so each side of a limit gets its own graph."""
    if rows == 1:
        return skinny_at_batch_1(op, ns, k)
    limit = skinny_rows_above_batch_1(op, ns, k)
    return limit == EVERY_ROW or (limit > 1 and rows <= limit)


def skinny_calls_at(layer: torch.nn.Module, rows: int) -> frozenset[tuple[str, tuple[int, ...], int]]:
    """The folded calls of `layer` (merged) that run the skinny kernels at `rows` rows, device aside: batches
    with the same calls share one compiled graph (FusedForward's batch classes)."""
    return frozenset(call for call in folded_calls(layer) if skinny_at(*call, rows))


def layer_ops_above_batch_1(layer: torch.nn.Module) -> dict[str, int]:
    """The ops of `layer` (merged) that run the skinny kernels above batch 1 and the most rows each does
    (EVERY_ROW: no limit), device aside (for notes)."""
    out: dict[str, int] = {}
    for op, ns, k in folded_calls(layer):
        rows = skinny_rows_above_batch_1(op, ns, k)
        if rows > 1:
            out[op] = max(out.get(op, 0), rows)
    return out


def _skinny(x: torch.Tensor, op: str, ns: tuple[int, ...]) -> bool:
    """Whether this call runs the skinny kernels: a device that runs them (a CUDA device; a CPU tensor
    only under the Triton interpreter, the tests) and skinny_at its rows."""
    if not skinny_matmul.runs_triton(x):
        return False
    return skinny_at(op, ns, int(x.shape[-1]), x.shape[0])


# FP8 weights never take the skinny kernels here (they read the model's dtype): fp8_matmul picks its own path
# per call, a skinny FP8 kernel at decode's rows on a GPU. With the fp8_fold setting the norm before a
# projection, the residual add after one and merged gate/up's silu(gate) * up run inside that kernel.
def fp8_folds(chosen: str, kernel_runs: bool, on_cuda: bool) -> bool:
    """Whether FP8 projections fold their norm and residual in, for the fp8_fold setting `chosen`: "on" where
    the FP8 kernel runs (CUDA; the Triton interpreter in kernel tests), "auto" on CUDA, "off" never."""
    return chosen != "off" and kernel_runs and (chosen == "on" or on_cuda)


def _fp8_folds(x: torch.Tensor) -> bool:
    return fp8_folds(current().fp8_fold, skinny_kernel_runs(x), x.device.type == "cuda")


def _normed_fp8(x, norm_weight, eps, weight: Fp8Weight, bias=None):
    """The projection of HF's Llama RMSNorm of x by an FP8 weight, the norm folded into the FP8 kernel."""
    return fp8_norm_matmul(x, norm_weight, eps, weight.weight, weight.scale, weight.block, bias)


def _merged_projections(x, norm_weight, eps, weights, biases):
    fp8 = isinstance(weights[0], Fp8Weight)
    if fp8 and _fp8_folds(x):
        return tuple(_normed_fp8(x, norm_weight, eps, w, b) for w, b in zip(weights, biases))
    if not fp8 and _skinny(x, "proj", tuple(int(w.shape[0]) for w in weights)):
        return skinny_matmul.norm_projections(x, norm_weight, eps, "llama", weights, biases)
    xn = skinny_matmul.reference_rms_norm(x, norm_weight, eps, "llama")
    return tuple(_project(xn, w, b) for w, b in zip(weights, biases))


def _merged_linear_residual(x, weight, bias, residual):
    if isinstance(weight, Fp8Weight):
        if _fp8_folds(x):
            return fp8_matmul_residual(x, weight.weight, weight.scale, weight.block, bias, residual)
    elif _skinny(x, "residual", (int(weight.shape[0]),)):
        return skinny_matmul.linear_residual(x, weight, bias, residual)
    return residual + _project(x, weight, bias)


# At batch 1, where the skinny kernels do not run, the projections are inductor's GEMVs (gemv_lowering).
# Gate and up as two GEMVs over the halves of the one weight become one kernel with silu(gate) * up in its
# epilogue; the split output of one GEMV needs a pointwise kernel after it (H200: Qwen -44 us, the 8B -226 us).


def _merged_gate_up(x, norm_weight, eps, w_gate_up, w_up):
    """w_up None: both halves are in w_gate_up (merge_projections); else the two weights, kept apart."""
    if isinstance(w_gate_up, Fp8Weight):  # one FP8 call over both halves, or one for each weight
        folds = _fp8_folds(x)
        if folds and w_up is None:
            return fp8_norm_gate_up(x, norm_weight, eps, w_gate_up.weight, w_gate_up.scale, w_gate_up.block)
        if folds:
            project = lambda w: _normed_fp8(x, norm_weight, eps, w)  # noqa: E731
        else:
            xn = skinny_matmul.reference_rms_norm(x, norm_weight, eps, "llama")
            project = lambda w: _project(xn, w)  # noqa: E731
        if w_up is None:
            gate, up = project(w_gate_up).chunk(2, dim=-1)
        else:
            gate, up = project(w_gate_up), project(w_up)
        return torch.nn.functional.silu(gate) * up
    gate_half, up_half = w_gate_up.chunk(2) if w_up is None else (w_gate_up, w_up)
    if _skinny(x, "gate_up", (int(gate_half.shape[0]),)):
        return skinny_matmul.norm_gate_up(x, norm_weight, eps, "llama", gate_half, up_half, "silu")
    xn = skinny_matmul.reference_rms_norm(x, norm_weight, eps, "llama")
    if xn.shape[0] == 1 or w_up is not None:
        gate, up = torch.nn.functional.linear(xn, gate_half), torch.nn.functional.linear(xn, up_half)
    else:
        gate, up = torch.nn.functional.linear(xn, w_gate_up).chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up


MERGED_OPS = LayerOps("merged", _merged_projections, _merged_linear_residual, _merged_gate_up, merged=True, fp8=True)


def _concatenated(modules, name: str) -> torch.Tensor | None:
    tensors = [getattr(m, name) for m in modules]
    if any(t is None for t in tensors):
        return None
    merged = torch.cat([t.detach() for t in tensors])
    at = 0
    for module, tensor in zip(modules, tensors):
        view = merged[at : at + tensor.shape[0]]
        at += tensor.shape[0]
        setattr(module, name, torch.nn.Parameter(view, requires_grad=tensor.requires_grad))
    return merged


def _kept(merged: torch.Tensor | None, modules, name: str) -> bool:
    """Whether each module's `name` is still the rows of `merged` it was made into. `.to()`, `.half()` or a
    new Parameter give a module a tensor of its own, and the concatenation would then read stale numbers."""
    tensors = [getattr(m, name, None) for m in modules]
    if merged is None:
        return any(t is None for t in tensors)  # what _concatenated leaves unmerged
    at = 0
    for tensor in tensors:
        if tensor is None or tensor.dtype != merged.dtype or tensor.device != merged.device:
            return False
        if tensor.data_ptr() != merged.data_ptr() + at * merged.stride(0) * merged.element_size():
            return False
        at += tensor.shape[0]
    return at == merged.shape[0]


def mergeable(sizes: tuple[int, ...], block: int | None) -> bool:
    """Whether projections of output sizes `sizes` can be one matrix: plain weights or per-channel scales
    (`block` None) always, block scales where no block row spans two parts (each N but the last a multiple
    of the block)."""
    return block is None or all(size % block == 0 for size in sizes[:-1])


def _mergeable(modules) -> bool:
    return mergeable(tuple(m.out_features for m in modules), getattr(modules[0], "block", None))


def _merge(owner: torch.nn.Module, modules, buffers: dict[str, str]) -> None:
    """Each module attribute of `buffers` (attribute -> buffer name) concatenated as `owner`'s non-persistent
    buffer, unless intact already; None buffers where `modules` are not `_mergeable` (the ops then get each
    module's own weight). Scales are FP8 layers' alone: a plain layer's scale buffer is None."""
    merge = _mergeable(modules)
    if merge and all(_kept(getattr(owner, buffer, None), modules, name) for name, buffer in buffers.items()):
        return
    for name, buffer in buffers.items():
        has = all(hasattr(m, name) for m in modules)
        owner.register_buffer(buffer, _concatenated(modules, name) if merge and has else None, persistent=False)


def merge_projections(layer: torch.nn.Module) -> None:
    """Concatenate q/k/v's weights (and biases; FP8 layers' scales too) and gate/up's, as non-persistent
    buffers of the attention and MLP modules; each projection's weight becomes a view of its rows. Idempotent:
    merged again only where a module's weight is no longer its view (after `.to(...)`, say)."""
    attention, mlp = layer.self_attn, layer.mlp
    _merge(
        attention,
        (attention.q_proj, attention.k_proj, attention.v_proj),
        {"weight": MERGED_QKV, "bias": MERGED_QKV_BIAS, "scale": MERGED_QKV_SCALE},
    )
    _merge(mlp, (mlp.gate_proj, mlp.up_proj), {"weight": MERGED_GATE_UP, "scale": MERGED_GATE_UP_SCALE})


def _merged_weight(owner: torch.nn.Module, weight: str, scale: str, first: torch.nn.Module):
    """The concatenation merge_projections made of a group whose first module is `first` (an Fp8Weight for
    FP8 layers), or None where it made none."""
    merged = getattr(owner, weight, None)
    if merged is None or not isinstance(first, Fp8Linear):
        return merged
    return Fp8Weight(merged, getattr(owner, scale), first.block)


def kept_apart(layer: torch.nn.Module) -> list[str]:
    """The groups ("q/k/v", "gate/up") of `layer` that merge_projections left as separate projections (FP8
    block scales whose block rows would span two parts), for notes."""
    attention, mlp = layer.self_attn, layer.mlp
    groups = {"q/k/v": (attention, MERGED_QKV), "gate/up": (mlp, MERGED_GATE_UP)}
    return [name for name, (owner, buffer) in groups.items() if getattr(owner, buffer, None) is None]


def _projection_kind(module) -> str | tuple[str, int | None] | None:
    """A projection's kind: "linear" for a plain nn.Linear over floating-point weights, ("fp8", block) for an
    Fp8Linear over e4m3 weights, else None: this forward calls F.linear or fp8_matmul on the weight itself,
    so a subclass with its own forward (a quantized one: bitsandbytes' Linear4bit packs its weight) is not."""
    if type(module) is torch.nn.Linear and module.weight.dtype.is_floating_point:
        return "linear"
    if type(module) is Fp8Linear and module.weight.dtype == E4M3:
        return ("fp8", module.block)
    return None


def _projections_taken(attention, mlp, fp8: bool) -> bool:
    """q/k/v/o and gate/up/down all plain Linear layers, or (`fp8`) all FP8 layers of one scheme; no bias on
    gate or up."""
    projections = [getattr(attention, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")]
    projections += [getattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj")]
    kinds = {_projection_kind(p) for p in projections}
    if len(kinds) != 1 or None in kinds or (kinds != {"linear"} and not fp8):
        return False
    return mlp.gate_proj.bias is None and mlp.up_proj.bias is None


def program_for(layer: torch.nn.Module, fp8: bool = True) -> bool:
    """Whether `layer` is exactly the sequence this module writes out (else HF's forward runs); `fp8`: whether
    layers of FP8 projections are taken (the ops in use take them, LayerOps.fp8)."""
    if type(layer).__name__ not in LLAMA_FAMILY:
        return False
    if {name for name, _ in layer.named_children()} != _LAYER_CHILDREN:
        return False
    attention, mlp = layer.self_attn, layer.mlp
    if {name for name, _ in attention.named_children()} != _ATTENTION_CHILDREN:
        return False  # q_norm/k_norm (Qwen3) or anything else this forward would skip
    if {name for name, _ in mlp.named_children()} != _MLP_CHILDREN:
        return False
    if not _projections_taken(attention, mlp, fp8):
        return False
    called = (attention.o_proj, mlp.down_proj)  # run as modules when hooked (_output_projection)
    if any(has_call_hooks(m) for m in layer.modules() if m not in called):
        return False  # this forward calls no other module, so a hook there would not run
    if not isinstance(mlp.act_fn, torch.nn.SiLU) and type(mlp.act_fn).__name__ != "SiLUActivation":
        return False
    norms = (layer.input_layernorm, layer.post_attention_layernorm)
    if any(not hasattr(n, "variance_epsilon") or "Gemma" in type(n).__name__ for n in norms):
        return False
    if getattr(attention, "sliding_window", None) is not None:
        return False  # a window narrower than the cache masks slots this forward would attend
    if getattr(layer.self_attn.config, "sliding_window", None) is not None and getattr(
        layer.self_attn.config, "use_sliding_window", True
    ):
        return False
    return inspect.signature(type(layer).forward).return_annotation in (torch.Tensor, "torch.Tensor")


def _output_projection(module, x, residual, ops: LayerOps):
    """residual + module(x). A hooked module is called, so that its hooks run: under --tp, o_proj and
    down_proj hold a slice of their input dimension and a forward hook sums the ranks' parts
    (distributed/sharding.py); else the op that folds the residual add in."""
    if has_call_hooks(module):
        return residual + module(x)
    return ops.linear_residual(x, _weight(module), module.bias, residual)


def _projected_rotated_written(layer, x, batch, tokens, cos, sin, cache, ops: LayerOps, advance: bool):
    """q [b, Hq, t, d] after its rotary embedding, and the cache's keys and values with the step's k (after
    its rotary embedding) and v written in: norm, q/k/v projections, rotary and cache write as HF's layer."""
    attention, first = layer.self_attn, layer.input_layernorm
    merged = _merged_weight(attention, MERGED_QKV, MERGED_QKV_SCALE, attention.q_proj) if ops.merged else None
    if merged is not None:  # one projection over the concatenated weights, split after
        weights, biases = (merged,), (getattr(attention, MERGED_QKV_BIAS),)
    else:
        weights = tuple(_weight(p) for p in (attention.q_proj, attention.k_proj, attention.v_proj))
        biases = (attention.q_proj.bias, attention.k_proj.bias, attention.v_proj.bias)
    projected = ops.norm_projections(x, first.weight, first.variance_epsilon, weights, biases)
    if merged is not None:
        sizes = (attention.q_proj.out_features, attention.k_proj.out_features, attention.v_proj.out_features)
        projected = projected[0].split(sizes, dim=-1)
    q, k, v = projected
    head_dim = attention.head_dim
    q = q.view(batch, tokens, -1, head_dim).transpose(1, 2)
    k = k.view(batch, tokens, -1, head_dim).transpose(1, 2)
    v = v.view(batch, tokens, -1, head_dim).transpose(1, 2)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    q, k = skinny_matmul.apply_rotary(q, cos, sin), skinny_matmul.apply_rotary(k, cos, sin)
    k, v = cache.update(k, v, 0) if advance else static_layer_write(cache.layers[0], k, v)
    return q, k, v


def decode_layer(layer, hidden_states, attention_mask, position_embeddings, cache, ops: LayerOps, advance=True):
    """One decoder layer for one new token per row, over its one-layer cache (the layer is layer 0).
    advance=False (a plain static layer only): K/V written at the cache's position, which the caller
    advances after the step (fused.layers: every layer's in one kernel, not one small kernel per layer)."""
    attention, mlp = layer.self_attn, layer.mlp
    batch, tokens, hidden = hidden_states.shape
    x = hidden_states.reshape(batch * tokens, hidden)
    cos, sin = position_embeddings
    q, k, v = _projected_rotated_written(layer, x, batch, tokens, cos, sin, cache, ops, advance)
    out, _ = grouped_decode_attention(attention, q, k, v, attention_mask, scaling=attention.scaling)
    h = _output_projection(attention.o_proj, out.reshape(batch * tokens, -1), x, ops)
    second = layer.post_attention_layernorm
    merged = _merged_weight(mlp, MERGED_GATE_UP, MERGED_GATE_UP_SCALE, mlp.gate_proj) if ops.merged else None
    w_gate, w_up = (merged, None) if merged is not None else (_weight(mlp.gate_proj), _weight(mlp.up_proj))
    gated = ops.norm_gate_up(h, second.weight, second.variance_epsilon, w_gate, w_up)
    out = _output_projection(mlp.down_proj, gated, h, ops)
    return out.view(batch, tokens, hidden)
