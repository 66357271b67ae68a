"""Load on `cugraph-accel serve`, and the same requests through two other ways, at several client counts.

Modes (--modes, any of):
  server    `cugraph-accel serve MODEL` started here (or --url, one already running); N clients each stream
            completions one after another through the OpenAI API (token-id prompts, greedy), in one event
            loop or spread over --client-processes
  hf-batch  transformers' continuous batching, `model.generate_batch` (as installed), all requests at once
            (each call sizes its own cache manager, inside its time; a warm-up call first)
  generate  our fixed-batch generate: the captured graphs, N prompts a batch, one batch after another
  engine    the server's engine alone (no HTTP, no scheduler): N rows prefilled, then decode steps of all N
            through the per-row graphs the server replays, each timed (device events on CUDA): the step the
            server's turn could reach, beside generate's step of the same bucket

Each row: requests, generated tokens, tokens/s over the wall time, time to first token and inter-token latency
p50/p99 (a server's gaps between streamed chunks; generate_batch's token timestamps; generate's step times).
Prompt and output lengths are drawn uniformly within +-spread of their means (seeded). A server's rows also
carry its own count of the load (from /metrics): decode steps, their mean time, the device's part of it and
their rows, prefill forwards and their mean time, and the share of the time the engine thread waited for the
device: near 0 means the host's work per step, not the GPU, sets the pace.

  python3 benchmarks/serve_load.py recipes/llama-3.1-8b.yaml --fuse --clients 1,8,32,64 --prompt-len 128 \\
      --output-len 128 --json serve-load.json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODES = ("server", "hf-batch", "generate", "engine")


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def workload(count: int, args, vocab: int, seed: int) -> list[tuple[list[int], int]]:
    """`count` (prompt ids, output length) pairs: ids drawn from the vocabulary's first quarter past the
    specials, lengths uniform within the spreads."""
    draw = random.Random(seed)

    def length(mean: int, spread: int) -> int:
        return max(1, mean + draw.randint(-spread, spread))

    top = max(16, vocab // 4)
    return [
        ([draw.randrange(8, top) for _ in range(length(args.prompt_len, args.prompt_spread))],
         length(args.output_len, args.output_spread))
        for _ in range(count)
    ]  # fmt: skip


def row(clients: int, requests: int, tokens: int, seconds: float, ttft: list[float], itl: list[float]) -> dict:
    return {
        "clients": clients,
        "requests": requests,
        "tokens": tokens,
        "seconds": round(seconds, 3),
        "tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else None,
        "ttft_ms_p50": _ms(percentile(ttft, 50)),
        "ttft_ms_p99": _ms(percentile(ttft, 99)),
        "itl_ms_p50": _ms(percentile(itl, 50)),
        "itl_ms_p99": _ms(percentile(itl, 99)),
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


# server -----------------------------------------------------------------------------------------------------


def start_server(args) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, "-m", "cli", "serve", args.model, "--port", "0", "--max-batch", str(max(args.clients))]
    command += ["--max-cache-len", str(args.max_cache_len), "--queue", str(max(args.clients) * 4)]
    command += ["--fuse"] if args.fuse else []
    command += ["--prefill-chunk", str(args.prefill_chunk)] if args.prefill_chunk else []
    for assignment in args.set or []:
        command += ["--set", assignment]
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"}
    )
    deadline = time.monotonic() + args.server_timeout
    for line in process.stdout:
        print(line, end="", flush=True)
        if line.startswith("serving ") and " on http://" in line:
            return process, line.split(" on ", 1)[1].split()[0].removesuffix("/v1")
        if time.monotonic() > deadline:
            break
    process.kill()
    raise SystemExit(f"the server did not start (exit {process.wait()})")


async def _client_samples(url: str, name: str, work: list, clients: int) -> dict:
    """`clients` concurrent streams over `work` in this process's event loop: their time to first token and
    inter-token gaps (s), generated tokens, and when the load began and ended (time.monotonic, which every
    process on the machine shares)."""
    import openai

    api = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
    pending = list(reversed(work))
    samples = {"ttft": [], "itl": [], "tokens": 0}

    async def client():
        while pending:
            prompt, new = pending.pop()
            sent = time.monotonic()
            last = None
            stream = await api.completions.create(
                model=name, prompt=prompt, max_tokens=new, temperature=0, stream=True,
                stream_options={"include_usage": True},
            )  # fmt: skip
            async for chunk in stream:
                now = time.monotonic()
                if chunk.usage is not None:
                    samples["tokens"] += chunk.usage.completion_tokens
                if chunk.choices and chunk.choices[0].text:
                    if last is None:
                        samples["ttft"].append(now - sent)
                    else:
                        samples["itl"].append(now - last)
                    last = now

    samples["began"] = time.monotonic()
    try:
        await asyncio.gather(*(client() for _ in range(clients)))
    finally:
        await api.close()  # inside this event loop: its connections cannot close after asyncio.run ends
    samples["ended"] = time.monotonic()
    return samples


def _client_process(url: str, name: str, work: list, clients: int, ready, go, out) -> None:
    """One process of a spread load: imports first, then waits with the others for `go`."""
    import openai  # noqa: F401 - the import's second, before the clock starts

    ready.put(True)
    go.wait()
    out.put(asyncio.run(_client_samples(url, name, work, clients)))


def client_load(url: str, name: str, work: list, clients: int, processes: int = 1) -> dict:
    """The load's row: `clients` streams, spread over up to `processes` client processes (one event loop
    streaming thousands of chunks a second becomes the bottleneck it measures), each with its share of the
    clients and of the requests, all started together."""
    processes = max(1, min(processes, clients))
    if processes == 1:
        parts = [asyncio.run(_client_samples(url, name, work, clients))]
    else:
        import multiprocessing

        context = multiprocessing.get_context("spawn")  # no copy of this process's threads or CUDA state
        ready, go, out = context.Queue(), context.Event(), context.Queue()
        children = [
            context.Process(
                target=_client_process,
                args=(url, name, work[i::processes], clients // processes + (i < clients % processes), ready, go, out),
            )
            for i in range(processes)
        ]
        for child in children:
            child.start()
        for _ in children:
            ready.get(timeout=120)
        go.set()
        parts = [out.get(timeout=3600) for _ in children]
        for child in children:
            child.join(60)
    seconds = max(p["ended"] for p in parts) - min(p["began"] for p in parts)
    ttft = [t for p in parts for t in p["ttft"]]
    itl = [t for p in parts for t in p["itl"]]
    return row(clients, len(work), sum(p["tokens"] for p in parts), seconds, ttft, itl)


def server_mode(args, vocab: int) -> list[dict]:
    process, url = (None, args.url) if args.url else start_server(args)
    try:
        import urllib.request

        with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as answer:
            name = json.loads(answer.read())["data"][0]["id"]
        client_load(url, name, workload(2, args, vocab, 99), 2)  # warm-up
        rows = []
        for clients in args.clients:
            work = workload(clients * args.per_client, args, vocab, clients)
            before = _server_counts(url)
            rows.append(client_load(url, name, work, clients, args.client_processes))
            rows[-1].update(_server_steps(before, _server_counts(url), rows[-1]["seconds"]))
            print("server", rows[-1], flush=True)
        return rows
    finally:
        if process is not None:
            process.send_signal(signal.SIGTERM)
            process.wait(60)


def _server_counts(url: str) -> dict[str, float]:
    """The server's step counters from /metrics: step seconds' sums and counts by kind, the device's seconds by
    kind, the engine thread's wait and the occupancy sum."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    counts = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        for kind in ("decode", "prefill"):
            for part in ("sum", "count"):
                if name == f'cugraph_accel_serve_step_seconds_{part}{{kind="{kind}"}}':
                    counts[f"{kind}_{part}"] = float(value)
            if name == f'cugraph_accel_serve_device_seconds_total{{kind="{kind}"}}':
                counts[f"{kind}_device"] = float(value)
        if name == "cugraph_accel_serve_engine_wait_seconds_total":
            counts["engine_wait"] = float(value)
        if name in ("cugraph_accel_serve_batch_occupancy_sum", "cugraph_accel_serve_max_rows"):
            counts[name.rsplit("_serve_", 1)[1]] = float(value)
    return counts


def _server_steps(before: dict[str, float], after: dict[str, float], wall: float) -> dict:
    """What the server counted between two scrapes (`wall` seconds apart, about): its decode steps (mean ms,
    mean device ms, mean rows), prefill forwards, and the share of the time its engine thread waited for the
    device (the rest: host work)."""
    steps = {kind: after[f"{kind}_count"] - before[f"{kind}_count"] for kind in ("decode", "prefill")}

    def mean_ms(kind: str, series: str = "sum") -> float | None:
        seconds = after.get(f"{kind}_{series}", 0.0) - before.get(f"{kind}_{series}", 0.0)
        return round(seconds / steps[kind] * 1000, 2) if steps[kind] else None

    occupancy = after["batch_occupancy_sum"] - before["batch_occupancy_sum"]
    return {
        "decode_steps": int(steps["decode"]),
        "decode_step_ms": mean_ms("decode"),
        "rows_per_step": round(occupancy * after["max_rows"] / steps["decode"], 2) if steps["decode"] else None,
        "decode_device_ms": mean_ms("decode", "device"),
        "prefills": int(steps["prefill"]),
        "prefill_ms": mean_ms("prefill"),
        "prefill_device_ms": mean_ms("prefill", "device"),
        "engine_wait_share": round((after.get("engine_wait", 0.0) - before.get("engine_wait", 0.0)) / wall, 3)
        if wall > 0
        else None,
    }


# transformers' generate_batch -------------------------------------------------------------------------------


def hf_batch_mode(args, loaded) -> list[dict]:
    from transformers import GenerationConfig

    model = loaded.model
    rows = []
    for clients in args.clients:
        work = workload(clients * args.per_client, args, _vocab(model), clients)
        config = GenerationConfig(max_new_tokens=max(new for _, new in work), do_sample=False, eos_token_id=None)
        model.generate_batch([ids for ids, _ in work[:clients]], generation_config=config)  # warm-up: kernels, graphs
        started = time.perf_counter()
        outputs = model.generate_batch([ids for ids, _ in work], generation_config=config, record_timestamps=True)
        seconds = time.perf_counter() - started
        ttft, itl, tokens = [], [], 0
        for output in outputs.values():
            stamps = output.timestamps or []
            tokens += len(output.generated_tokens)
            if stamps:
                ttft.append(stamps[0] - output.created_time)
                itl += [b - a for a, b in zip(stamps, stamps[1:])]
        rows.append(row(clients, len(work), tokens, seconds, ttft, itl))
        print("hf-batch", rows[-1], flush=True)
    return rows


# the server's engine alone ----------------------------------------------------------------------------------


def capture_request(args, chosen, per_row: bool = False):
    """What engine and generate capture: the recipe at a bucket per client count; per-row graphs as `serve`'s."""
    from accelerate_graph.pipeline import CaptureRequest

    request = CaptureRequest(
        model=args.model, buckets=tuple(sorted(set(args.clients))), max_cache_len=args.max_cache_len,
        fuse=args.fuse, settings=chosen,
    )  # fmt: skip
    request.per_row = per_row
    return request


def engine_mode(args, chosen) -> list[dict]:
    """Per client count N: N prompts admitted and prefilled (as few forwards as the engine's chunk allows), then
    `output_len` decode steps of all N rows through the per-row graphs, greedy, each step timed alone: on CUDA by
    events around it, with no host read in the loop, so the host runs ahead and each interval is the device's."""
    import torch

    from accelerate_graph.pipeline import prepare
    from accelerate_graph.serve.engine import SlotEngine

    prepared = prepare(capture_request(args, chosen, per_row=True))
    engine = SlotEngine(prepared, settings=chosen, **({"chunk": args.prefill_chunk} if args.prefill_chunk else {}))
    cuda = prepared.session.device.type == "cuda"
    rows = []
    for clients in args.clients:
        work = workload(clients, args, engine.vocab_size, clients)
        ids = [engine.admit(prompt) for prompt, _ in work]
        started = time.perf_counter()
        logits, forwards = {}, 0
        while pending := [r for r in ids if r not in logits]:
            for group in engine.prefill_groups(pending):
                out = engine.prefill(group)
                forwards += 1
                logits.update({r: out[i] for i, r in enumerate(group) if engine.next_chunk(r) == 0})
        tokens = torch.stack([logits[r] for r in ids]).argmax(-1)
        issued = time.perf_counter() - started  # the host's time to queue the prefills: near `prefilled`, host-bound
        if cuda:
            torch.cuda.synchronize()  # the first tokens exist: the time to them, not to their launch
        prefilled = time.perf_counter() - started
        steps = min(args.output_len, engine.max_len - max(len(prompt) for prompt, _ in work)) - 1
        times = []
        for _ in range(steps):
            if cuda:
                marks = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                marks[0].record()
                tokens = engine.decode(ids, tokens).argmax(-1)
                marks[1].record()
                times.append(marks)
            else:
                begun = time.perf_counter()
                tokens = engine.decode(ids, tokens).argmax(-1)
                times.append(time.perf_counter() - begun)
        if cuda:
            torch.cuda.synchronize()
            times = [a.elapsed_time(b) / 1000 for a, b in times]
        total = time.perf_counter() - started
        for r in ids:
            engine.release(r)
        rows.append(row(clients, clients, clients * (steps + 1), total, [prefilled] * clients, times))
        rows[-1] |= {"prefill_forwards": forwards, "prefill_issue_ms": _ms(issued)}
        print("engine", rows[-1], flush=True)
    del engine, prepared
    torch.compiler.reset()  # compiled layers hold the model: its weights go back before generate loads its own
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return rows


# our fixed-batch generate -----------------------------------------------------------------------------------


def generate_mode(args, prepared) -> list[dict]:
    from accelerate_graph.generate.prompts import Tokens
    from accelerate_graph.generate.run import GenerateJob, run_generate
    from accelerate_graph.generate.sampling import Sampling

    rows = []
    for clients in args.clients:
        work = workload(clients * args.per_client, args, prepared.session.vocab_size, clients)
        warm = work[:clients]  # a batch of this size once first: its graphs and choice graphs captured
        run_generate(prepared.graphs, GenerateJob(Tokens([ids for ids, _ in warm], None), 2, Sampling()))
        ttft, itl, tokens = [], [], 0
        started = time.perf_counter()
        for first in range(0, len(work), clients):
            batch = work[first : first + clients]
            job = GenerateJob(Tokens([ids for ids, _ in batch], None), max(new for _, new in batch), Sampling())
            generation = run_generate(prepared.graphs, job)
            tokens += generation.new_tokens
            ttft += [generation.first_token_seconds] * len(batch)
            itl += [ms / 1000 for ms in generation.step_ms]
        rows.append(row(clients, len(work), tokens, time.perf_counter() - started, ttft, itl))
        print("generate", rows[-1], flush=True)
    return rows


def _vocab(model) -> int:
    return int(model.get_output_embeddings().weight.shape[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--modes", default="server,hf-batch,generate")
    parser.add_argument("--clients", default="1,8,32,64")
    parser.add_argument("--per-client", type=int, default=4, help="requests per client at each client count")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--prompt-spread", type=int, default=0)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--output-spread", type=int, default=0)
    parser.add_argument("--max-cache-len", type=int, default=1024)
    parser.add_argument("--fuse", action="store_true")
    parser.add_argument(
        "--prefill-chunk", type=int, help="the server's and the engine's --prefill-chunk (default: their own)"
    )
    parser.add_argument("--set", action="append", metavar="NAME=VALUE")
    parser.add_argument(
        "--client-processes",
        type=int,
        default=1,
        help="spread the clients over this many processes (mode server; at most one a client)",
    )
    parser.add_argument("--url", help="an already running server (mode server)")
    parser.add_argument("--server-timeout", type=float, default=480, help="seconds the server may take to start")
    parser.add_argument("--json")
    args = parser.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    if args.client_processes < 1:
        parser.error(f"--client-processes {args.client_processes}: give 1 or more")
    modes = args.modes.split(",")
    if unknown := set(modes) - set(MODES):
        parser.error(f"unknown mode(s) {', '.join(sorted(unknown))}; modes: {', '.join(MODES)}")
    longest = args.prompt_len + args.prompt_spread + args.output_len + args.output_spread
    if longest > args.max_cache_len:
        parser.error(
            f"a request of up to {longest} tokens (prompt and output with their spreads) does not fit a cache of "
            f"{args.max_cache_len} slots; raise --max-cache-len or shorten the requests"
        )
    from accelerate_graph.common.errors import CugraphAccelError
    from cli.errors import flag

    try:
        measure(args, modes)
    except CugraphAccelError as err:  # a model, recipe or setting the package refuses: its one line
        parser.exit(1, f"serve_load.py: {err.render(flag)}\n")


def measure(args, modes: list[str]) -> None:
    """Each mode in turn, then the table (and --json)."""
    results = {"model": args.model, "fuse": args.fuse, "prompt_len": args.prompt_len, "output_len": args.output_len}
    prepared = None
    from accelerate_graph import settings

    chosen = settings.resolve(settings.parse_assignments(args.set or []))
    if "engine" in modes:  # first, and its graphs freed: generate captures its own after it
        results["engine"] = engine_mode(args, chosen)
    if "generate" in modes or "hf-batch" in modes:
        from accelerate_graph.pipeline import prepare

        prepared = prepare(capture_request(args, chosen)) if "generate" in modes else None
    if "server" in modes:
        vocab = prepared.session.vocab_size if prepared else _peek_vocab(args.model)
        results["server"] = server_mode(args, vocab)
    if "generate" in modes:
        results["generate"] = generate_mode(args, prepared)
    if "hf-batch" in modes:
        import torch

        from accelerate_graph.common.devices import resolve_device, resolve_dtype
        from accelerate_graph.models.loading import load_model

        if prepared is not None:  # the graphs' memory goes back before HF's manager sizes its cache
            del prepared
            torch.cuda.empty_cache() if torch.cuda.is_available() else None
        device = resolve_device("auto")
        loaded = load_model(args.model, device, resolve_dtype("auto", device), "sdpa", None)
        results["hf-batch"] = hf_batch_mode(args, loaded)
    _table(results, modes)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


def _peek_vocab(model: str) -> int:
    from accelerate_graph.models.limits import peek_config

    config = peek_config(model, None)
    return int(getattr(config, "vocab_size", 32000)) if config is not None else 32000


def _table(results: dict, modes: list[str]) -> None:
    print(f"{'mode':<9} {'clients':>7} {'requests':>8} {'tokens':>7} {'tok/s':>8} {'TTFT p50':>9} {'p99':>8} "
          f"{'ITL p50':>8} {'p99':>8}  (ms)")  # fmt: skip
    for mode in modes:
        for r in results.get(mode, []):
            cells = [r["ttft_ms_p50"], r["ttft_ms_p99"], r["itl_ms_p50"], r["itl_ms_p99"]]
            shown = " ".join(f"{'-' if c is None else f'{c:.1f}':>8}" for c in cells)
            print(
                f"{mode:<9} {r['clients']:>7} {r['requests']:>8} {r['tokens']:>7} "
                f"{r['tokens_per_s'] or 0:>8.1f} {shown}"
            )
    for r in results.get("engine", []):  # TTFT above is all of the rows' prefill: how much the host took to queue
        print(f"engine: {r['clients']} rows prefilled by {r['prefill_forwards']} forward(s) in {r['ttft_ms_p50']} ms, "
              f"{r['prefill_issue_ms']} ms of it the host's to queue them")  # fmt: skip
    if results.get("server"):
        print(f"{'server':<9} {'clients':>7} {'steps':>8} {'step ms':>8} {'device':>7} {'rows':>6} {'prefills':>8} "
              f"{'ms':>8} {'device':>7} {'waits':>6}  (the server's own count: decode steps and prefill forwards, "
              "the device's part of them, the engine thread's share of time waiting for it)")  # fmt: skip
        for r in results["server"]:
            keys = (
                "decode_step_ms",
                "decode_device_ms",
                "rows_per_step",
                "prefills",
                "prefill_ms",
                "prefill_device_ms",
            )
            cells = ["-" if r.get(key) is None else r[key] for key in keys]
            wait = r.get("engine_wait_share")
            print(
                f"{'':<9} {r['clients']:>7} {r['decode_steps']:>8} {cells[0]:>8} {cells[1]:>7} {cells[2]:>6} "
                f"{cells[3]:>8} {cells[4]:>8} {cells[5]:>7} {'-' if wait is None else f'{wait:.0%}':>6}"
            )


if __name__ == "__main__":
    main()
