"""What feeding a step its inputs costs between two replays (docs/PERF.md, stop 31). The batch-1 timelines of
stop 30 show one gap of ~8 us a step, between the last kernel of a replay and the first of the next; the
timeline leaves copies out, and `DecodeGraphs.run` copies the tokens and the positions into the graph's
buffers before each replay (two device-to-device copies). Each way is timed back to back in one process:

  run            graphs.run(tokens, positions): both inputs fed, then the replay (what bench and profile time);
                 since stop 32 one kernel copies both (compat torch_internals.copy_each)
  two copies     the tokens' copy and the positions', one kernel each (run until stop 31), then the replay
  tokens only    the tokens' copy, then the replay (the positions walk on inside the graph)
  loaded         the replay alone, its inputs already in the buffers (what generate's greedy loop does: its
                 choice graph writes the next token and position in place)

Measured (H200, 2026-12-02, stop 31, best of 3, ms): the 1B at 16,384 batch 1 run 0.8054, tokens only 0.8028,
loaded 0.8011; batch 8 1.0045 / 1.0018 / 0.9995; Qwen at 1,024 batch 1 0.6264 / 0.6242 / 0.6207, batch 8
0.7790 / 0.7765 / 0.7733. The two copies cost ~4.3 us a step (about half of the gap); the rest of the gap is
the graph's launch. Stop 32 (one kernel feeding both, `run`, against `two copies`): the 1B 0.8083 / 0.8103, Qwen
0.5925 / 0.5945, the 8B at 1,024 3.9724 / 3.9793.

Run on a GPU: PYTHONPATH=. python3 benchmarks/input_feed.py llama-3.2-1b:16384 qwen2.5-0.5b --batches 1,8
"""

from __future__ import annotations

import argparse

import torch

from accelerate_graph.pipeline import CaptureRequest, prepare
from benchmarks.profile_step import rewound_ms


def ways(graphs, session, batch: int):
    """{way: one replay with its feeding}, for `batch` rows at the bucket holding it."""
    tokens = torch.randint(session.vocab_size, (batch,), device=session.device)
    positions = torch.full((batch,), session.kv.next_slot, device=session.device)

    def two_copies():  # what load_inputs did before stop 32
        session.input_ids[:batch, 0].copy_(tokens)
        session.position_ids[:batch, 0].copy_(positions)
        graphs.replay_loaded(batch)

    def tokens_only():
        session.input_ids[:batch, 0].copy_(tokens)
        graphs.replay_loaded(batch)

    return {
        "run": lambda: graphs.run(tokens, positions, copy=False),
        "two copies": two_copies,
        "tokens only": tokens_only,
        "loaded": lambda: graphs.replay_loaded(batch),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="recipe[:cache], e.g. llama-3.2-1b:16384")
    parser.add_argument("--batches", default="1")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3, help="each way timed this many times, in turn")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    for entry in args.models:
        model, _, cache = entry.partition(":")
        request = CaptureRequest(
            model=model, buckets=batches, max_cache_len=int(cache or 1024), prompt_len=args.prompt, fuse=True
        )
        prepared = prepare(request)
        session, graphs = prepared.session, prepared.graphs
        with torch.no_grad():
            for batch in batches:
                times: dict[str, list[float]] = {}
                for _ in range(args.rounds):  # ways in turn, so a drift of clocks hits each alike
                    for name, call in ways(graphs, session, batch).items():
                        times.setdefault(name, []).append(rewound_ms(session, args.prompt, call)[0])
                cells = ", ".join(f"{name} {min(ms):.4f}" for name, ms in times.items())
                print(f"{model} cache {cache or 1024} batch {batch}: ms per step (best of {args.rounds}): {cells}")
        del prepared, session, graphs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
