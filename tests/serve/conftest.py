"""Fixtures of the server tests (the helpers are in serving.py)."""

from __future__ import annotations

import pytest
import torch
from serving import BUCKETS, CACHE_LEN, TRAINED_TINY, running


@pytest.fixture(autouse=True)
def one_thread():
    """Two torch threads on a shared two-core machine spin against each other."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(scope="session")
def prepared():
    from accelerate_graph.pipeline import CaptureRequest, prepare

    request = CaptureRequest(model=str(TRAINED_TINY), device="cpu", buckets=BUCKETS, max_cache_len=CACHE_LEN)
    request.per_row = True  # graphs whose rows stand at positions of their own (what SlotEngine drives)
    return prepare(request)


@pytest.fixture
def server(prepared):
    with running(prepared) as (url, service):
        yield url, service
