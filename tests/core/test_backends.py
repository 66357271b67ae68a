"""Graph backends are chosen by name."""

from __future__ import annotations

import pytest
import torch

from accelerate_graph.core.backends import BACKENDS, EmulatedBackend, backend_for, backend_named

CPU = torch.device("cpu")


def test_each_backend_carries_the_name_it_is_registered_under():
    assert set(BACKENDS) == {"cuda-graph", "emulated"}
    assert backend_named("emulated", CPU).name == "emulated"
    if torch.cuda.is_available():
        assert backend_named("cuda-graph", torch.device("cuda:0")).name == "cuda-graph"


def test_the_device_picks_the_backend():
    assert isinstance(backend_for(CPU), EmulatedBackend)
    assert isinstance(backend_for(CPU, emulate=True), EmulatedBackend)


def test_an_unknown_backend_is_named():
    with pytest.raises(ValueError, match="'tpu-graph'.*cuda-graph, emulated"):
        backend_named("tpu-graph", CPU)
