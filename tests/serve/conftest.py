"""Fixtures of the server tests (the helpers are in serving.py)."""

from __future__ import annotations

import pytest
from serving import BUCKETS, CACHE_LEN, TRAINED_TINY, running


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


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here on one torch thread (tests/conftest.py)."""
