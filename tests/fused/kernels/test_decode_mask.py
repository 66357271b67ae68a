"""The decode mask kernel (fused/kernels/decode_mask.py) against its torch reference: on the CPU under the
Triton interpreter (conftest.py; a fresh process when triton was imported without it), on a GPU natively.
That the reference is HF's own mask: tests/fused/test_causal_mask.py."""

import pytest
import torch
from test_skinny_matmul import run_interpreted_in_a_fresh_process

from accelerate_graph.core.backends import EmulatedBackend
from accelerate_graph.fused.kernels import decode_mask


def _interpreter_in_process() -> bool:
    """The kernel decorated under the interpreter (conftest.py switched it on before triton was imported)."""
    if decode_mask.triton is None or not decode_mask.INTERPRETED:
        return False
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(decode_mask._decode_mask_kernel, InterpretedFunction)


INTERPRETER = _interpreter_in_process()
FRESH_PROCESS = decode_mask.triton is not None and not INTERPRETER and not torch.cuda.is_available()
interpreted = pytest.mark.skipif(not INTERPRETER, reason="needs triton imported under TRITON_INTERPRET=1")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _padding(batch: int, slots: int, dtype: torch.dtype, device="cpu") -> torch.Tensor:
    """Row 1 left-padded by 3 slots, row 2 by 7, nonzero values other than 1 where a float mask allows."""
    padding = torch.ones(batch, slots, device=device)
    for row, pad in ((1, 3), (2, 7)):
        if row < batch:
            padding[row, :pad] = 0
    if dtype.is_floating_point:
        padding[0, -1] = 0.5  # nonzero: attend, as HF's .bool() reads it
    return padding.to(dtype)


# (batch, padding slots, kv_length, positions): buckets of one block and of several (BLOCK is 1024),
# a padding mask longer than the view
CASES = [(1, 16, 16, (0, 7, 15)), (3, 65, 64, (0, 33, 63)), (3, 2100, 2050, (0, 1023, 1024, 2049))]


@interpreted
@pytest.mark.parametrize("dtype", [torch.long, torch.bool, torch.float32], ids=["long", "bool", "float32"])
@pytest.mark.parametrize(("batch", "slots", "kv_length", "positions"), CASES)
def test_the_kernel_is_the_reference(batch, slots, kv_length, positions, dtype):
    padding = _padding(batch, slots, dtype)
    for position in positions:
        slot = torch.tensor(position)
        got = decode_mask.launch(padding, slot, kv_length)
        expected = decode_mask.reference(padding, slot, kv_length)
        assert (got.shape, got.stride(), got.dtype) == (expected.shape, expected.stride(), expected.dtype)
        assert torch.equal(got, expected)


@interpreted
def test_a_padding_mask_with_a_row_stride_of_its_own():
    padding = _padding(3, 130, torch.long)[:, 2:66]  # rows 130 apart
    slot = torch.tensor(40)
    assert torch.equal(decode_mask.launch(padding, slot, 64), decode_mask.reference(padding, slot, 64))


def test_the_op_is_recorded_by_the_cpu_emulation_of_graphs():
    """Replayed with new inputs in the same buffers: the new mask (a bare launch would replay garbage)."""
    padding, slot = _padding(3, 65, torch.long), torch.tensor(5)
    graph = EmulatedBackend().capture(lambda: torch.ops.cugraph_accel.decode_causal_mask(padding, slot, 64))
    slot.fill_(40)
    padding[0, :2] = 0
    assert torch.equal(graph.replay(), decode_mask.reference(padding, slot, 64))


@pytest.mark.skipif(not FRESH_PROCESS, reason="the interpreter tests run in this process (or on a GPU)")
def test_interpreter_tests_in_a_fresh_process():
    run_interpreted_in_a_fresh_process(__file__)


@needs_cuda
@pytest.mark.cuda
@pytest.mark.parametrize(("batch", "slots", "kv_length", "positions"), CASES)
def test_gpu_kernel_is_the_reference(batch, slots, kv_length, positions):
    padding = _padding(batch, slots, torch.long, device="cuda")
    for position in positions:
        slot = torch.tensor(position, device="cuda")
        got = torch.ops.cugraph_accel.decode_causal_mask(padding, slot, kv_length)
        assert torch.equal(got, decode_mask.reference(padding, slot, kv_length))
