"""How the end-to-end contenders of `generate` (registered in bench/contenders/) are timed:
whole calls, per new token, like hf-generate:

- generate: our native loop (eager prefill, graph replays, the next token chosen on the device);
- drop-in: the model's own HF `generate()` after `accelerate()` (graphs captured anew for it);
- hf-eager: HF `generate()` as it comes (dynamic cache, no compile).

Each row's setup is what a user waits for before the first call returns: the capture of the graphs
the call uses (none for hf-eager) plus the first call itself, so tokens/s and first-call time include
capture. Each call makes exactly the requested new tokens (no end-of-sequence stop).
"""

from __future__ import annotations

import time

import torch

from accelerate_graph.bench.generate import GENERATE_REPEATS, _generate_prompt, _generate_row, new_token_budget
from accelerate_graph.bench.timing import wall_seconds
from accelerate_graph.core.decode_session import PAD_TOKEN


def _timed_rows(name: str, call, setup_seconds: float, session, bucket, prompt_len, count, floor_ms):
    first = setup_seconds + wall_seconds(call, session.device)
    seconds = [wall_seconds(call, session.device) for _ in range(GENERATE_REPEATS)]
    return _generate_row(name, seconds, first, session.max_cache_len, prompt_len, bucket, floor_ms, count)


def bench_native_generate(
    graphs,
    bucket: int,
    prompt_len: int,
    new_tokens: int,
    floor_ms: float,
    seed: int = 0,
    name: str = "generate",
    notes: list[str] | None = None,
):
    """Row `name` ("generate", or "generate-fused" over fused graphs): the native loop; setup = this
    bucket's capture. `notes` gets the host time per step next to the device's step time."""
    from accelerate_graph.generate.loop import NativeLoop

    session = graphs.session
    count = new_token_budget(session.max_cache_len, prompt_len, new_tokens)
    prompts = _generate_prompt(session, bucket, prompt_len, seed).tolist()
    loop = NativeLoop(graphs, pad_id=PAD_TOKEN)  # no EOS: every call makes `count` tokens
    last = []
    row = _timed_rows(
        name,
        lambda: last.append(loop.generate(prompts, count)),
        graphs.bucket_seconds(bucket),
        session,
        bucket,
        prompt_len,
        count,
        floor_ms,
    )
    session.kv.reset()
    if notes is not None and last and last[-1].step_ms:
        steps = sorted(last[-1].step_ms)
        notes.append(
            f"{name} batch {bucket}: host {last[-1].host_ms_per_step:.3f} ms to issue a step, device step "
            f"p50 {steps[len(steps) // 2]:.3f} ms"
        )
    return row


def _hf_call(model, prompt: torch.Tensor, count: int):
    mask = torch.ones_like(prompt)

    def call():
        with torch.no_grad():
            return model.generate(
                input_ids=prompt,
                attention_mask=mask,
                max_new_tokens=count,
                min_new_tokens=count,
                do_sample=False,
                pad_token_id=PAD_TOKEN,
            )

    return call


def bench_drop_in(
    plan, session, bucket: int, new_tokens: int, floor_ms: float, seed: int = 0, emulate=False, fuse=False
):
    """Row "drop-in" ("drop-in-fused" with `fuse`): `accelerate()` on the session's model for this one
    bucket (its capture, and compile, are the setup), then the model's own generate(); undone after."""
    from accelerate_graph.generate.dropin import accelerate

    prompt_len = plan.prompt_len
    count = new_token_budget(plan.max_cache_len, prompt_len, new_tokens)
    prompt = _generate_prompt(session, bucket, prompt_len, seed)
    start = time.perf_counter()
    handle = accelerate(
        session.model,
        buckets=(bucket,),
        max_cache_len=plan.max_cache_len,
        contexts=tuple(plan.contexts),
        fuse=fuse,
        emulate=emulate,
    )
    setup = time.perf_counter() - start
    try:
        return _timed_rows(
            "drop-in-fused" if fuse else "drop-in",
            _hf_call(session.model, prompt, count),
            setup,
            session,
            bucket,
            prompt_len,
            count,
            floor_ms,
        )
    finally:
        handle.undo()


def bench_hf_eager(session, bucket: int, prompt_len: int, new_tokens: int, floor_ms: float, seed: int = 0):
    """Row "hf-eager": HF generate() with its default dynamic cache, nothing compiled."""
    count = new_token_budget(session.max_cache_len, prompt_len, new_tokens)
    prompt = _generate_prompt(session, bucket, prompt_len, seed)
    return _timed_rows(
        "hf-eager", _hf_call(session.model, prompt, count), 0.0, session, bucket, prompt_len, count, floor_ms
    )
