"""gated_error_ulps, the folded gate/up's measure (quant/fp8_reference.py), on CPU at a Llama-like MLP's shapes:
sums that differ from the reference's as a correct kernel's may pass, a wrong scale and a NaN do not."""

import pytest
import torch
import torch.nn.functional as F

from accelerate_graph.fused.kernels.skinny_matmul import reference_rms_norm
from accelerate_graph.quant.fp8_reference import dequantize, error_ulps, gated_error_ulps, reference_fp8_sums
from accelerate_graph.tune.fp8_chain import random_fp8

K, HALF = 4096, 1024  # the merged weight: gate's HALF rows, then up's
BAR = 2.0
WRONG_CHANNEL = 5


@pytest.fixture(scope="module")
def weights():
    weight, scale = random_fp8(2 * HALF, K, None, torch.Generator().manual_seed(0), "cpu")
    return weight, scale


def normed_x(rows: int) -> torch.Tensor:
    """bf16 rows through the folded llama RMSNorm, as the chain's gate/up call reads them."""
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, K, generator=gen).to(torch.bfloat16)
    norm = (torch.randn(K, generator=gen) * 0.1 + 1).to(torch.bfloat16)
    return reference_rms_norm(x, norm, 1e-5, "llama")


def kernel_output(sums: torch.Tensor) -> torch.Tensor:
    """The epilogue's roundings of float32 sums [rows, 2 * HALF]: gate and up to bf16, silu(gate) to bf16, the
    product to bf16."""
    gate, up = sums.to(torch.bfloat16).chunk(2, dim=-1)
    return F.silu(gate) * up


def measured(sums: torch.Tensor, reference: torch.Tensor) -> float:
    return gated_error_ulps(kernel_output(sums), *reference.chunk(2, dim=-1))


@pytest.mark.parametrize("rows", [1, 8, 32])
def test_sums_in_another_order_measure_within_one_and_a_half_units(rows, weights):
    """The reference's products summed by 128-column pieces of K, the last piece first: a correct kernel's sums."""
    weight, scale = weights
    x = normed_x(rows)
    reference = reference_fp8_sums(x, weight, scale, None, None)
    w = dequantize(weight, scale, None)
    pieces = [x[:, i : i + 128].float() @ w[:, i : i + 128].T for i in range(0, K, 128)]
    reordered = torch.zeros_like(reference)
    for piece in reversed(pieces):
        reordered += piece
    assert not torch.equal(reordered, reference)
    error = measured(reordered, reference)
    assert error <= 1.5, error


def noisy(sums: torch.Tensor, relative: float, seed: int) -> torch.Tensor:
    return sums * (1 + relative * torch.randn(sums.shape, generator=torch.Generator().manual_seed(seed)))


@pytest.mark.parametrize("rows", [1, 8, 32])
def test_sums_off_by_relative_noise_of_2_to_the_minus_11_pass(rows, weights):
    """Four times the e4m3 tensor cores' accumulation error (about 2^-13 of a sum) at every element."""
    weight, scale = weights
    reference = reference_fp8_sums(normed_x(rows), weight, scale, None, None)
    errors = [measured(noisy(reference, 2**-11, seed), reference) for seed in range(3)]
    assert max(errors) <= BAR, errors


def test_the_bf16_rounded_reference_flags_that_noise(weights):
    """What the gated measure is for: judged against silu(gate) * up of the bf16-rounded sums, in the output's
    own last place, the same noise reads above the bar (a rounding of gate flipped, times SiLU's slope)."""
    weight, scale = weights
    reference = reference_fp8_sums(normed_x(32), weight, scale, None, None)
    old = [error_ulps(kernel_output(noisy(reference, 2**-11, seed)), kernel_output(reference)) for seed in range(3)]
    assert max(old) > BAR, old


@pytest.mark.parametrize("rows", [1, 8, 32])
@pytest.mark.parametrize("half", ["gate", "up"])
def test_a_doubled_scale_on_one_channel_fails(rows, half, weights):
    """One channel's scale wrong (gate's or up's): far above the bar at every row count, one row included."""
    weight, scale = weights
    x = normed_x(rows)
    reference = reference_fp8_sums(x, weight, scale, None, None)
    wrong = scale.clone()
    wrong[WRONG_CHANNEL + (HALF if half == "up" else 0)] *= 2
    error = measured(reference_fp8_sums(x, weight, wrong, None, None), reference)
    assert error > 5 * BAR, error


def test_a_nan_fails(weights):
    """A NaN anywhere in the output reads as NaN, which no bar passes."""
    weight, scale = weights
    reference = reference_fp8_sums(normed_x(8), weight, scale, None, None)
    got = kernel_output(reference)
    got[3, 100] = float("nan")
    error = gated_error_ulps(got, *reference.chunk(2, dim=-1))
    assert not error <= BAR, error


@pytest.mark.parametrize("rows", [8, 32])
def test_sums_as_e4m3_tensor_cores_accumulate_them_pass(rows, weights):
    """The e4m3 tensor cores' sums, modelled: each run of 32 products summed exactly, cut to 14 significant bits,
    the runs added in float32. The bf16-rounded reference reads this at about the bar; the gated measure well
    inside it."""
    weight, scale = weights
    x = normed_x(rows)
    reference = reference_fp8_sums(x, weight, scale, None, None)
    codes, wide = weight.double(), x.double()
    runs = torch.zeros_like(reference)
    for i in range(0, K, 32):
        run = wide[:, i : i + 32] @ codes[:, i : i + 32].T
        significand, exponent = torch.frexp(run)
        runs += torch.ldexp(torch.trunc(significand * 2**14) / 2**14, exponent).float()
    error = measured(runs * scale.float(), reference)
    assert error <= 1.5, error


@pytest.mark.parametrize("half", ["gate", "up"])
def test_a_four_percent_wrong_channel_fails_at_32_rows(half, weights):
    """One channel 4% off reads above the bar once the rows make its errors count (gate's or up's): why the
    unit adds its three places as independent errors, not as a plain sum (which read 2.2-2.4 here)."""
    weight, scale = weights
    x = normed_x(32)
    reference = reference_fp8_sums(x, weight, scale, None, None)
    wrong = scale.clone()
    wrong[WRONG_CHANNEL + (HALF if half == "up" else 0)] *= 1.04
    error = measured(reference_fp8_sums(x, weight, wrong, None, None), reference)
    assert error > 1.5 * BAR, error
