"""Every e4m3 code through the FP8 kernel's own bf16 conversion (fp8_kernels._e4m3_bf16_bits, and _e4m3_as
on a GPU): a kernel for test_fp8_matmul, run compiled on a GPU or under the interpreter by fp8_kernel_worker."""

import torch
import triton
import triton.language as tl

from accelerate_graph.quant import fp8_kernels


@triton.jit
def _codes_kernel(w_ptr, bits_ptr, bf16_ptr, BF16: tl.constexpr):
    offs = tl.arange(0, 256)
    w = tl.load(w_ptr + offs)
    tl.store(bits_ptr + offs, fp8_kernels._e4m3_bf16_bits(w))
    if BF16:  # the interpreter multiplies bf16 bits as integers (numpy has no bf16): GPUs only
        tl.store(bf16_ptr + offs, fp8_kernels._e4m3_as(w, tl.bfloat16))


def mismatches(device: str, bf16: bool) -> dict[str, list[int]]:
    """The codes (NaN codes left out: quantization never writes them) whose kernel value differs in any bit
    from torch's conversion: "bits" times 2^120 (in float32, exact) against float32, "bfloat16" the kernel's
    bf16 operand (its PTX) against bf16."""
    codes = torch.arange(256, dtype=torch.uint8, device=device).view(torch.float8_e4m3fn)
    bits = torch.empty(256, dtype=torch.int16, device=device)
    out16 = torch.empty(256, dtype=torch.bfloat16, device=device)
    _codes_kernel[(1,)](codes, bits, out16, BF16=bf16)
    finite = ~codes.float().isnan()
    scaled = bits.view(torch.bfloat16).float() * 2.0**120
    found = {"bits": (scaled.view(torch.int32) != codes.float().view(torch.int32)) & finite}
    if bf16:
        found["bfloat16"] = (out16.view(torch.int16) != codes.to(torch.bfloat16).view(torch.int16)) & finite
    return {name: wrong.nonzero().flatten().tolist() for name, wrong in found.items()}
