"""The server of the tests (conftest's engine over the trained tiny llama) as a process of its own, for what a
thread cannot show: SIGTERM. Prints `listening PORT` once it accepts requests, `stopped` after the drain."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1])]

import torch  # noqa: E402
from serving import BUCKETS, CACHE_LEN, TRAINED_TINY, Engine  # noqa: E402

from accelerate_graph.pipeline import CaptureRequest, prepare  # noqa: E402
from accelerate_graph.serve.assemble import assemble  # noqa: E402
from accelerate_graph.serve.server import serve  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--drain-s", type=float, default=30.0)
    parser.add_argument("--step-s", type=float, default=0.0, help="added to every decode step")
    args = parser.parse_args()
    torch.set_num_threads(1)
    request = CaptureRequest(model=str(TRAINED_TINY), device="cpu", buckets=BUCKETS, max_cache_len=CACHE_LEN)
    request.per_row = True
    prepared = prepare(request)
    engine = Engine(prepared, chunk=16)
    decode = engine.decode
    engine.decode = lambda rows, tokens: (time.sleep(args.step_s), decode(rows, tokens))[1]
    service = assemble(prepared, engine)
    serve(
        service.app,
        service.scheduler,
        "127.0.0.1",
        0,
        args.drain_s,
        lambda port: print(f"listening {port}", flush=True),
    )
    print("stopped", flush=True)


if __name__ == "__main__":
    main()
