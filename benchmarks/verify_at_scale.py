"""The verify criterion on a real-size model: every case's measures, then two faults injected into the
replay's logits (every logit x1.04; the top-2 swapped wherever their gap is under 4% of the top logit),
which must fail every case, with the time and peak memory the float32 reference costs.

    PYTHONPATH=. python benchmarks/verify_at_scale.py MODEL [--fuse] [--per-row] [--buckets 1,8,32] [--cache 1024]

--per-row: the graphs `serve` replays, each row writing and attending at its own position (the ragged cases
put the rows at different positions).

MODEL: a recipe name, a recipe .yaml or a model folder. Prints one line per case, then
`fault scale x1.04: caught N of N cases`, `fault top-2 swap: caught N of N cases`, and
`float32 reference: ... s per case, peak memory ... GiB (weights ... GiB)`.
"""

from __future__ import annotations

import argparse
import time

import torch

from accelerate_graph.pipeline import CaptureRequest, prepare
from accelerate_graph.verify.against_eager import verify_graphs


def swap_near_ties(logits: torch.Tensor) -> torch.Tensor:
    top = logits.topk(2, dim=-1)
    near = (top.values[..., 0] - top.values[..., 1]) < 0.04 * top.values[..., 0].abs()
    out = logits.clone()
    rows = near.nonzero().flatten()
    out[rows, top.indices[rows, 0]] = top.values[rows, 1]
    out[rows, top.indices[rows, 1]] = top.values[rows, 0]
    return out


def line(r) -> str:
    routers = f" routers {r.router_accepted}/{r.router_rejected}" if r.has_routers else ""
    return (
        f"bucket {r.bucket:>3} batch {r.batch:>3} slots {r.slots:>9}: logits L2 {r.logit_err:.2e}/{r.eager_err:.2e} "
        f"x{r.ratio:.2f} KL {r.kl:.1e}/{r.eager_kl:.1e} top-1 {r.top1:.2f}/{r.eager_top1:.2f} drift {r.drift:.1e} "
        f"cache {r.cache_err:.1e}/{r.eager_cache_err:.1e}{routers} {'pass' if r.passed else 'FAIL: ' + r.detail[:160]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--fuse", action="store_true")
    parser.add_argument("--per-row", action="store_true")
    parser.add_argument("--buckets", default="1,8,32")
    parser.add_argument("--cache", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--dtype", default="auto")
    args = parser.parse_args()
    buckets = tuple(int(b) for b in args.buckets.split(","))
    request = CaptureRequest(
        model=args.model,
        buckets=buckets,
        max_cache_len=args.cache,
        fuse=args.fuse,
        dtype=args.dtype,
        per_row=args.per_row,
    )
    prepared = prepare(request)
    graphs, prompt_len = prepared.graphs, prepared.plan.prompt_len
    weights = sum(p.numel() * p.element_size() for p in prepared.session.model.parameters())
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    rows = verify_graphs(graphs, steps=args.steps, prompt_len=prompt_len, on_row=lambda r: print(line(r), flush=True))
    seconds = (time.perf_counter() - started) / max(len(rows), 1)
    peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0
    print(f"verify: {sum(r.passed for r in rows)} of {len(rows)} cases pass")
    original = graphs.run
    for name, fault in (("scale x1.04", lambda x: x * 1.04), ("top-2 swap", swap_near_ties)):
        graphs.run = lambda tokens, positions, copy=True, _fault=fault: _fault(original(tokens, positions))
        faulty = verify_graphs(graphs, steps=args.steps, prompt_len=prompt_len)
        caught = sum(not r.passed for r in faulty)
        print(f"fault {name}: caught {caught} of {len(faulty)} cases")
        for r in faulty:
            if r.passed:
                print("  missed:", line(r))
    graphs.run = original
    print(
        f"float32 reference: {seconds:.2f} s per case (replay + eager + reference), peak memory "
        f"{peak / 2**30:.1f} GiB (weights {weights / 2**30:.1f} GiB)"
    )


if __name__ == "__main__":
    main()
