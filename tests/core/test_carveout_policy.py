"""CUGRAPH_ACCEL_SMEM_CARVEOUT: which graphs' kernel nodes ask for which shared-memory split."""

import pytest

from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.core.backends import cuda as cuda_backend
from accelerate_graph.core.backends.cuda import carveout_for, carveout_policy


def test_auto_gives_one_split_above_batch_1_and_the_drivers_elsewhere():
    auto = carveout_policy("auto")
    assert [auto(batch) for batch in (0, 1, 2, 8, 32)] == [None, None, 100, 100, 100]
    assert [carveout_for(batch) for batch in (1, 16)] == [None, 100]  # the default, nothing set


def test_off_and_a_percent_apply_to_every_graph():
    assert [carveout_policy("off")(batch) for batch in (1, 16)] == [None, None]
    assert [carveout_policy(" 50 ")(batch) for batch in (0, 1, 16)] == [50, 50, 50]


@pytest.mark.parametrize("text", ["101", "-1", "max", ""])
def test_anything_else_is_one_line_naming_the_variable(text):
    with pytest.raises(BadOptionError, match="CUGRAPH_ACCEL_SMEM_CARVEOUT=.* is not auto, off or a percent"):
        carveout_policy(text)


class FakeGraph:
    def __init__(self):
        self.calls = []

    def capture_end(self):
        self.calls.append("capture_end")

    def raw_cuda_graph(self):
        return 1234

    def instantiate(self):
        self.calls.append("instantiate")


def test_a_runtime_that_refuses_the_carveout_warns_and_the_graph_still_instantiates(monkeypatch):
    def refused(graph, percent):
        raise RuntimeError("cudaGraphKernelNodeSetAttribute(preferred shared memory carveout) returned CUDA error 1")

    monkeypatch.setattr(cuda_backend, "prefer_shared_memory", refused)
    recorder = cuda_backend._SegmentRecorder(pool=None, carveout=100)
    recorder._open = graph = FakeGraph()
    with pytest.warns(UserWarning, match=r"driver's shared-memory split \(cudaGraphKernelNodeSetAttribute.*error 1\)"):
        recorder.end()
    assert graph.calls == ["capture_end", "instantiate"] and recorder.segments == [graph]
