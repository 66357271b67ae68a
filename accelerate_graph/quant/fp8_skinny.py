"""Launches of the FP8-weight skinny matmul (fp8_kernels) and the configs they run with.

Configs are fused/kernels/configs.SkinnyConfig values: a table per GPU (`fp8-<GPU>.json`, the user's under
configs.user_tables_dir() over a shipped one in quant/tables/), keyed by configs.table_key with op
"fp8_channel" or "fp8_block" (with "_gate_up" for the folded gate/up), the row bucket, N and K; shapes a table
lacks get `default_config`. Two tables are shipped: the H100's (Llama-3.1-8B's and Llama-3.2-1B's shapes at 1,
8 and 32 rows) and the H200's (the 8B's); `cugraph-accel tune MODEL --weights fp8` writes the user's.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import Tensor

from accelerate_graph.fused.kernels import configs, pdl, skinny_matmul
from accelerate_graph.fused.kernels.configs import SkinnyConfig

try:
    from accelerate_graph.quant import fp8_kernels
except ImportError:  # no triton: fp8_matmul runs its other paths
    fp8_kernels = None

SHIPPED_DIR = Path(__file__).with_name("tables")
TABLE_PREFIX = "fp8-"
FMA_TILE_BYTES = 2048  # the default K tile at 1-2 rows: one e4m3 weight row's 2 KB
FMA_PROGRAMS_PER_SM = 4  # the default's least programs a multiprocessor at 1-2 rows (bytes in flight)

_TABLES: dict[str, tuple[dict[str, SkinnyConfig], configs.TableInUse]] = {}  # device name -> entries, which table
_NAMES: dict[int, str] = {}  # CUDA device index -> name
_COMPILE_ONLY = contextvars.ContextVar("fp8_compile_only", default=False)


# The Triton interpreter runs the kernel on the CPU only where a kernel test asks (a model on the CPU runs the
# reference, the definition). Its tl.dot multiplies bf16 operands' bits as integers (numpy has no bf16; it keeps
# them as uint16): its tests run the tensor-core path on fp16 and fp32 x, the GPU tests on bf16.
interpret_on_cpu = False


@contextlib.contextmanager
def compiling_only() -> Iterator[None]:
    """Inside, `launch` compiles its kernels into Triton's cache and runs none (tune's compile workers; outputs
    are left unwritten, and a norm apart is not applied)."""
    token = _COMPILE_ONLY.set(True)
    try:
        yield
    finally:
        _COMPILE_ONLY.reset(token)


def _start(kernel, grid: tuple, *args, **kwargs) -> None:
    """kernel[grid](*args, **kwargs), or only its compile inside compiling_only()."""
    if _COMPILE_ONLY.get():
        kernel.warmup(*args, grid=grid, **kwargs)
    else:
        kernel[grid](*args, **kwargs)


def runs_triton(x: Tensor) -> bool:
    """Whether the kernel can run for `x`: a CUDA tensor, or a CPU one under the Triton interpreter when a kernel
    test set `interpret_on_cpu`."""
    if fp8_kernels is None:
        return False
    return x.device.type == "cuda" or (interpret_on_cpu and fp8_kernels.INTERPRETED and x.device.type == "cpu")


def table_file_name(device_name: str) -> str:
    """`fp8-<device>.json`, the device named as configs names the skinny tables."""
    return TABLE_PREFIX + configs.table_file_name(device_name).removeprefix(configs.TABLE_PREFIX)


def user_table_path(device_name: str) -> Path:
    """Where `cugraph-accel tune --weights fp8` writes `device_name`'s table (beside the skinny kernels' ones)."""
    return configs.user_tables_dir() / table_file_name(device_name)


def shipped_table_path(device_name: str) -> Path:
    return SHIPPED_DIR / table_file_name(device_name)


def _tables(device_name: str) -> tuple[dict[str, SkinnyConfig], configs.TableInUse]:
    if device_name not in _TABLES:
        _TABLES[device_name] = configs.read_tables(
            device_name, user_table_path(device_name), shipped_table_path(device_name)
        )
    return _TABLES[device_name]


def _entries(device_name: str) -> dict[str, SkinnyConfig]:
    return _tables(device_name)[0]


def table_holds(device_name: str, key: str) -> bool:
    """Whether `device_name`'s FP8 tables (the user's over the shipped one) have a config for `key` (table_key's)."""
    return key in _entries(device_name)


def table_in_use(device_name: str) -> configs.TableInUse:
    """Which FP8 table serves `device_name` (the bench header's line): the user's (over the shipped one, if any),
    the shipped one, or none (the default configs)."""
    return _tables(device_name)[1]


def forget_tables() -> None:
    """Read the tables again at the next launch (after a new one was written)."""
    _TABLES.clear()


def device_name(device: torch.device) -> str:
    """The name of the GPU whose FP8 table serves `device` ("" off CUDA: the default configs)."""
    if device.type != "cuda":
        return ""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _NAMES:
        _NAMES[index] = torch.cuda.get_device_name(index)
    return _NAMES[index]


def table_op(block: int | None, gate_up: bool = False) -> str:
    """The op a table keys a call under; the folded gate/up reads two weight rows an output: its own op."""
    return ("fp8_channel" if block is None else "fp8_block") + ("_gate_up" if gate_up else "")


def default_config(m: int, n: int, k: int, sms: int = configs.DEFAULT_SMS) -> SkinnyConfig:
    """Unmeasured starting point. Up to 2 rows, float32 multiply-and-sum over narrow tiles: each program
    streams 1-4 weight rows in K tiles of up to 2 KB, and blocks of N stay small enough that every
    multiprocessor gets FMA_PROGRAMS_PER_SM programs: a loop Triton does not pipeline keeps only its one tile in
    flight, so enough bytes are in flight only with many programs (16 rows of 256 bytes, 128 programs for N
    2,048, kept ~0.5 MB in flight: the 1B's FP8 step ran at 3.4x its floor, H200). The bf16 table's one-row
    winners look the same (1-8 outputs over K tiles of 1-4 KB). Above 2 rows, tensor cores (pipelined copies,
    not swapped: swapped, they compile to 8 bytes, not 16, for sm_90); split-K where fewer than half of the
    multiprocessors would have a program and K is long."""
    dot = m > 2
    if not dot:
        rows = SkinnyConfig(1, 256).block_m(m)
        block_k = min(FMA_TILE_BYTES, max(256, 1 << (k - 1).bit_length()))
        block_n = 1
        for candidate in (4, 2):  # at most 64 float32 products a thread (4 warps) live in registers
            if rows * candidate * block_k <= 8192 and -(-n // candidate) >= FMA_PROGRAMS_PER_SM * sms:
                block_n = candidate
                break
        return SkinnyConfig(block_n, block_k, num_warps=4, num_stages=2, split_k=1)
    rows = SkinnyConfig(16, 128, dot=True).block_m(m)
    m_blocks = -(-m // rows)
    programs = -(-n // 64) * m_blocks
    split = 1
    if 2 * programs <= sms and k >= 2048:
        split = max(1, min(-(-sms // programs), k // 1024))
    return SkinnyConfig(64, 128, num_warps=4, num_stages=4, split_k=split, dot=True)


def table_key(block: int | None, m: int, n: int, k: int, gate_up: bool = False) -> str:
    """The key of a call of `m` rows, N `n` (outputs), K `k` in an FP8 table (its row bucket's)."""
    return configs.table_key(table_op(block, gate_up), configs.m_bucket(m), (n,), k)


def config_named(
    device_name: str,
    m: int,
    n: int,
    k: int,
    block: int | None,
    sms: int = configs.DEFAULT_SMS,
    gate_up: bool = False,
) -> SkinnyConfig:
    """The config of the table of the GPU named `device_name` ("": none) for this shape, else default_config."""
    found = _entries(device_name).get(table_key(block, m, n, k, gate_up)) if device_name else None
    return found if found is not None else default_config(m, n, k, sms)


def config_for(m: int, n: int, k: int, block: int | None, device: torch.device, gate_up: bool = False) -> SkinnyConfig:
    """The table's config for this shape on `device`'s GPU, else default_config."""
    return config_named(device_name(device), m, n, k, block, configs.multiprocessors(device), gate_up)


def fitted(cfg: SkinnyConfig, block: int | None) -> SkinnyConfig:
    """`cfg` with its tiles inside one scale block: BLOCK_N divides the block (a program's rows share their
    scales) and, with tensor cores, BLOCK_K too (a tile's product is scaled once)."""
    if block is None:
        return cfg
    largest = block & -block  # the largest power of two that divides the block
    block_n = min(cfg.block_n, largest)
    block_k = min(cfg.block_k, largest) if cfg.dot else cfg.block_k
    return dataclasses.replace(cfg, block_n=block_n, block_k=block_k)


def staged(cfg: SkinnyConfig, block_m: int, k: int, k_per_split: int) -> bool:
    """Whether `cfg` runs the one-row K walk pipelined through shared memory: asked for (`staged`), one row
    without tensor cores or lookahead, every K slice whole tiles of 32-bit words (else the plain walk)."""
    plain_row = cfg.staged and not cfg.dot and not cfg.lookahead and block_m == 1
    return plain_row and k % cfg.block_k == 0 and k_per_split % cfg.block_k == 0 and cfg.block_k % 4 == 0


def row_norm_loads(k: int, block_m: int, cfg: SkinnyConfig, e4m3: bool, normed: bool) -> tuple[int, int]:
    """(RSTD_CHUNK, RSTD_CHUNKS): the row norms' loads, (1, 0) without a norm (else they would compile variants
    that differ in nothing). e4m3 tiles: chunks as wide as the x tile at most; a wider chunk's register layout
    reached the loop's x tiles, each value held by two threads (sm_90 SASS, 16 rows, K tile 128: 717 -> 467
    instructions a tile)."""
    if not normed:
        return 1, 0
    chunk, loads = skinny_matmul.rstd_chunks(k, block_m)
    if e4m3 and chunk > cfg.block_k:
        return cfg.block_k, skinny_matmul.cdiv(k, cfg.block_k)
    return chunk, loads


def x_terms(x2: Tensor, norm_weight: Tensor | None, eps: float, cfg: SkinnyConfig, extra: dict):
    """fp8_x_terms_kernel's x terms ([M, 2, K] e4m3) and their scales ([M, K tiles] float32) for the product
    with `cfg` (x_apart): x2's rows through the norm where `norm_weight`, split by K tiles of cfg.block_k."""
    m, k = x2.shape
    block_m = cfg.block_m(m)  # the product's rows a program, whose row norms' loads these are
    k_tiles = skinny_matmul.cdiv(k, cfg.block_k)
    terms = torch.empty((m, 2, k), dtype=torch.float8_e4m3fn, device=x2.device)
    scales = torch.empty((m, k_tiles), dtype=torch.float32, device=x2.device)
    rstd_chunk, rstd_loads = row_norm_loads(k, block_m, cfg, True, norm_weight is not None)
    _start(
        fp8_kernels.fp8_x_terms_kernel, (k_tiles, skinny_matmul.cdiv(m, block_m)),
        x2, norm_weight.contiguous() if norm_weight is not None else x2, float(eps), terms, scales, m, k,
        NORM=1 if norm_weight is not None else 0, OUT_BF16=True, USE_PDL=bool(extra), BLOCK_M=block_m,
        BLOCK_K=cfg.block_k, RSTD_CHUNK=rstd_chunk, RSTD_CHUNKS=rstd_loads, num_warps=4, **extra,
    )  # fmt: skip
    return terms, scales


def launch(
    x: Tensor, weight: Tensor, scale: Tensor, block: int | None, bias: Tensor | None, cfg=None, *,
    norm_weight: Tensor | None = None, eps: float = 0.0, residual: Tensor | None = None, gate_up: bool = False,
) -> Tensor:  # fmt: skip
    """out = x @ (weight * scale)^T + bias through fp8_skinny_kernel (and fp8_finish_kernel under split-K), with
    `cfg` (default: config_for), shaped like x with N last. `norm_weight`: x's rows through HF's Llama RMSNorm
    (`eps`) first; `residual` (shaped like the output): added after the product's rounding; `gate_up`: the
    weight is gate's rows then up's, out = silu(gate) * up with N half the weight's rows. The caller checked
    the arguments (fp8_matmul)."""
    k = x.shape[-1]
    x2 = x.reshape(-1, k).contiguous()
    m, n = x2.shape[0], weight.shape[0] // (2 if gate_up else 1)
    cfg = fitted(cfg or config_for(m, n, k, block, x.device, gate_up), block)
    e4m3 = cfg.dot and cfg.e4m3_dot and x.dtype == torch.bfloat16
    extra = pdl.launch_options(x.device)
    x_apart = e4m3 and cfg.x_apart
    terms, term_scales = weight, scale  # read only with x_apart: otherwise any tensors of their types
    if x_apart:  # x's terms by their own kernel, the norm with them
        terms, term_scales = x_terms(x2, norm_weight, eps, cfg, extra)
        norm_weight = None
    elif norm_weight is not None and cfg.norm_apart:  # the norm's own kernel, the same rounding as folded
        if not _COMPILE_ONLY.get():  # one kernel for every config: not worth compiling ahead
            x2 = skinny_matmul.rms_norm(x2, norm_weight.contiguous(), eps)
        norm_weight = None
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    block_m = cfg.block_m(m)
    k_per_split, split = skinny_matmul.k_slices(k, cfg)
    n_blocks, m_blocks = skinny_matmul.cdiv(n, cfg.block_n), skinny_matmul.cdiv(m, block_m)
    ws = torch.empty((split, m, 2 * n if gate_up else n), dtype=torch.float32, device=x.device) if split > 1 else out
    if gate_up and (bias is not None or residual is not None):  # the gate/up epilogue: bias on gate alone, no residual
        raise ValueError("a merged gate/up launch takes no bias and no residual")
    # the kernel reads every operand with unit stride along its last dimension
    scale = scale.contiguous()
    bias = bias.contiguous() if bias is not None else None
    norm_weight = norm_weight.contiguous() if norm_weight is not None else None
    res = residual.reshape(m, n).contiguous() if residual is not None else out
    rstd_chunk, rstd_loads = row_norm_loads(k, block_m, cfg, e4m3, norm_weight is not None)
    flags = {
        "HAS_B": bias is not None,
        "HAS_RES": residual is not None,
        "GATE_UP": gate_up,
        "SPLIT": split,
        "OUT_BF16": x.dtype == torch.bfloat16,
        "BLOCK_M": block_m,
        "BLOCK_N": cfg.block_n,
        "USE_PDL": bool(extra),
    }
    b_arg = bias if bias is not None else out
    _start(
        fp8_kernels.fp8_skinny_kernel, (n_blocks, m_blocks, split),
        x2, norm_weight if norm_weight is not None else x2, float(eps), terms, term_scales, weight, scale, b_arg, res,
        out, ws, m, n, k, k_per_split, block or 1, scale.shape[-1] if block else 0,
        NORM=1 if norm_weight is not None else 0, BLOCKWISE=block is not None, USE_DOT=cfg.dot,
        IEEE_DOT=x.dtype == torch.float32, SWAP=cfg.dot and cfg.swap, EVEN_K=k % cfg.block_k == 0,
        E4M3_DOT=e4m3, PAIR_DOT=gate_up and cfg.dot and cfg.pair and not e4m3,
        BLOCK_K=cfg.block_k, RSTD_CHUNK=rstd_chunk, RSTD_CHUNKS=rstd_loads,
        LOOKAHEAD=cfg.lookahead and not cfg.dot and block_m == 1,
        ROW_STAGES=cfg.num_stages if staged(cfg, block_m, k, k_per_split) else 1, X_APART=x_apart,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        **flags, **extra,
    )  # fmt: skip
    if split > 1:
        grid = (n_blocks, m_blocks, 1)
        _start(fp8_kernels.fp8_finish_kernel, grid, ws, b_arg, res, out, m, n, num_warps=4, **flags, **extra)
    return out.reshape(*x.shape[:-1], n)
