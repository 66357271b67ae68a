"""Continuous batching through the real server: requests that join and leave at any step give each the tokens
HF's generate() gives it alone; a client that leaves frees its row; a failed step fails only its requests; a
full queue answers 429; a seed repeats its draw whatever else runs."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch
from serving import TRAINED_TINY, Engine, async_client, client, openai, running, wait_until


@pytest.fixture(scope="module")
def reference():
    """(tokenizer, greedy): HF's own generate() of one prompt alone, float32, as (text, completion tokens)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(TRAINED_TINY)
    model = AutoModelForCausalLM.from_pretrained(TRAINED_TINY, dtype=torch.float32).eval()
    eos = model.generation_config.eos_token_id

    def greedy(ids: list[int], new: int) -> tuple[str, int]:
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=new, do_sample=False, pad_token_id=0)
        made = out[0, len(ids) :].tolist()
        kept = made[: made.index(eos)] if eos in made else made
        return tokenizer.decode(kept, skip_special_tokens=True), len(made)

    return tokenizer, greedy


def _prompts(tokenizer, lengths: list[int]) -> list[list[int]]:
    """Prompts of the model's own held-out text, of the given token lengths, each from its own place."""
    text = (TRAINED_TINY / "held_out_sample.txt").read_text(encoding="utf-8")
    ids = tokenizer(text)["input_ids"]
    return [ids[37 * i : 37 * i + length] for i, length in enumerate(lengths)]


def slowed(engine, seconds: float = 0.02):
    """`engine` with each decode step taking `seconds` longer: a long request is still running when the test
    acts on it."""
    import time

    decode = engine.decode

    def slow(rows, tokens):
        time.sleep(seconds)
        return decode(rows, tokens)

    engine.decode = slow
    return engine


def test_staggered_requests_of_different_lengths_each_match_generate_alone(prepared, reference):
    tokenizer, greedy = reference
    lengths = [3, 70, 9, 41, 17, 5, 90, 28, 12, 55, 7, 33]  # more requests than rows, prompts of 1 to 6 chunks
    prompts = _prompts(tokenizer, lengths)
    new = [10 + (i * 7) % 23 for i in range(len(prompts))]
    expected = [greedy(p, n) for p, n in zip(prompts, new)]

    async def ask(api, name, number):
        await asyncio.sleep(0.03 * number)  # staggered: each joins a batch already running
        if number % 2:
            chunks = [c async for c in await api.completions.create(
                model=name, prompt=prompts[number], max_tokens=new[number], temperature=0, stream=True,
                stream_options={"include_usage": True},
            )]  # fmt: skip
            return "".join(c.choices[0].text for c in chunks if c.choices), chunks[-1].usage.completion_tokens
        done = await api.completions.create(model=name, prompt=prompts[number], max_tokens=new[number], temperature=0)
        return done.choices[0].text, done.usage.completion_tokens

    async def everyone(url, name):
        api = async_client(url)
        return await asyncio.gather(*(ask(api, name, i) for i in range(len(prompts))))

    with running(prepared) as (url, service):
        got = asyncio.run(everyone(url, service.served.name))
        metrics = service.scheduler.metrics
        assert metrics.occupancy_sum * service.scheduler.max_rows / metrics.steps("decode") > 2  # rows decoded together
        assert wait_until(lambda: service.scheduler.engine.free_rows() == service.scheduler.engine.max_rows)
    assert got == expected


def test_a_client_that_leaves_frees_its_row_streamed_or_not(prepared):
    import http.client
    import json

    with running(prepared, slowed(Engine(prepared))) as (url, service):
        engine, scheduler = service.scheduler.engine, service.scheduler
        stream = client(url).completions.create(
            model=service.served.name, prompt="def main(", max_tokens=100, temperature=0, stream=True
        )
        next(iter(stream))
        assert scheduler.rows_in_use() == 1
        stream.close()
        assert wait_until(lambda: scheduler.rows_in_use() == 0 and engine.free_rows() == engine.max_rows)

        host, port = url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        body = json.dumps({"prompt": "def main(", "max_tokens": 100, "temperature": 0})
        connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        assert wait_until(lambda: scheduler.rows_in_use() == 1)
        connection.sock.close()  # gone before its answer
        assert wait_until(lambda: scheduler.rows_in_use() == 0 and engine.free_rows() == engine.max_rows)
        assert scheduler.metrics.requests["cancelled"] == 2 and scheduler.metrics.requests["ok"] == 0


def test_a_failed_step_fails_only_its_requests_and_the_server_goes_on(prepared, reference):
    tokenizer, greedy = reference
    (long_prompt,) = _prompts(tokenizer, [80])  # five chunks of 16: prefilling while the step fails
    engine = slowed(Engine(prepared, chunk=16))
    admit, prefill_chunk, decode = engine.admit, engine.prefill_chunk, engine.decode
    seen = {"long_row": None, "armed": False, "fired": False}

    def admitting(tokens):
        row = admit(tokens)
        if list(tokens) == long_prompt:
            seen["long_row"] = row
        return row

    def prefilling(row):
        seen["armed"] |= row == seen["long_row"]
        return prefill_chunk(row)

    def decoding(rows, tokens):
        if seen["armed"] and not seen["fired"]:
            seen["fired"] = True
            raise RuntimeError("the graph replay failed (injected)")
        return decode(rows, tokens)

    engine.admit, engine.prefill_chunk, engine.decode = admitting, prefilling, decoding
    with running(prepared, engine) as (url, service):
        api, name = client(url), service.served.name
        stream = iter(
            api.completions.create(model=name, prompt="def main(", max_tokens=100, temperature=0, stream=True)
        )
        next(stream)
        results = {}
        later = threading.Thread(
            target=lambda: results.update(
                done=api.completions.create(model=name, prompt=long_prompt, max_tokens=8, temperature=0)
            )  # fmt: skip
        )
        later.start()
        with pytest.raises(openai.APIError, match="injected"):
            list(stream)
        later.join(60)
        assert seen["fired"]
        done = results["done"]
        assert (done.choices[0].text, done.usage.completion_tokens) == greedy(long_prompt, 8)
        again = api.completions.create(model=name, prompt="def main(", max_tokens=4, temperature=0)
        assert again.usage.completion_tokens == 4
        metrics = service.scheduler.metrics
        assert (metrics.requests["error"], metrics.requests["ok"]) == (1, 2)
        assert wait_until(lambda: engine.free_rows() == engine.max_rows)


def test_a_full_queue_answers_429(prepared):
    with running(prepared, slowed(Engine(prepared)), max_batch=1, queue_limit=1) as (url, service):
        api, name, scheduler = client(url), service.served.name, service.scheduler
        first = api.completions.create(model=name, prompt="def main(", max_tokens=100, temperature=0, stream=True)
        next(iter(first))
        results = {}
        waiting = threading.Thread(
            target=lambda: results.update(done=api.completions.create(model=name, prompt="def f(", max_tokens=3))
        )
        waiting.start()
        assert wait_until(lambda: scheduler.queue_length() == 1)
        with pytest.raises(openai.RateLimitError) as caught:
            api.completions.create(model=name, prompt="def g(", max_tokens=3)
        assert caught.value.status_code == 429 and caught.value.body["code"] == "queue_full"
        first.close()
        waiting.join(60)
        assert results["done"].usage.completion_tokens >= 1
        assert scheduler.metrics.requests["rejected_full"] == 1


def test_a_seed_repeats_its_draw_alone_or_among_others(prepared):
    async def draws(url, name):
        api = async_client(url)

        def sample(seed, prompt="def main("):
            return api.completions.create(
                model=name, prompt=prompt, max_tokens=16, temperature=0.9, top_p=0.95, seed=seed
            )

        alone = (await sample(7)).choices[0].text
        crowd = await asyncio.gather(sample(7), sample(8, "import os"), sample(9), sample(10, "class A("))
        return alone, [c.choices[0].text for c in crowd]

    with running(prepared) as (url, service):
        alone, crowd = asyncio.run(draws(url, service.served.name))
    assert crowd[0] == alone
    assert len(set(crowd)) > 1
