"""Skinny matmuls of the decode step as custom ops: out[M, N] = x[M, K] @ W[N, K]^T with M the batch
bucket, each weight read once per call, float32 accumulation, and the neighbours folded in.

- `norm_projections(x, norm_weight, eps, norm_kind, weights, biases)`: RMSNorm then 1-3 projections
  (q, k, v) in one launch, no concatenated copy of the weights.
- `linear_residual(x, weight, bias, residual)`: residual + x @ W^T (o_proj, down_proj).
- `norm_gate_up(x, norm_weight, eps, norm_kind, w_gate, w_up, activation)`: act(xn @ Wg^T) * (xn @ Wu^T).
- `rms_norm(x, norm_weight, eps, norm_kind)`: the RMSNorm alone (the step's final norm).

Each rounds like eager HF in the input dtype (see the `reference_*` functions, which are the definition).
They are `torch.ops.cugraph_accel.*` (torch.library.triton_op): inductor sees through them and a CUDA
graph records their launches; under PDL (fused/kernels/pdl.py) their opaque twins `*_pdl` run instead. Off CUDA, or
without triton, the op body runs its reference instead (and CPU tensors run the kernels when the Triton
interpreter was on at import: the tests).
"""

# no `from __future__ import annotations`: torch.library infers the op schemas from the annotations
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from accelerate_graph.fused.kernels import configs, pdl

try:
    from accelerate_graph.fused.kernels import arrival, skinny_kernels
except ImportError:  # no triton: the references run everywhere
    arrival = skinny_kernels = None

# Under PDL (fused/kernels/pdl.py) each kernel asks L2 for its first block of weights before it waits
# for the kernel before it. Inductor's launches of a triton_op's kernels do not pass `launch_pdl`, so
# under PDL the public functions below call the opaque twins of the ops (`*_pdl`): inductor calls those,
# and they launch the kernels themselves, at run time (inside our graph capture).

# Split-K's second pass (the partials added, then the epilogue) where a config splits K: above this many rows
# the last slice of each block to finish runs it (arrival.py); at fewer, finish_kernel (with PDL where active).
FINISH_HERE_ABOVE_ROWS = 16

NORM_KINDS = {"llama": 1, "gemma": 2}
ACTIVATIONS = {"silu": 0, "gelu_tanh": 1}
_MODES = {"proj": 0, "residual": 1, "gate_up": 2}


# ---------------------------------------------------------------- references (the rounding contract)


def reference_rms_norm(x: Tensor, norm_weight: Optional[Tensor], eps: float, norm_kind: str) -> Tensor:
    """HF's RMSNorm: Llama/Qwen2 round x * rsqrt(mean(x^2) + eps) to x's dtype then multiply by the
    weight in that dtype; Gemma multiplies by (1 + w) in float32 and rounds once."""
    if norm_weight is None:
        return x
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    if norm_kind == "gemma":
        return (normed * (1.0 + norm_weight.float())).to(x.dtype)
    return (normed.to(x.dtype).float() * norm_weight.float()).to(x.dtype)


def _matmul32(x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    """x @ W^T (+ bias) in float32, not rounded."""
    out = x.float() @ weight.float().T
    return out if bias is None else out + bias.float()


def reference_norm_projections(x, norm_weight, eps, norm_kind, weights, biases) -> tuple[Tensor, ...]:
    xn = reference_rms_norm(x, norm_weight, eps, norm_kind)
    biases = biases if biases is not None else [None] * len(weights)
    return tuple(_matmul32(xn, w, b).to(x.dtype) for w, b in zip(weights, biases))


def reference_linear_residual(x, weight, bias, residual) -> Tensor:
    return (_matmul32(x, weight, bias).to(x.dtype).float() + residual.float()).to(x.dtype)


def _activation32(gate32: Tensor, activation: str) -> Tensor:
    return F.silu(gate32) if activation == "silu" else F.gelu(gate32, approximate="tanh")


def reference_norm_gate_up(x, norm_weight, eps, norm_kind, w_gate, w_up, activation) -> Tensor:
    xn = reference_rms_norm(x, norm_weight, eps, norm_kind)
    gate = _matmul32(xn, w_gate, None).to(x.dtype)
    up = _matmul32(xn, w_up, None).to(x.dtype)
    act = _activation32(gate.float(), activation).to(x.dtype)
    return (act.float() * up.float()).to(x.dtype)


# ---------------------------------------------------------------- launches


def runs_triton(x: Tensor) -> bool:
    """Whether the ops run their Triton kernels for `x` (else their references)."""
    if skinny_kernels is None:
        return False
    return x.device.type == "cuda" or (skinny_kernels.INTERPRETED and x.device.type == "cpu")


WEIGHT_ELEMENTS_LIMIT = 2**31  # the kernels' offsets are 32-bit: a weight must hold fewer elements


def _check(x: Tensor, weights, norm_weight, norm_kind: str) -> None:
    """Misuse by a caller in this package (not a user error): say which argument."""
    if norm_kind not in NORM_KINDS:
        raise ValueError(f"norm_kind must be one of {sorted(NORM_KINDS)}, got {norm_kind!r}")
    if norm_weight is not None and norm_weight.dtype != x.dtype and norm_kind == "llama":
        raise ValueError(f"the norm weight is {norm_weight.dtype}, x is {x.dtype}: HF would promote the output")
    for w in weights:
        if w.dim() != 2 or w.shape[1] != x.shape[-1] or w.dtype != x.dtype:
            raise ValueError(
                f"a weight of shape {tuple(w.shape)} / {w.dtype} does not fit x {tuple(x.shape)} / {x.dtype}"
            )
        if w.shape[0] * w.shape[1] >= WEIGHT_ELEMENTS_LIMIT:
            raise ValueError("weights of 2**31 elements or more are not supported (32-bit offsets)")


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def k_slices(k: int, cfg: configs.SkinnyConfig) -> tuple[int, int]:
    """(K per slice, slices) of a launch of `cfg` over `k`: whole K blocks a slice, no empty slice."""
    k_per_split = cdiv(cdiv(k, cfg.split_k), cfg.block_k) * cfg.block_k
    return k_per_split, cdiv(k, k_per_split)


def rstd_chunks(k: int, block_m: int) -> tuple[int, int]:
    """(columns a load, loads) for the row norms: the rows in one load up to 4,096 values a program (a float32
    register tile of at most 32 values a thread at 4 warps), in a few unrolled loads otherwise, all issued
    before the first sum waits for one (not one L2 round trip per K block before the first weight load)."""
    chunk = min(1 << max(0, (k - 1).bit_length()), max(64, 4096 // block_m))
    return chunk, cdiv(k, chunk)


def launch_config(op: str, m, ns: tuple[int, ...], k: int, device: torch.device) -> configs.SkinnyConfig:
    """The config `launch` runs for `op` at `m` rows by default (the table's or the heuristic's for the
    device's multiprocessors); gate and up share one N in the table's key."""
    return configs.config_for(op, m, ns[:1] if op == "gate_up" else ns, k, configs.multiprocessors(device))


def _traced(tensor) -> bool:
    """Whether a launch with `tensor` among its arguments is being traced (dynamo, or make_fx's fake and
    functional tensors when inductor lowers our triton_ops), not run."""
    return type(tensor) is not torch.Tensor or torch.compiler.is_compiling()


def _launcher(kernel, grid, traced: bool):
    """`kernel[grid]`, through torch.library.wrap_triton while `traced` (so that the trace records the
    launch) and only then: through the wrapper a real launch costs seconds of setup (docs/PERF.md)."""
    return (torch.library.wrap_triton(kernel) if traced else kernel)[grid]


def launch(op, x, norm_weight, eps, norm_kind, weights, biases, residual=None, activation="silu", cfg=None):
    """The ops' body on the Triton path: runs skinny_kernel (and finish_kernel under split-K) for `op`
    ("proj", "residual", "gate_up") with `cfg` (default: the table's or the heuristic's, see configs);
    returns the outputs, shaped like x with each weight's N last (one for "residual" and "gate_up").
    `cugraph-accel tune` calls it with the configs it times."""
    k = x.shape[-1]
    x2 = x.reshape(-1, k).contiguous()
    m = x2.shape[0]
    ns = tuple(int(w.shape[0]) for w in weights)
    gate_up = op == "gate_up"
    out_ns = ns[:1] if op != "proj" else ns
    cfg = cfg or launch_config(op, m, ns, k, x.device)
    outs = [torch.empty((*x.shape[:-1], n), dtype=x.dtype, device=x.device) for n in out_ns]
    block_m = cfg.block_m(m)
    # the row norm's constexprs only with a norm: else they would compile variants that differ in nothing
    rstd_chunk, rstd_loads = rstd_chunks(k, block_m) if norm_weight is not None else (cfg.block_k, 0)
    n_blocks = [cdiv(n, cfg.block_n) for n in out_ns]
    m_blocks = cdiv(m, block_m)
    k_per_split, split = k_slices(k, cfg)
    nt = 2 * ns[0] if gate_up else sum(out_ns)
    ws = torch.empty((split, m, nt), dtype=torch.float32, device=x.device) if split > 1 else x2
    res = residual.reshape(-1, ns[0]).contiguous() if residual is not None else x2
    padded = lambda seq, fill: list(seq) + [fill] * (3 - len(seq))  # noqa: E731 - three slots, unused ones inert
    w_args = padded(weights, weights[0])
    b_list = list(biases) + [None] * (len(weights) - len(biases))
    b_args = padded([b if b is not None else x2 for b in b_list], x2)
    has_b = padded([b is not None for b in b_list], False)
    o_args = padded(outs, outs[0])
    n_args = padded(out_ns if not gate_up else ns, 0)
    flags = {
        "NUM_W": len(weights) if op == "proj" else 1,
        "HAS_B0": has_b[0],
        "HAS_B1": has_b[1],
        "HAS_B2": has_b[2],
        "MODE": _MODES[op],
        "ACT": ACTIVATIONS[activation],
        "SPLIT": split,
        "OUT_BF16": x.dtype == torch.bfloat16,
        "BLOCK_M": block_m,
        "BLOCK_N": cfg.block_n,
    }
    nb1 = n_blocks[1] if len(n_blocks) > 1 else 0
    grid = (sum(n_blocks), m_blocks, split)
    extra = pdl.launch_options(x.device)
    traced = _traced(x2)
    in_last_slice = split > 1 and finishes_in_last_slice(m, not traced)
    counters = _counters_to_finish_here(x2, sum(n_blocks) * m_blocks) if in_last_slice else None
    here = counters is not None
    _launcher(skinny_kernels.skinny_kernel, grid, traced=traced)(
        x2, norm_weight if norm_weight is not None else x2, eps, m, k, k_per_split,
        *w_args, *b_args, *o_args, *n_args, n_blocks[0], nb1, res, ws, counters if here else x2, nt,
        NORM=NORM_KINDS[norm_kind] if norm_weight is not None else 0,
        USE_DOT=cfg.dot, IEEE_DOT=x.dtype == torch.float32, SWAP=cfg.dot and cfg.swap, EVEN_K=k % cfg.block_k == 0,
        USE_PDL=bool(extra), BLOCK_K=cfg.block_k, RSTD_CHUNK=rstd_chunk, RSTD_CHUNKS=rstd_loads,
        LOOKAHEAD=cfg.lookahead and not cfg.dot and block_m == 1, FINISH_HERE=here,
        FENCE=here and not skinny_kernels.INTERPRETED,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **flags, **extra,
    )  # fmt: skip
    if split > 1 and not here:
        _launcher(skinny_kernels.finish_kernel, (sum(n_blocks), m_blocks, 1), traced=traced)(
            ws, m, *b_args, *o_args, *n_args, n_blocks[0], nb1, res, nt, num_warps=4, USE_PDL=bool(extra),
            **flags, **extra,
        )  # fmt: skip
    return outs


def prepare_split_finish(device: torch.device) -> None:
    """Make the arrival counters of `device` now, before any capture (one made inside a capture would not
    be), so that the captured launches above FINISH_HERE_ABOVE_ROWS rows finish split-K in their last slice."""
    if arrival is not None and device.type == "cuda":
        arrival.arrival_counters(device)


def finishes_in_last_slice(rows, launched_now: bool = True) -> bool:
    """Whether a split-K launch of `rows` rows finishes in its last slice (else finish_kernel, with PDL where
    active). A launch inductor traces (not `launched_now`) never does (it would keep the counters in its graph
    as a constant), and its rows may be symbolic: it is not compared with them (no guard)."""
    return launched_now and rows > FINISH_HERE_ABOVE_ROWS


def _counters_to_finish_here(x2: Tensor, blocks: int) -> Optional[Tensor]:
    """The arrival counters a launch of `blocks` output blocks finishes its split-K with, where they exist or
    can be made (arrival_counters); None for more blocks than there are counters."""
    return arrival.arrival_counters(x2.device) if blocks <= arrival.COUNTERS else None


def _rms_norm_body(x: Tensor, norm_weight: Tensor, eps: float, norm_kind: str) -> Tensor:
    if not runs_triton(x):
        return reference_rms_norm(x, norm_weight, eps, norm_kind)
    k = x.shape[-1]
    x2 = x.reshape(-1, k).contiguous()
    out = torch.empty_like(x2)
    block_k, chunks = rstd_chunks(k, 1)  # the row in one block up to 4,096
    extra = pdl.launch_options(x.device)
    _launcher(skinny_kernels.rms_norm_kernel, (x2.shape[0],), traced=_traced(x2))(
        x2, norm_weight, out, float(eps), x2.shape[0], k,
        NORM=NORM_KINDS[norm_kind], OUT_BF16=x.dtype == torch.bfloat16, BLOCK_K=block_k,
        RSTD_CHUNKS=chunks, USE_PDL=bool(extra), num_warps=4, **extra,
    )  # fmt: skip
    return out.reshape(x.shape)


# ---------------------------------------------------------------- the ops


def _norm_projections_body(
    x: Tensor,
    norm_weight: Optional[Tensor],
    eps: float,
    norm_kind: str,
    weights: list[Tensor],
    biases: list[Optional[Tensor]],
) -> list[Tensor]:
    if not runs_triton(x):
        return list(reference_norm_projections(x, norm_weight, eps, norm_kind, weights, biases))
    return launch("proj", x, norm_weight, eps, norm_kind, weights, biases)


def _linear_residual_body(x: Tensor, weight: Tensor, bias: Optional[Tensor], residual: Tensor) -> Tensor:
    if not runs_triton(x):
        return reference_linear_residual(x, weight, bias, residual)
    return launch("residual", x, None, 0.0, "llama", [weight], [bias], residual=residual)[0]


def _norm_gate_up_body(
    x: Tensor,
    norm_weight: Optional[Tensor],
    eps: float,
    norm_kind: str,
    w_gate: Tensor,
    w_up: Tensor,
    activation: str,
) -> Tensor:
    if not runs_triton(x):
        return reference_norm_gate_up(x, norm_weight, eps, norm_kind, w_gate, w_up, activation)
    return launch("gate_up", x, norm_weight, eps, norm_kind, [w_gate, w_up], [None, None], activation=activation)[0]


def _rows_by(x: Tensor, n: int) -> Tensor:
    return x.new_empty((*x.shape[:-1], n))


_BODIES = {  # name: (body, what its outputs look like, for an opaque op's fake)
    "norm_projections": (
        _norm_projections_body,
        lambda x, nw, eps, kind, ws, bs: [_rows_by(x, w.shape[0]) for w in ws],
    ),
    "linear_residual": (_linear_residual_body, lambda x, w, b, residual: _rows_by(x, w.shape[0])),
    "norm_gate_up": (_norm_gate_up_body, lambda x, nw, eps, kind, wg, wu, act: _rows_by(x, wg.shape[0])),
    "rms_norm": (_rms_norm_body, lambda x, nw, eps, kind: torch.empty_like(x)),
}
for _name, (_body, _fake) in _BODIES.items():
    torch.library.triton_op(f"cugraph_accel::{_name}", _body, mutates_args=())  # inductor sees its kernels
    torch.library.custom_op(f"cugraph_accel::{_name}_pdl", _body, mutates_args=()).register_fake(_fake)


def _op(name: str, x: Tensor):
    """The op the public functions call on `x`'s device: the triton_op, or its opaque twin under PDL."""
    return getattr(torch.ops.cugraph_accel, f"{name}_pdl" if pdl.active(x.device) else name)


def norm_projections(
    x: Tensor,
    norm_weight: Optional[Tensor],
    eps: float,
    norm_kind: str,
    weights: list[Tensor],
    biases: Optional[list[Optional[Tensor]]] = None,
) -> tuple[Tensor, ...]:
    """RMSNorm of x's rows (none when norm_weight is None) then each projection: (x_n @ W_i^T + b_i)."""
    if not 1 <= len(weights) <= 3:
        raise ValueError(f"norm_projections takes 1 to 3 weights, got {len(weights)}")
    biases = list(biases) if biases is not None else [None] * len(weights)
    _check(x, weights, norm_weight, norm_kind)
    return tuple(_op("norm_projections", x)(x, norm_weight, eps, norm_kind, list(weights), biases))


def linear_residual(x: Tensor, weight: Tensor, bias: Optional[Tensor], residual: Tensor) -> Tensor:
    """residual + (x @ W^T + bias), the product rounded to x's dtype before the add, as eager does."""
    _check(x, [weight], None, "llama")
    if residual.shape != (*x.shape[:-1], weight.shape[0]) or residual.dtype != x.dtype:
        raise ValueError(f"residual {tuple(residual.shape)} / {residual.dtype} does not fit the output")
    return _op("linear_residual", x)(x, weight, bias, residual)


def rms_norm(x: Tensor, norm_weight: Tensor, eps: float, norm_kind: str = "llama") -> Tensor:
    """HF's RMSNorm of x (reference_rms_norm's rounding) in one Triton launch where the ops run Triton, else
    the reference. An op like the others, not a bare launch: the CPU emulation of graphs records aten and
    registered ops only, and would not replay a kernel launched beside the dispatcher."""
    _check(x, [], norm_weight, norm_kind)
    return _op("rms_norm", x)(x, norm_weight, eps, norm_kind)


def norm_gate_up(
    x: Tensor, norm_weight: Optional[Tensor], eps: float, norm_kind: str, w_gate: Tensor, w_up: Tensor, activation: str
) -> Tensor:
    """act(x_n @ Wg^T) * (x_n @ Wu^T) with activation "silu" or "gelu_tanh"."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    if w_gate.shape != w_up.shape:
        raise ValueError(f"gate {tuple(w_gate.shape)} and up {tuple(w_up.shape)} differ")
    _check(x, [w_gate, w_up], norm_weight, norm_kind)
    return _op("norm_gate_up", x)(x, norm_weight, eps, norm_kind, w_gate, w_up, activation)


# ---------------------------------------------------------------- rotary embedding (layer_program's)


def rotate_half(x: Tensor) -> Tensor:
    """HF's rotate_half: (-x2, x1) of the last dimension's halves."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """HF's rotate-half rotary embedding of x, in x's dtype: each product rounded, then the sum."""
    return (x * cos) + (rotate_half(x) * sin)
