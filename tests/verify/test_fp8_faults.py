"""FP8 weights under the graphs: the correct graphs of an FP8 model pass verify against its own eager run
(per channel and per block), and a wrong scale on one output channel, planted in the replay only, fails
every case. CPU emulation here; the CUDA rows run the GPU's FP8 product."""

import pytest
import torch
from fault_harness import BUCKETS, CACHE, every, failed, fp8_session, verify_with
from tiny_models import tiny_decoder

from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.verify.faults import fault

CUDA = pytest.param(
    "cuda",
    marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")],
)
DEVICES = ["cpu", CUDA]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scheme", ["fp8", "fp8-block"])
def test_the_graphs_of_an_fp8_model_pass(scheme, device):
    rows = verify_with(fp8_session(scheme, device), None)
    assert rows and all(r.passed for r in rows), [r.detail for r in rows if not r.passed]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scheme", ["fp8", "fp8-block"])
def test_a_wrong_scale_on_one_channel_fails_every_case(scheme, device):
    rows = verify_with(fp8_session(scheme, device), fault("wrong_scale"))
    assert failed(rows) == every(rows), [r.detail for r in rows if r.passed]


def test_a_wrong_scale_needs_fp8_layers():
    session = DecodeSession(tiny_decoder("llama"), max(BUCKETS), CACHE)
    with pytest.raises(ValueError, match="needs FP8 layers"):
        verify_with(session, fault("wrong_scale"))
