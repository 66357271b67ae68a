"""Compile every Triton kernel variant of fused/kernels for the H200 (sm_90), and the FP8 kernel's launched
tiles for Ada (sm_89), without a GPU; prints one line per failure and exits 1 if any. Run by
test_compiles_for_hopper.py in a process of its own, because the kernels' tests turn the Triton interpreter
on, under which kernels do not compile."""

import inspect
import itertools
import re
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from accelerate_graph.fused.kernels import decode_attention, decode_mask, skinny_kernels
from accelerate_graph.quant import fp8_kernels

HOPPER = GPUTarget("cuda", 90, 32)
ADA = GPUTarget("cuda", 89, 32)  # the other GPUs with FP8 (L4, L40S, RTX 4090)


def compile_for(
    kernel, constexprs: dict, pointers: dict, float_type: str, floats=("eps", "scale", "softcap"), *,
    divisible=(), options=None, target=HOPPER,
):  # fmt: skip
    """`kernel` compiled for `target` (the H200 unless said). `divisible`: arguments marked divisible by 16 as a
    launch specializes aligned pointers and sizes (the pipelined, vectorized code); `options`:
    num_warps/num_stages."""
    missing = [p.name for p in kernel.params if p.is_constexpr and p.name not in constexprs]
    if missing:  # every launch passes them all: a default here would compile a variant none runs
        raise ValueError(f"constexprs not given: {missing}")
    params = list(inspect.signature(kernel.fn).parameters)
    signature = {}
    for name in params:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in pointers:
            signature[name] = pointers[name]
        elif name in floats:
            signature[name] = float_type
        else:
            signature[name] = "i32"
    fixed = {(params.index(name),): value for name, value in constexprs.items()}
    attrs = {(params.index(name),): [["tt.divisibility", 16]] for name in divisible if name in params}
    source = ASTSource(fn=kernel, signature=signature, constexprs=fixed, attrs=attrs)
    return triton.compile(source, target=target, options=options or {})


def _only(kernel, flags: dict) -> dict:
    names = set(inspect.signature(kernel.fn).parameters)
    return {k: v for k, v in flags.items() if k in names}


SKINNY_POINTERS = {
    **{n: "*bf16" for n in ("x_ptr", "nw_ptr", "res_ptr", "w0", "w1", "w2", "b0", "b1", "b2", "o0", "o1", "o2")},
    "out_ptr": "*bf16",
    "ws_ptr": "*fp32",
    "counters_ptr": "*i32",
}
ATTENTION_POINTERS = {
    "Q": "*bf16", "K": "*bf16", "V": "*bf16", "Out": "*bf16",
    "PartAcc": "*fp32", "PartM": "*fp32", "PartL": "*fp32",
}  # fmt: skip


def variants():
    """(description, kernel, constexprs, pointers) for each variant the launches can ask for."""
    # PDL with tensor cores too (the kernels above batch 1, setting skinny_batches)
    # swap: the weights on the MMA's long side, 64 rows (Hopper's warpgroup MMA)
    for mode, kind, split, weights, pdl in itertools.product(
        (0, 1, 2), ("fma", "dot", "swap"), (1, 2), (1, 3), (False, True)
    ):  # fmt: skip
        if mode and weights != 1:
            continue
        dot = kind != "fma"
        flags = dict(
            NORM=0 if mode == 1 else 1, NUM_W=weights, HAS_B0=True, HAS_B1=True, HAS_B2=False, MODE=mode,
            ACT=int(mode == 2), SPLIT=split, USE_DOT=dot, IEEE_DOT=False, SWAP=kind == "swap", EVEN_K=not dot,
            OUT_BF16=True, USE_PDL=pdl, BLOCK_M=16 if dot else 1, BLOCK_N=64 if kind == "swap" else 32, BLOCK_K=128,
            RSTD_CHUNK=256 if dot else 2048, RSTD_CHUNKS=8 if dot else 2,
            LOOKAHEAD=False, FINISH_HERE=False, FENCE=False,
        )  # fmt: skip
        kernels = [skinny_kernels.skinny_kernel] + ([skinny_kernels.finish_kernel] if split > 1 else [])
        for kernel in kernels:
            yield f"{kernel.fn.__name__} {_only(kernel, flags)}", kernel, _only(kernel, flags), SKINNY_POINTERS
        if split > 1:  # split-K finished by each block's last slice (above skinny_matmul.FINISH_HERE_ABOVE_ROWS)
            here = {**flags, "FINISH_HERE": True, "FENCE": True}
            yield f"skinny_kernel {here}", skinny_kernels.skinny_kernel, here, SKINNY_POINTERS
        if not dot:  # one row's next K block loaded before this one is multiplied (SkinnyConfig.lookahead)
            ahead = {**flags, "LOOKAHEAD": True}
            yield f"skinny_kernel {ahead}", skinny_kernels.skinny_kernel, ahead, SKINNY_POINTERS
    # more than one row without tensor cores (skinny_kernels._accumulate_rows): the three modes, split-K or not
    for mode, split in itertools.product((0, 1, 2), (1, 2)):
        flags = dict(
            NORM=0 if mode == 1 else 1, NUM_W=1, HAS_B0=True, HAS_B1=False, HAS_B2=False, MODE=mode,
            ACT=int(mode == 2), SPLIT=split, USE_DOT=False, IEEE_DOT=False, SWAP=False, EVEN_K=True, OUT_BF16=True,
            USE_PDL=True, BLOCK_M=8, BLOCK_N=8, BLOCK_K=64, RSTD_CHUNK=128, RSTD_CHUNKS=7, LOOKAHEAD=False,
            FINISH_HERE=False, FENCE=False,
        )  # fmt: skip
        yield f"skinny_kernel (rows, fma) {flags}", skinny_kernels.skinny_kernel, flags, SKINNY_POINTERS
    # the LM head at batch 1 (fused/lm_head.py): no norm, no bias, the heuristic's tile; K a multiple of the
    # block (the 1B's 2,048) or not (Qwen's 896)
    for pdl, even_k in itertools.product((False, True), (True, False)):
        flags = dict(
            NORM=0, NUM_W=1, HAS_B0=False, HAS_B1=False, HAS_B2=False, MODE=0, ACT=0, SPLIT=1, USE_DOT=False,
            IEEE_DOT=False, SWAP=False, EVEN_K=even_k, OUT_BF16=True, USE_PDL=pdl, BLOCK_M=1, BLOCK_N=32,
            BLOCK_K=256, RSTD_CHUNK=256, RSTD_CHUNKS=0, LOOKAHEAD=False, FINISH_HERE=False, FENCE=False,
        )  # fmt: skip
        yield f"skinny_kernel (LM head) {flags}", skinny_kernels.skinny_kernel, flags, SKINNY_POINTERS
    # the final norm (skinny_matmul.rms_norm): the row in one block (K up to 4,096) or a loop of 4,096-value
    # blocks with the rstd in two loads (8,192), launched early (PDL) or not
    for (block_k, rstd_loads), pdl in itertools.product(((1024, 1), (4096, 2)), (False, True)):
        flags = dict(NORM=1, OUT_BF16=True, BLOCK_K=block_k, RSTD_CHUNKS=rstd_loads, USE_PDL=pdl)
        yield f"rms_norm_kernel {flags}", skinny_kernels.rms_norm_kernel, flags, SKINNY_POINTERS
    block = lambda n: max(16, triton.next_power_of_2(n))  # noqa: E731
    for (mask_kind, direct, softcap), (group, head_dim), pdl in itertools.product(
        [(0, True, False), (1, True, False), (2, False, True), (1, False, False)], [(7, 64), (4, 128)], (False, True)
    ):
        mask = {0: "*bf16", 1: "*i1", 2: "*bf16"}[mask_kind]
        flags = dict(
            GROUP=group, HEAD_DIM=head_dim, BLOCK_G=block(group), BLOCK_D=block(head_dim), BLOCK_L=64,
            MASK_KIND=mask_kind, MASK_PER_HEAD=False, SOFTCAP=softcap, DIRECT=direct, UPCAST=False, IEEE=False,
            USE_PDL=pdl,
        )  # fmt: skip
        kernel = decode_attention._decode_split_kernel
        yield f"decode split {flags}", kernel, flags, {**ATTENTION_POINTERS, "Mask": mask}
        if not direct:
            flags = dict(HEAD_DIM=head_dim, BLOCK_D=block(head_dim), BLOCK_S=4, USE_PDL=pdl)
            yield f"decode combine {flags}", decode_attention._decode_combine_kernel, flags, ATTENTION_POINTERS
    # the bucket in one tile, loaded before the wait (setting attention_preloaded): the 1B's and Qwen's
    # bucket of 256 at a head dim of 64, the 8B's 128 at 128; bool masks only
    for (group, head_dim, block_t, parts), pdl, softcap in itertools.product(
        [(4, 64, 256, 2), (7, 64, 256, 1), (4, 128, 128, 4)], (False, True), (False, True)
    ):
        flags = dict(
            GROUP=group, HEAD_DIM=head_dim, BLOCK_D=head_dim, BLOCK_T=block_t, PARTS=parts, SOFTCAP=softcap,
            UPCAST=False, USE_PDL=pdl,
        )  # fmt: skip
        kernel = decode_attention._decode_preloaded_kernel
        yield f"decode preloaded {flags}", kernel, flags, {**ATTENTION_POINTERS, "Mask": "*i1"}
    # the decode step's attention mask (decode_mask.py): the session's int64 padding mask, or a bool one
    for padding in ("*i64", "*i1", "*fp32"):
        pointers = {"padding_ptr": padding, "position_ptr": "*i64", "out_ptr": "*i1"}
        flags = {"BLOCK": decode_mask.BLOCK}
        yield f"decode mask {padding} {flags}", decode_mask._decode_mask_kernel, flags, pointers
    yield from fp8_variants()
    yield from x_terms_variants()


FP8_POINTERS = {
    "x_ptr": "*bf16", "w_ptr": "*fp8e4nv", "s_ptr": "*fp32", "b_ptr": "*bf16", "out_ptr": "*bf16", "ws_ptr": "*fp32",
    "nw_ptr": "*bf16", "res_ptr": "*bf16", "xt_ptr": "*fp8e4nv", "xs_ptr": "*fp32",
}  # fmt: skip
FP8_HALF_POINTERS = {**FP8_POINTERS, **{name: "*fp16" for name in ("x_ptr", "b_ptr", "out_ptr", "nw_ptr", "res_ptr")}}
FP8_UNFOLDED = dict(
    NORM=0,
    HAS_RES=False,
    GATE_UP=False,
    RSTD_CHUNK=1,
    RSTD_CHUNKS=0,
    E4M3_DOT=False,
    PAIR_DOT=False,
    ROW_STAGES=1,
    X_APART=False,
)
# the folds (setting fp8_fold): the norm with merged gate/up's activation, or the residual
FP8_FOLDS = {
    "norm, gate/up": dict(NORM=1, GATE_UP=True, RSTD_CHUNK=1024, RSTD_CHUNKS=4),
    "residual": dict(HAS_RES=True),
}
# what a launch with aligned tensors and N, K multiples of 16 specializes (the pipelined, 16-byte copies)
FP8_DIVISIBLE = (*FP8_POINTERS, "N", "K", "K_PER_SPLIT")
# kind: (dot, swap, rows, BLOCK_N, BLOCK_K, num_warps, num_stages, row norm loads[, e4m3_dot]) as
# fp8_skinny.default_config and the tune grids launch them; the row norms' loads as skinny_matmul.rstd_chunks
# gives them for K 4,096
FP8_LAUNCHED = {
    "one-row": (False, False, 1, 32, 256, 4, 2, (4096, 1)),
    "rows": (False, False, 2, 32, 128, 4, 2, (2048, 2)),
    "dot": (True, False, 16, 64, 128, 4, 4, (256, 16)),
    "swap": (True, True, 16, 64, 128, 4, 4, (256, 16)),
    "dot, 8 warps": (True, False, 16, 128, 128, 8, 4, (256, 16)),
    "swap, 2 warps": (True, True, 32, 64, 128, 2, 4, (256, 16)),
    "swap, e4m3": (True, True, 32, 128, 128, 8, 4, (128, 32), True),
}


def e4m3_of(tile: tuple) -> bool:
    """Whether an FP8_LAUNCHED tile is of e4m3 tensor cores."""
    return bool(tile[8:] and tile[8])


def fp8_launched(tile: tuple, blockwise: bool, split: int, fold: dict, pdl: bool) -> tuple[dict, dict]:
    """An FP8_LAUNCHED tile's constexprs and its launch (aligned, the tile's warps and stages)."""
    dot, swap, rows, block_n, block_k, warps, stages, (rstd_chunk, rstd_loads), *e4m3 = tile
    flags = dict(
        HAS_B=not fold.get("GATE_UP", False), BLOCKWISE=blockwise, SPLIT=split, USE_DOT=dot, IEEE_DOT=False,
        SWAP=swap, EVEN_K=True, OUT_BF16=True, USE_PDL=pdl, BLOCK_M=rows, BLOCK_N=block_n, BLOCK_K=block_k,
        LOOKAHEAD=rows == 1, **{**FP8_UNFOLDED, **fold, "E4M3_DOT": bool(e4m3)},
    )  # fmt: skip
    if flags["NORM"]:
        flags.update(RSTD_CHUNK=rstd_chunk, RSTD_CHUNKS=rstd_loads)
    return flags, {"divisible": FP8_DIVISIBLE, "options": {"num_warps": warps, "num_stages": stages}}


def fp8_variants():
    """The FP8-weight skinny matmul (quant/fp8_kernels.py): one row, two rows and tensor cores (swapped or not),
    per-channel or block scales, one slice or split-K (then its finish kernel), with and without PDL; each
    tiling with the folds too (block scales, split-K). Then as launches specialize them (aligned, with the
    tile's warps and stages): every fold at one slice and split-K under PDL, fp16 x, the finish kernel."""
    tiles = {"one-row": (False, False, 1, 256), "rows": (False, False, 2, 128), "dot": (True, False, 16, 128)}
    tiles["swap"] = (True, True, 16, 128)
    for (kind, (dot, swap, rows, block_k)), blockwise, split in itertools.product(
        tiles.items(), (False, True), (1, 2)
    ):  # fmt: skip
        flags = dict(
            HAS_B=True, BLOCKWISE=blockwise, SPLIT=split, USE_DOT=dot, IEEE_DOT=False, SWAP=swap,
            EVEN_K=split == 1, OUT_BF16=True, USE_PDL=split == 2, BLOCK_M=rows, BLOCK_N=64 if dot else 32,
            BLOCK_K=block_k, LOOKAHEAD=kind == "one-row" and split == 1, **FP8_UNFOLDED,
        )  # fmt: skip
        yield f"fp8_skinny_kernel ({kind}) {flags}", fp8_kernels.fp8_skinny_kernel, flags, FP8_POINTERS
        if blockwise and split == 2:
            for fold in FP8_FOLDS.values():
                folded = {**flags, **fold, "HAS_B": not fold.get("GATE_UP", False)}
                yield f"fp8_skinny_kernel ({kind}) {folded}", fp8_kernels.fp8_skinny_kernel, folded, FP8_POINTERS
    for pdl, fold in itertools.product((False, True), ({}, FP8_FOLDS["residual"], {"GATE_UP": True})):
        flags = dict(HAS_B=True, SPLIT=3, OUT_BF16=True, USE_PDL=pdl, BLOCK_M=1, BLOCK_N=32, **FP8_UNFOLDED)
        flags = _only(fp8_kernels.fp8_finish_kernel, {**flags, **fold})
        yield f"fp8_finish_kernel {flags}", fp8_kernels.fp8_finish_kernel, flags, FP8_POINTERS
    folds = {
        "none": {},
        "norm": dict(NORM=1),
        "norm, gate/up": dict(NORM=1, GATE_UP=True),
        "residual": {"HAS_RES": True},
    }
    for (kind, tile), blockwise, split, fold in itertools.product(
        FP8_LAUNCHED.items(), (False, True), (1, 2), folds.values()
    ):  # fmt: skip
        flags, launch = fp8_launched(tile, blockwise, split, fold, pdl=True)
        description = f"fp8_skinny_kernel ({kind}, as launched, {launch['options']}) {flags}"
        yield description, fp8_kernels.fp8_skinny_kernel, flags, FP8_POINTERS, launch
        if blockwise and split == 1 and not fold:  # fp16 x: the weights converted to fp16 for the dot
            half = {**flags, "OUT_BF16": False}
            yield f"{description} fp16", fp8_kernels.fp8_skinny_kernel, half, FP8_HALF_POINTERS, launch
        if fold.get("GATE_UP") and tile[0] and not e4m3_of(tile):  # gate's and up's tiles in one walk of K (pair)
            paired = {**flags, "PAIR_DOT": True}
            yield f"{description} pair", fp8_kernels.fp8_skinny_kernel, paired, FP8_POINTERS, launch
        if e4m3_of(tile) and not flags["NORM"]:  # x's terms made apart (x_apart): the loop loads them as copied
            apart = {**flags, "X_APART": True}
            yield f"{description} x apart", fp8_kernels.fp8_skinny_kernel, apart, FP8_POINTERS, launch
        if split == 2 and not blockwise:  # the finish kernel at the tile's rows and columns
            finish = _only(fp8_kernels.fp8_finish_kernel, flags)
            launch = {"divisible": FP8_DIVISIBLE, "options": {"num_warps": 4}}
            yield (
                f"fp8_finish_kernel (as launched) {finish}",
                fp8_kernels.fp8_finish_kernel,
                finish,
                FP8_POINTERS,
                launch,
            )


def x_terms_variants():
    """The kernel that makes x's e4m3 terms apart (x_apart), as fp8_skinny.x_terms launches it: with and without
    the norm, at 16 and 32 rows a program."""
    launch = {"divisible": ("x_ptr", "nw_ptr", "xt_ptr", "xs_ptr", "K"), "options": {"num_warps": 4}}
    for norm, rows in itertools.product((0, 1), (16, 32)):
        flags = dict(NORM=norm, OUT_BF16=True, USE_PDL=True, BLOCK_M=rows, BLOCK_K=128, RSTD_CHUNK=128 if norm else 1,
                     RSTD_CHUNKS=32 if norm else 0)  # fmt: skip
        yield f"fp8_x_terms_kernel {flags}", fp8_kernels.fp8_x_terms_kernel, flags, FP8_POINTERS, launch


def loads_before_the_wait(ptx: str) -> str | None:
    """What is wrong with an FP8 kernel's PTX under PDL, or None: nothing before `griddepcontrol.wait` reads
    memory the kernel in front may write (no global load, no asynchronous copy; the weights' L2 prefetch is
    neither)."""
    wait = ptx.find("griddepcontrol.wait")
    before = len(re.findall(r"\bld\.global|\bcp\.async\.c[ag]", ptx[: max(wait, 0)]))
    if wait < 0 or before:
        return f"griddepcontrol.wait at {wait}, {before} global loads or copies before it"
    return None


def preloaded_loads_come_first() -> str | None:
    """What is wrong with the PTX of the preloaded attention under PDL (the 1B's shape), or None: its mask, K
    and V loads before `griddepcontrol.wait`, only q and the step's own slot (a few loads) after it."""
    flags = dict(GROUP=4, HEAD_DIM=64, BLOCK_D=64, BLOCK_T=256, PARTS=2, SOFTCAP=False, UPCAST=False, USE_PDL=True)
    kernel = decode_attention._decode_preloaded_kernel
    params = list(inspect.signature(kernel.fn).parameters)
    pointers = {**ATTENTION_POINTERS, "Mask": "*i1"}
    signature = {name: "constexpr" if name in flags else pointers.get(name, "i32") for name in params}
    signature.update(scale="fp32", softcap="fp32")
    fixed = {(params.index(name),): value for name, value in flags.items()}
    source = ASTSource(fn=kernel, signature=signature, constexprs=fixed)
    ptx = triton.compile(source, target=HOPPER, options={"num_warps": 8}).asm["ptx"]
    wait = ptx.find("griddepcontrol.wait")
    before, after = ptx[:wait].count("ld.global"), ptx[wait:].count("ld.global")
    if wait < 0 or before < 10 or after > 4:
        return (
            f"griddepcontrol.wait at {wait}; global loads before it {before} (10 or more), after {after} (4 or fewer)"
        )
    return None


def fp8_failures_on_ada() -> list[str]:
    """The FP8 kernel's launched tiles compiled for sm_89, without PDL (an sm_90 feature, off there): its PTX
    may use only what Ada has (mul.bf16x2, for one, needs sm_90)."""
    failures = []
    for kind, tile in FP8_LAUNCHED.items():
        flags, launch = fp8_launched(tile, blockwise=False, split=1, fold={}, pdl=False)
        try:
            compile_for(fp8_kernels.fp8_skinny_kernel, flags, FP8_POINTERS, "fp32", **launch, target=ADA)
        except Exception as err:  # noqa: BLE001 - report every variant that fails
            failures.append(f"fp8_skinny_kernel ({kind}) for sm_89: {' '.join(str(err).split())[:300]}")
    return failures


def main() -> int:
    failed = 0
    for failure in fp8_failures_on_ada():
        failed += 1
        print(f"FAILED {failure}")
    wrong = preloaded_loads_come_first()
    if wrong:
        failed += 1
        print(f"FAILED the preloaded attention's PTX: {wrong}")
    # Python floats reach a kernel as fp32 from its own launcher but as fp64 from inductor's generated
    # code (wrap_triton): a float scale made the decode attention's running max fp64, a type error
    # that only the H200 run inside inductor showed (2026-12-01)
    for (description, kernel, flags, pointers, *launch), float_type in itertools.product(variants(), ("fp32", "fp64")):
        try:
            compiled = compile_for(kernel, flags, pointers, float_type, **(launch[0] if launch else {}))
            wrong = loads_before_the_wait(compiled.asm["ptx"]) if launch and flags.get("USE_PDL") else None
            if wrong:
                failed += 1
                print(f"FAILED {description} (floats {float_type}): {wrong}")
        except Exception as err:  # noqa: BLE001 - report every variant that fails
            failed += 1
            text = " ".join(str(err).split())
            print(f"FAILED {description} (floats {float_type}): {text[:300]} ... {text[-300:]}")
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
