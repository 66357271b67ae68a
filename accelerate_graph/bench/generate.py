"""End to end: HF `generate` with a static cache next to our own decode loop, same new tokens.

`generate(cache_implementation="static")` compiles its decode forward with
torch.compile(mode="reduce-overhead") on a GPU, so its first call pays the compilation: reported
apart, the steady rate comes from later calls. Our loop: eager prefill, then one graph replay per
new token with the argmax outside the graph. Both run the same prompts with the same cache length,
dtype and attention implementation (the same model object).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from accelerate_graph.bench.compiled_step import forget_compiled
from accelerate_graph.bench.results import GENERATE, BenchRow
from accelerate_graph.bench.timing import Latency, wall_seconds
from accelerate_graph.common.errors import UnsupportedModelError
from accelerate_graph.core.capture import DecodeGraphs
from accelerate_graph.core.decode_session import PAD_TOKEN, draw_inputs

GENERATE_REPEATS = 5  # timed calls after the first one, per contender


def new_token_budget(cache_len: int, prompt_len: int, requested: int) -> int:
    """New tokens that fit the cache: the prompt fills `prompt_len` slots, and every new token after
    the first is fed back through one more slot."""
    return max(1, min(requested, cache_len - prompt_len + 1))


def hf_generate_call(model: torch.nn.Module, prompt: torch.Tensor, new_tokens: int, cache_len: int) -> Callable:
    mask = torch.ones_like(prompt)

    def call() -> torch.Tensor:
        with torch.no_grad():
            return model.generate(
                input_ids=prompt,
                attention_mask=mask,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,  # an early EOS would shorten the work being timed
                do_sample=False,
                cache_implementation="static",
                max_cache_len=cache_len,
                pad_token_id=PAD_TOKEN,
            )

    return call


def our_loop_call(graphs: DecodeGraphs, prompt: torch.Tensor, new_tokens: int) -> Callable:
    session = graphs.session
    batch, prompt_len = prompt.shape
    # [N, b]: the position each fed-back token is written to, made once so the loop copies nothing from the host
    positions = torch.arange(prompt_len, prompt_len + new_tokens, device=session.device)[:, None].expand(-1, batch)

    def call() -> torch.Tensor:
        tokens = [session.prefill(prompt).argmax(-1)]  # [b] each
        for i in range(new_tokens - 1):
            tokens.append(graphs.run(tokens[-1], positions[i], copy=False).argmax(-1))  # argmax reads it first
        return torch.stack(tokens, dim=1)  # [b, N]

    return call


def _check_length(output: torch.Tensor, prompt_len: int, new_tokens: int) -> None:
    made = output.shape[1] - prompt_len
    if made != new_tokens:
        raise UnsupportedModelError(
            f"HF generate made {made} new tokens instead of {new_tokens}.",
            "Its timing would not be comparable; drop hf-generate from {compare}.",
        )


def _per_token(seconds: list[float], new_tokens: int) -> Latency:
    return Latency.of([s * 1000.0 / new_tokens for s in seconds])


def _generate_row(
    contender: str,
    seconds: list[float],
    first_seconds: float,
    cache_len: int,
    prompt_len: int,
    batch: int,
    floor_ms: float,
    new_tokens: int,
) -> BenchRow:
    """One end-to-end row: ms per new token of the repeated calls, the first call reported apart."""
    return BenchRow.measured(
        contender=contender,
        latency=_per_token(seconds, new_tokens),
        setup_seconds=first_seconds,
        kind=GENERATE,
        cache_len=cache_len,
        prompt_len=prompt_len,
        batch=batch,
        floor_ms=floor_ms,
        new_tokens=new_tokens,
    )


def _generate_prompt(session, bucket: int, prompt_len: int, seed: int) -> torch.Tensor:
    prompt, _ = draw_inputs(bucket, 0, prompt_len, session.vocab_size, seed + 7919 * bucket)
    return prompt.to(session.device)


def bench_our_loop(
    graphs: DecodeGraphs, bucket: int, prompt_len: int, new_tokens: int, floor_ms: float, seed: int = 0
) -> BenchRow:
    """Row "our-loop": prefill, then graph replays with argmax outside the graph; ms per new token."""
    session = graphs.session
    count = new_token_budget(session.max_cache_len, prompt_len, new_tokens)
    ours = our_loop_call(graphs, _generate_prompt(session, bucket, prompt_len, seed), count)
    ours_first = wall_seconds(ours, session.device)
    ours_seconds = [wall_seconds(ours, session.device) for _ in range(GENERATE_REPEATS)]
    session.kv.reset()
    return _generate_row(
        "our-loop", ours_seconds, ours_first, session.max_cache_len, prompt_len, bucket, floor_ms, count
    )


def bench_hf_generate(
    session, bucket: int, prompt_len: int, new_tokens: int, floor_ms: float, seed: int = 0
) -> BenchRow:
    """Row "hf-generate": HF generate with a static cache (it compiles itself), first call apart.

    Its cudagraph trees clear cuBLAS workspaces that our captured graphs point at, so no graph of
    ours may replay after this in the same process: bench runs it last."""
    prompt = _generate_prompt(session, bucket, prompt_len, seed)
    count = new_token_budget(session.max_cache_len, prompt_len, new_tokens)
    hf = hf_generate_call(session.model, prompt, count, session.max_cache_len)
    forget_compiled()  # a cold start, as a user's first call in a fresh process
    outputs: list[torch.Tensor] = []
    hf_first = wall_seconds(lambda: outputs.append(hf()), session.device)
    _check_length(outputs[0], prompt_len, count)
    hf_seconds = [wall_seconds(hf, session.device) for _ in range(GENERATE_REPEATS)]
    forget_compiled()
    return _generate_row(
        "hf-generate", hf_seconds, hf_first, session.max_cache_len, prompt_len, bucket, floor_ms, count
    )
