"""The smem_carveout setting: which graphs' kernel nodes ask for which shared-memory split."""

import pytest

from accelerate_graph import settings
from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.core.backends import cuda as cuda_backend
from accelerate_graph.core.backends.cuda import carveout_for


def test_auto_gives_one_split_above_batch_1_and_the_drivers_elsewhere():
    assert settings.DEFAULTS.smem_carveout == "auto"
    assert [carveout_for("auto", batch) for batch in (0, 1, 2, 8, 32)] == [None, None, 100, 100, 100]


def test_off_and_a_percent_apply_to_every_graph():
    assert [carveout_for("off", batch) for batch in (1, 16)] == [None, None]
    percent = settings.resolve({"smem_carveout": " 50 "}, environ={}).smem_carveout
    assert [carveout_for(percent, batch) for batch in (0, 1, 16)] == [50, 50, 50]


@pytest.mark.parametrize("text", ["101", "-1", "max", ""])
def test_anything_else_is_one_line_naming_the_setting(text):
    with pytest.raises(
        BadOptionError, match=r"^assignments sets smem_carveout to .*, which is not auto, off or a percent"
    ):
        settings.resolve({"smem_carveout": text}, environ={})
    with pytest.raises(BadOptionError, match=r"^The environment sets smem_carveout to .*, which is not auto, off"):
        settings.resolve(environ={"CUGRAPH_ACCEL_SMEM_CARVEOUT": text})


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
