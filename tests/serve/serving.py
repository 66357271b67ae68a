"""The server under test: the trained tiny llama of tests/assets (a tokenizer with a chat template, peaked
next-token choices) prepared through the real path, served by uvicorn in a thread on a free loopback port,
spoken to with the `openai` client. (conftest.py holds the fixtures; the tests import these helpers.)"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest
from fake_engine import EagerRowEngine

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

TRAINED_TINY = Path(__file__).resolve().parents[1] / "assets" / "trained-tiny-llama"
BUCKETS = (1, 2, 4, 8)
CACHE_LEN = 128

# The engine the server drives: SlotEngine over the per-row graphs, or where its module is absent the eager
# stand-in of the same API (the same tests pass on both).
try:
    from accelerate_graph.serve.engine import SlotEngine as Engine
except ModuleNotFoundError as missing:
    if missing.name != "accelerate_graph.serve.engine":
        raise
    Engine = EagerRowEngine


@contextlib.contextmanager
def running(prepared, engine=None, **options):
    """(base URL, Service) of a server on a free loopback port, stopped (and its engine thread ended) after."""
    from accelerate_graph.serve.assemble import assemble
    from accelerate_graph.serve.server import make_server

    engine = engine or Engine(prepared, chunk=options.pop("chunk", 16))
    service = assemble(prepared, engine, **options)
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = make_server(service.app, service.scheduler, "127.0.0.1", port)
    service.scheduler.start()
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", service
    finally:
        server.should_exit = True
        thread.join(15)
        service.scheduler.close()
        sock.close()


def client(url: str, **options):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, **options)


def async_client(url: str, **options):
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, **options)


def wait_until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
