"""Continuous batching through the real server: requests that join and leave at any step give each the tokens
HF's generate() gives it alone; waiting requests go in in one prefill forward and their events go to the front
in one hand-over a turn; a client that leaves frees its row; a failed step fails only its requests; a full queue
answers 429; a seed repeats its draw whatever else runs."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch
from serving import (
    Engine,
    async_client,
    client,
    hf_greedy,
    openai,
    prompts_of_length,
    running,
    staggered,
    staggered_work,
    wait_until,
)


@pytest.fixture(scope="module")
def reference():
    """(tokenizer, greedy): HF's own generate() of one prompt alone, float32 on the CPU."""
    return hf_greedy(torch.device("cpu"))


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
    prompts, new = staggered_work(tokenizer)
    expected = [greedy(p, n) for p, n in zip(prompts, new)]
    with running(prepared) as (url, service):
        got = asyncio.run(staggered(url, service.served.name, prompts, new))
        metrics = service.scheduler.metrics
        assert metrics.occupancy_sum * service.scheduler.max_rows / metrics.steps("decode") > 2  # rows decoded together
        assert wait_until(lambda: service.scheduler.engine.free_rows() == service.scheduler.engine.max_rows)
    assert got == expected


def test_waiting_prompts_go_in_together_and_their_events_in_one_hand_over_a_turn(prepared, reference):
    """Six prompts of 2 to 9 tokens waiting when the engine thread starts: one prefill forward takes them all
    (6 x 9 tokens within the chunk of 64); each gets generate()'s tokens alone; every turn hands its events
    over at once (one post), not one per token."""
    from accelerate_graph.serve.assemble import assemble
    from accelerate_graph.serve.protocol import GenerationParams

    tokenizer, greedy = reference
    prompts = prompts_of_length(tokenizer, [3, 9, 5, 7, 2, 8])
    scheduler = assemble(prepared, Engine(prepared, chunk=64)).scheduler
    events = [[] for _ in prompts]
    posts = []

    def post(fn, *args):
        posts.append(len(args[0]))
        fn(*args)

    for prompt, got in zip(prompts, events):
        params = GenerationParams(prompt=prompt, max_tokens=12, temperature=0.0)
        scheduler.submit(scheduler.new_job(prompt, params, got.append, post))
    run_until_done(scheduler)
    got = [("".join(e.text for e in made if e.kind == "text"), made[-1].usage["completion_tokens"]) for made in events]
    assert got == [greedy(p, 12) for p in prompts]
    assert scheduler.metrics.steps("prefill") == 1
    assert len(posts) <= scheduler.metrics.steps("decode") + 1 and max(posts) > 1


def test_a_prompt_longer_than_a_chunk_goes_in_a_chunk_a_forward_each_counted(prepared, reference):
    """40 prompt tokens under a chunk of 16: forwards of 16, 16 and 8, each in the prefill count."""
    from accelerate_graph.serve.assemble import assemble
    from accelerate_graph.serve.protocol import GenerationParams

    tokenizer, greedy = reference
    (prompt,) = prompts_of_length(tokenizer, [40])
    scheduler = assemble(prepared, Engine(prepared, chunk=16)).scheduler
    made = []
    params = GenerationParams(prompt=prompt, max_tokens=6, temperature=0.0)
    scheduler.submit(scheduler.new_job(prompt, params, made.append, lambda fn, *args: fn(*args)))
    run_until_done(scheduler)
    assert ("".join(e.text for e in made if e.kind == "text"), made[-1].usage["completion_tokens"]) == greedy(prompt, 6)
    assert scheduler.metrics.steps("prefill") == 3


def run_until_done(scheduler) -> None:
    """The engine thread started on the requests submitted, until each has finished, then closed."""
    scheduler.start()
    try:
        assert wait_until(lambda: scheduler.in_flight() == 0, 60)
    finally:
        scheduler.close()


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


def test_a_client_that_leaves_mid_stream_leaves_the_others_decoding(prepared):
    with running(prepared, slowed(Engine(prepared))) as (url, service):
        scheduler = service.scheduler
        leaving = client(url).completions.create(
            model=service.served.name, prompt="def main(", max_tokens=100, temperature=0, stream=True
        )
        next(iter(leaving))
        staying = client(url).completions.create(
            model=service.served.name, prompt="import os", max_tokens=30, temperature=0, stream=True
        )
        chunks = iter(staying)
        next(chunks)
        assert scheduler.rows_in_use() == 2
        leaving.close()
        rest = list(chunks)  # the one that stayed decodes on to its length, never a failed step
        assert rest[-1].choices[0].finish_reason == "length"
        assert wait_until(lambda: scheduler.metrics.requests["cancelled"] == 1)
        assert scheduler.metrics.requests["ok"] == 1 and scheduler.metrics.requests["error"] == 0


def test_a_failed_step_fails_only_its_requests_and_the_server_goes_on(prepared, reference):
    tokenizer, greedy = reference
    (long_prompt,) = prompts_of_length(tokenizer, [80])  # five chunks of 16: prefilling while the step fails
    engine = slowed(Engine(prepared, chunk=16))
    admit, prefill, decode = engine.admit, engine.prefill, engine.decode
    seen = {"long_row": None, "armed": False, "fired": False}

    def admitting(tokens):
        row = admit(tokens)
        if list(tokens) == long_prompt:
            seen["long_row"] = row
        return row

    def prefilling(rows):
        seen["armed"] |= seen["long_row"] in rows
        return prefill(rows)

    def decoding(rows, tokens):
        if seen["armed"] and not seen["fired"]:
            seen["fired"] = True
            raise RuntimeError("the graph replay failed (injected)")
        return decode(rows, tokens)

    engine.admit, engine.prefill, engine.decode = admitting, prefilling, decoding
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
