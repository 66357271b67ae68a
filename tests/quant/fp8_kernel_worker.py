"""Runs the FP8 skinny kernel in a process of its own, as test_fp8_matmul asks: under the Triton interpreter
(TRITON_INTERPRET=1 in its environment, which must be set before triton is imported) against the reference,
or, without it, compiled for the H200 (sm_90) to read the PTX's weight loads. Reads a job as JSON on stdin,
writes the results as JSON on stdout.

Jobs: {"cases": [...]} -> {case id: {"error_ulps": ..., "shape": ..., "dtype": ...[, "identical": bool]}} (identical:
whether a case's output is bit for bit that of its `same_as` config);
{"ptx": [...]} -> {variant id: {"v4_loads": n, "copy_bytes": [...], "expected_vectors": n}};
{"layers": [...]} -> {id: {"fold": setting, "folded_ops": [...], "logits": [...]}}: the FP8 tiny llama's decode
steps through the fused layer program under each fp8_fold value;
{"codes": true} -> {"bits": [codes whose value differs]}: every e4m3 code through the kernel's own bf16
conversion's integer ops (fp8_codes.py);
{"split": {"x": [[...]]}} -> {"hi": [[codes]], "lo": [[codes]], "scale": [...]}: a bf16 tile of x through
fp8_kernels._x_as_e4m3_pair (the e4m3 tensor cores' two terms).
"""

import json
import os
import sys

import torch

from accelerate_graph.fused.kernels.configs import SkinnyConfig
from accelerate_graph.fused.kernels.skinny_matmul import reference_rms_norm
from accelerate_graph.quant import fp8_matmul, fp8_skinny
from accelerate_graph.quant.fp8_reference import (
    dequantize,
    error_ulps,
    gated_error_ulps,
    reference_fp8_matmul,
    reference_fp8_sums,
)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
fp8_skinny.interpret_on_cpu = True  # the op's own dispatch takes the interpreted kernel here


def operands(case: dict):
    """x [rows, K] (a 3-D [2, rows/2, K] where `batched`; its columns scaled down where `x_spread`), a weight [N, K] of random e4m3 codes (every value
    from subnormals to 448, NaN codes zeroed), scales, bias."""
    gen = torch.Generator().manual_seed(case.get("seed", 0))
    m, n, k, block = case["rows"], case["n"], case["k"], case.get("block")
    dtype = DTYPES[case["dtype"]]
    x = torch.randn(m, k, generator=gen) * 2
    if case.get("x_spread"):  # column j scaled by 2^-(j % spread): a row's values span 2^-(spread - 1) of its largest
        x = x * 2.0 ** -(torch.arange(k) % case["x_spread"]).float()
    x = x.to(dtype)
    if case.get("batched"):
        x = x.reshape(2, m // 2, k)
    codes = torch.randint(0, 256, (n, k), generator=gen, dtype=torch.uint8)
    weight = torch.where(codes & 0x7F == 0x7F, 0, codes).view(torch.float8_e4m3fn)
    shape = (n,) if block is None else (-(-n // block), -(-k // block))
    scale = torch.rand(shape, generator=gen) * k**-0.5 / 64 + 1e-4
    bias = torch.randn(n, generator=gen).to(dtype) if case.get("bias") else None
    if bias is not None and case.get("strided"):  # every other element of a longer tensor: a stride of 2
        bias = torch.stack([bias, torch.full_like(bias, 1e4)], dim=-1)[:, 0]
    return x, weight, scale, block, bias


def fold_operands(case: dict, x: torch.Tensor, n: int) -> dict:
    """The launch's keywords for the case's fold: a norm weight around 1 (case "norm", and "gate_up": the
    weight's halves then gate and up) or a residual shaped like the output (case "residual"); none without."""
    gen = torch.Generator().manual_seed(case.get("seed", 0) + 1)
    if case.get("fold") in ("norm", "gate_up"):
        norm = {"norm_weight": (torch.rand(x.shape[-1], generator=gen) + 0.5).to(x.dtype), "eps": 1e-5}
        if case.get("strided"):
            weight = norm["norm_weight"]
            norm["norm_weight"] = torch.stack([weight, torch.full_like(weight, 1e4)], dim=-1)[:, 0]
        return {**norm, "gate_up": True} if case["fold"] == "gate_up" else norm
    if case.get("fold") == "residual":
        return {"residual": torch.randn(*x.shape[:-1], n, generator=gen).to(x.dtype)}  # as large as the product
    return {}


def run_case(case: dict) -> dict:
    x, weight, scale, block, bias = operands(case)
    fold = fold_operands(case, x, weight.shape[0])
    if case.get("config"):
        got = fp8_skinny.launch(x, weight, scale, block, bias, SkinnyConfig(**case["config"]), **fold)
    elif "gate_up" in fold:  # the ops as callers call them: their rows decide the path
        got = fp8_matmul.fp8_norm_gate_up(x, fold["norm_weight"], fold["eps"], weight, scale, block)
    elif "norm_weight" in fold:
        got = fp8_matmul.fp8_norm_matmul(x, fold["norm_weight"], fold["eps"], weight, scale, block, bias)
    elif "residual" in fold:
        got = fp8_matmul.fp8_matmul_residual(x, weight, scale, block, bias, fold["residual"])
    else:
        got = fp8_matmul.fp8_matmul(x, weight, scale, block, bias)
    if x.dtype == torch.float32:  # float32 sums are off by about the bound themselves: the truth, in float64
        ref = float64_reference(x, weight, scale, block, bias, fold)
        if "gate_up" in fold:  # in the output's own units: stricter than gated_error_ulps' for a float32 output
            gate, up = ref.chunk(2, dim=-1)
            ref = torch.nn.functional.silu(gate) * up
        error = error_ulps(got, ref)
    elif "gate_up" in fold:  # the normed product's float32 sums, through the exact activation
        normed = reference_rms_norm(x, fold["norm_weight"], fold["eps"], "llama")
        gate, up = reference_fp8_sums(normed, weight, scale, block, bias).chunk(2, dim=-1)
        error = gated_error_ulps(got, gate, up)
    else:  # the unfolded sequence's rounding: the norm, then the product; the product, then the residual
        normed = reference_rms_norm(x, fold["norm_weight"], fold["eps"], "llama") if "norm_weight" in fold else x
        ref = reference_fp8_matmul(normed, weight, scale, block, bias)
        if "residual" in fold:
            ref = fold["residual"] + ref
        error = error_ulps(got, ref)
    found = {"error_ulps": error, "shape": list(got.shape), "dtype": str(got.dtype).removeprefix("torch.")}
    if case.get("same_as"):  # the output of another config, which should be the same bits
        twin = fp8_skinny.launch(x, weight, scale, block, bias, SkinnyConfig(**case["same_as"]), **fold)
        found["identical"] = torch.equal(got.view(torch.int16), twin.view(torch.int16))
    return found


def float64_reference(x, weight, scale, block, bias, fold: dict) -> torch.Tensor:
    """The fp32 case's product (the norm before it, the residual after it) in float64, before silu(gate) * up:
    at 32 rows the float32 reference itself was 2 of the bound's units from it (the kernel 0.4)."""
    wide = x.double()
    if "norm_weight" in fold:
        wide = reference_rms_norm(wide, fold["norm_weight"].double(), fold["eps"], "llama")
    out = wide @ dequantize(weight, scale, block).double().T
    if bias is not None:
        out = out + bias.double()
    if "residual" in fold:
        out = out + fold["residual"].double()
    return out


def layer_steps(job: dict) -> dict:
    """One decode step's logits at each (batch, context) of the job's cases, by the FP8 tiny llama (fp16: the
    interpreter's tensor-core path gets bf16 wrong, fp8_skinny says) through the fused layer program under the
    job's fp8_fold, and which folded ops its layers called (while dynamo traced them)."""
    from test_fp8_fused import fp8_tiny

    from accelerate_graph import settings
    from accelerate_graph.core.decode_session import DecodeSession
    from accelerate_graph.fused import layer_program
    from accelerate_graph.fused.layers import FusedForward

    calls = []
    for name in ("fp8_norm_matmul", "fp8_matmul_residual", "fp8_norm_gate_up"):  # counted, not replaced
        op = getattr(layer_program, name)
        setattr(layer_program, name, lambda *args, _op=op, _name=name: calls.append(_name) or _op(*args))
    torch._dynamo.reset()
    torch.manual_seed(1)
    prompt = torch.randint(0, 100, (2, 6))
    model = fp8_tiny(job.get("block"), torch.float16)
    session = DecodeSession(model, 2, 64)
    chosen = settings.DEFAULTS.replace(fp8_fold=job["fold"])
    fused = FusedForward(model, backend="eager", settings=chosen)
    logits = session.first_steps(prompt, [tuple(case) for case in job["cases"]], fused)
    return {"fold": job["fold"], "folded_ops": sorted(set(calls)), "logits": [t.float().tolist() for t in logits]}


def ptx_of(variant: dict) -> dict:
    """The PTX of fp8_skinny_kernel for sm_90 with the variant's constexprs, sizes divisible by 16 as a launch
    specializes them: its 16-byte register loads, the sizes of its asynchronous copies to shared memory, its
    e4m3 warpgroup MMAs and its conversions from e4m3."""
    import inspect
    import re

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from accelerate_graph.quant import fp8_kernels

    kernel = fp8_kernels.fp8_skinny_kernel
    flags, num_stages = variant["flags"], variant["num_stages"]
    params = list(inspect.signature(kernel.fn).parameters)
    pointers = {"x_ptr": "*bf16", "w_ptr": "*fp8e4nv", "s_ptr": "*fp32", "b_ptr": "*bf16", "out_ptr": "*bf16"}
    pointers.update(ws_ptr="*fp32", nw_ptr="*bf16", res_ptr="*bf16", xt_ptr="*fp8e4nv", xs_ptr="*fp32")
    scalars = {"eps": "fp32"}
    signature = {
        name: "constexpr" if name in flags else pointers.get(name, scalars.get(name, "i32")) for name in params
    }
    divisible = [*pointers, "N", "K", "K_PER_SPLIT"]
    attrs = {(params.index(name),): [["tt.divisibility", 16]] for name in divisible}
    fixed = {(params.index(name),): value for name, value in flags.items()}
    source = ASTSource(fn=kernel, signature=signature, constexprs=fixed, attrs=attrs)
    options = {"num_warps": 4, "num_stages": num_stages}
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"]
    copies = re.findall(r"cp\.async\.c[ag]\.shared\.global \[[^\]]*\], \[[^\]]*\], (0x[0-9a-f]+)", ptx)
    return {
        "e4m3_mmas": len(re.findall(r"wgmma\.mma_async\S*\.e4m3\.e4m3", ptx)),
        "e4m3_conversions": len(re.findall(r"cvt\.\S*\.e4m3x2\s", ptx)),  # from e4m3 (the source type is last)
        "v4_loads": len(re.findall(r"ld\.global(?:\.[a-z]+)*\.v4\.b32", ptx)),
        "copy_bytes": sorted({int(size, 16) for size in copies}),
        "expected_vectors": flags["BLOCK_N"] * flags["BLOCK_K"] // (16 * 32 * options["num_warps"]),
    }


if fp8_skinny.fp8_kernels is not None:  # the worker runs where triton is; the kernel's names are module globals
    import triton
    import triton.language as tl

    from accelerate_graph.quant.fp8_kernels import _x_as_e4m3_pair

    @triton.jit
    def split_kernel(x_ptr, hi_ptr, lo_ptr, scale_ptr, M: tl.constexpr, K: tl.constexpr):
        at = tl.arange(0, M)[:, None] * K + tl.arange(0, K)[None, :]
        hi, lo, scale = _x_as_e4m3_pair(tl.load(x_ptr + at))
        tl.store(hi_ptr + at, hi.to(tl.uint8, bitcast=True))
        tl.store(lo_ptr + at, lo.to(tl.uint8, bitcast=True))
        tl.store(scale_ptr + tl.arange(0, M), scale)


def split_terms(job: dict) -> dict:
    """_x_as_e4m3_pair of the job's x (rows and columns powers of two), its terms as e4m3 codes."""
    x = torch.tensor(job["x"], dtype=torch.float32).to(torch.bfloat16)
    m, k = x.shape
    hi, lo = torch.empty(m, k, dtype=torch.uint8), torch.empty(m, k, dtype=torch.uint8)
    scale = torch.empty(m)
    split_kernel[(1,)](x, hi, lo, scale, m, k)
    return {"hi": hi.tolist(), "lo": lo.tolist(), "scale": scale.tolist()}


def main() -> None:
    job = json.load(sys.stdin)
    if "cases" in job:
        assert os.environ.get("TRITON_INTERPRET") == "1", "the cases run under the Triton interpreter"
        result = {case["id"]: run_case(case) for case in job["cases"]}
    elif "codes" in job:
        assert os.environ.get("TRITON_INTERPRET") == "1", "the codes run under the Triton interpreter"
        from fp8_codes import mismatches

        result = mismatches("cpu", bf16=False)
    elif "split" in job:
        assert os.environ.get("TRITON_INTERPRET") == "1", "the split runs under the Triton interpreter"
        result = split_terms(job["split"])
    elif "layers" in job:
        assert os.environ.get("TRITON_INTERPRET") == "1", "the layers run under the Triton interpreter"
        result = {layers["id"]: layer_steps(layers) for layers in job["layers"]}
    else:
        result = {variant["id"]: ptx_of(variant) for variant in job["ptx"]}
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
