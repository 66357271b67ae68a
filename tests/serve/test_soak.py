"""A soak: thousands of short requests from 64 concurrent clients, bounded in time, leave no row taken and no
memory growing."""

from __future__ import annotations

import asyncio
import random
import time

from serving import async_client, running, wait_until

REQUESTS = 2000
CLIENTS = 64
BOUND_S = 240  # the whole soak on a shared two-core machine
RSS_GROWTH_MIB = 64  # after the warm-up: caches, pools and interned strings are full by then


def _rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


async def _load(url: str, name: str, count: int, seed: int) -> list:
    draw = random.Random(seed)
    plan = [
        (f"def f{draw.randrange(1000)}(" * draw.randint(1, 6), draw.randint(1, 4), draw.random()) for _ in range(count)
    ]
    api = async_client(url)  # its pool holds more connections than CLIENTS
    queue = list(enumerate(plan))
    results = [None] * count

    async def worker():
        while queue:
            number, (prompt, new, coin) = queue.pop()
            if coin < 0.3:
                stream = await api.completions.create(
                    model=name, prompt=prompt, max_tokens=new, temperature=0, stream=True
                )
                results[number] = [c async for c in stream][-1].choices[0].finish_reason
            else:
                done = await api.completions.create(
                    model=name, prompt=prompt, max_tokens=new, temperature=0.7, seed=number
                )
                results[number] = done.choices[0].finish_reason

    await asyncio.gather(*(worker() for _ in range(CLIENTS)))
    return results


def test_thousands_of_requests_from_64_clients_leave_no_row_and_no_memory(prepared):
    with running(prepared) as (url, service):
        name, scheduler, engine = service.served.name, service.scheduler, service.scheduler.engine
        asyncio.run(_load(url, name, 200, seed=0))  # warm-up
        before = _rss_mib()
        started = time.monotonic()
        finishes = asyncio.run(_load(url, name, REQUESTS, seed=1))
        seconds = time.monotonic() - started
        assert wait_until(lambda: scheduler.in_flight() == 0 and engine.free_rows() == engine.max_rows)
        grown = _rss_mib() - before
        metrics = scheduler.metrics
    assert set(finishes) <= {"stop", "length"} and len(finishes) == REQUESTS
    assert metrics.requests["ok"] == REQUESTS + 200 and metrics.requests["error"] == 0
    assert scheduler.rows_in_use() == 0 and scheduler.queue_length() == 0
    assert seconds < BOUND_S, f"{REQUESTS} requests took {seconds:.0f} s"
    assert grown < RSS_GROWTH_MIB, f"RSS grew {grown:.0f} MiB over {REQUESTS} requests"
    print(f"soak: {REQUESTS} requests in {seconds:.1f} s, RSS +{grown:.1f} MiB")
