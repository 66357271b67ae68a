"""The server under test: the trained tiny llama of tests/assets (a tokenizer with a chat template, peaked
next-token choices) prepared through the real path, served by uvicorn in a thread on a free loopback port,
spoken to with the `openai` client. (conftest.py holds the fixtures; the tests import these helpers.)"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest

from accelerate_graph.serve.engine import SlotEngine as Engine

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

TRAINED_TINY = Path(__file__).resolve().parents[1] / "assets" / "trained-tiny-llama"
BUCKETS = (1, 2, 4, 8)
CACHE_LEN = 128


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


# a request that hangs fails its test in two minutes, not in the client's default ten (a GPU suite's part is eight)
CLIENT_TIMEOUT_S = 120.0


def client(url: str, **options):
    options.setdefault("timeout", CLIENT_TIMEOUT_S)
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, **options)


def async_client(url: str, **options):
    options.setdefault("timeout", CLIENT_TIMEOUT_S)
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, **options)


def wait_until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def hf_greedy(device):
    """(tokenizer, greedy): HF's own generate() of one prompt alone in float32 on `device`, as
    (text, completion tokens) the way the server reports them (text up to the end-of-sequence token)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(TRAINED_TINY)
    model = AutoModelForCausalLM.from_pretrained(TRAINED_TINY, dtype=torch.float32).to(device).eval()
    eos = model.generation_config.eos_token_id

    def greedy(ids: list[int], new: int) -> tuple[str, int]:
        with torch.no_grad():
            out = model.generate(
                torch.tensor([ids], device=device), max_new_tokens=new, do_sample=False, pad_token_id=0
            )
        made = out[0, len(ids) :].tolist()
        kept = made[: made.index(eos)] if eos in made else made
        return tokenizer.decode(kept, skip_special_tokens=True), len(made)

    return tokenizer, greedy


def prompts_of_length(tokenizer, lengths: list[int]) -> list[list[int]]:
    """Prompts of the model's own held-out text, of the given token lengths, each from its own place."""
    text = (TRAINED_TINY / "held_out_sample.txt").read_text(encoding="utf-8")
    ids = tokenizer(text)["input_ids"]
    return [ids[37 * i : 37 * i + length] for i, length in enumerate(lengths)]


def staggered_work(tokenizer) -> tuple[list[list[int]], list[int]]:
    """Twelve prompts (more than the rows; 1 to 6 prefill chunks of 16) and their output lengths."""
    prompts = prompts_of_length(tokenizer, [3, 70, 9, 41, 17, 5, 90, 28, 12, 55, 7, 33])
    return prompts, [10 + (i * 7) % 23 for i in range(len(prompts))]


async def staggered(url: str, name: str, prompts: list[list[int]], new: list[int]) -> list[tuple[str, int]]:
    """Greedy completions of `prompts`, each sent 30 ms after the one before (joining a running batch), every
    other one streamed: (text, completion tokens) each."""
    import asyncio

    api = async_client(url)

    async def ask(number: int) -> tuple[str, int]:
        await asyncio.sleep(0.03 * number)
        options = dict(model=name, prompt=prompts[number], max_tokens=new[number], temperature=0)
        if number % 2:
            stream = await api.completions.create(**options, stream=True, stream_options={"include_usage": True})
            chunks = [c async for c in stream]
            return "".join(c.choices[0].text for c in chunks if c.choices), chunks[-1].usage.completion_tokens
        done = await api.completions.create(**options)
        return done.choices[0].text, done.usage.completion_tokens

    return list(await asyncio.gather(*(ask(i) for i in range(len(prompts)))))
