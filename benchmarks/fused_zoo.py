"""The fused layers (`--fuse`) on every zoo type with a whole-step plan, against the eager step.

For each type: build its tiny random model, open a static-cache session, keep it if `--mode auto` plans
one whole graph, then run decode steps at batches 4, 2, 1 and 3 over several context buckets through
`FusedForward` and through the eager model, from the same cache state, and compare the logits. Prints
one line per type (ok / MISMATCH / refused or failed with the reason) and writes JSON to --json.

CPU: PYTHONPATH=. python3 benchmarks/fused_zoo.py --backend aot_eager [TYPE ...]   (about 6 minutes)
"""

from __future__ import annotations

import argparse
import json
import signal
import warnings

import torch

from accelerate_graph.compat.transformers_internals import attention_implementation
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.fused.grouped_attention import use_grouped_attention
from accelerate_graph.fused.layers import FusedForward
from accelerate_graph.pipeline import decide_regions
from accelerate_graph.zoo.configs import quiet, tiny_config
from accelerate_graph.zoo.model_types import zoo_model_types
from accelerate_graph.zoo.run import _build

CASES = [(4, 64), (2, 32), (1, 32), (1, 64), (3, 16)]  # (batch, context slots); the cache holds 64


class _Timeout(Exception):
    pass


def _alarm(*_) -> None:
    raise _Timeout()


def check(model_type: str, backend: str, device: torch.device) -> str:
    with quiet():
        model = _build(tiny_config(model_type), device, torch.float32)
        session = DecodeSession(model, 4, 64)
        decision = decide_regions(session, "auto", 1)
        if decision.regions.mode != "full":
            return f"skipped: plan {decision.regions.mode}"
        if attention_implementation(model.config) == "sdpa":
            use_grouped_attention(model)
        torch.compiler.reset()
        fused = FusedForward(model, backend=backend)
        prompt = torch.randint(0, min(session.vocab_size, 100), (4, 6), device=device)
        got, expected = session.first_steps(prompt, CASES, fused), session.first_steps(prompt, CASES)
    diff = max((a - b).abs().max().item() for a, b in zip(got, expected))
    scale = max(max(b.abs().max().item() for b in expected), 1.0)
    verdict = "ok" if diff <= 1e-4 * scale else "MISMATCH"
    return f"{verdict}: max diff {diff:.1e}, {fused.graphs} graphs, {fused.recompiles} recompilations"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("types", nargs="*", help="model types (default: the whole zoo)")
    parser.add_argument("--backend", default="aot_eager", help="torch.compile backend (inductor is slow on the CPU)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    signal.signal(signal.SIGALRM, _alarm)
    results = {}
    for model_type in args.types or zoo_model_types():
        signal.alarm(120)
        try:
            results[model_type] = check(model_type, args.backend, torch.device(args.device))
        except _Timeout:
            results[model_type] = "failed: timed out"
        except Exception as err:  # noqa: BLE001 - one line per type, whatever went wrong
            results[model_type] = f"failed: {type(err).__name__}: {' '.join(str(err).split())[:240]}"
        finally:
            signal.alarm(0)
        print(f"{model_type}: {results[model_type]}", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
