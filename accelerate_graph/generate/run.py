"""`generate`: prompts in, text out, through a prepared session's graphs, with a report for --json."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.generate.loop import Generation, NativeLoop, OnTokens, check_fits
from accelerate_graph.generate.prompts import Tokens
from accelerate_graph.generate.sampling import Sampling
from accelerate_graph.generate.timing import percentiles


def _as_list(value) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def special_ids(model, tokenizer) -> tuple[list[int], int]:
    """End-of-sequence ids (the generation config's, else the tokenizer's) and the pad id."""
    config = getattr(model, "generation_config", None)
    eos = _as_list(getattr(config, "eos_token_id", None)) or _as_list(getattr(tokenizer, "eos_token_id", None))
    pad = getattr(config, "pad_token_id", None)
    if pad is None:
        pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        pad = eos[0] if eos else 0
    return eos, int(pad)


@dataclass
class GenerateJob:
    tokens: Tokens
    max_new_tokens: int
    sampling: Sampling
    check_every: int = 8


def check_job(job: GenerateJob, cache_len: int, vocab_size: int) -> None:
    """Every prompt must fit the cache with its new tokens, and hold only ids the model knows:
    refused before any decoding."""
    for number, ids in enumerate(job.tokens.ids, 1):
        if max(ids) >= vocab_size:
            raise BadOptionError(
                f"prompt {number} holds token id {max(ids)}; the model's vocabulary has {vocab_size} ids.",
                f"Use ids below {vocab_size}.",
            )
        try:
            check_fits(len(ids), job.max_new_tokens, cache_len)
        except BadOptionError as err:
            raise BadOptionError(f"prompt {number}: {err.message}", err.hint) from err


def run_generate(
    graphs, job: GenerateJob, on_tokens: OnTokens | None = None, on_rows: Callable[[int], None] | None = None
) -> Generation:
    if graphs is None:
        raise BadOptionError("this model's plan runs the decode step eagerly: there are no graphs to generate with.")
    check_job(job, graphs.session.max_cache_len, graphs.session.vocab_size)
    eos, pad = special_ids(graphs.session.model, job.tokens.tokenizer)
    loop = NativeLoop(graphs, job.sampling, eos, pad, job.check_every)
    return loop.generate(job.tokens.ids, job.max_new_tokens, on_tokens, on_rows)


def generation_report(generation: Generation, tokens: Tokens, job: GenerateJob) -> dict:
    """What --json writes: per prompt its ids and text; the run's timing."""
    return {
        "max_new_tokens": job.max_new_tokens,
        "sampling": vars(job.sampling),
        "time_to_first_token_s": generation.first_token_seconds,
        "first_token_unix": generation.first_token_unix,
        "seconds": generation.seconds,
        "new_tokens": generation.new_tokens,
        "tokens_per_second": generation.tokens_per_second,
        "step_ms": percentiles(generation.step_ms),
        "steps": len(generation.step_ms),
        "host_ms_per_step": generation.host_ms_per_step,
        "outputs": [
            {"prompt_ids": row.prompt, "token_ids": row.tokens, "text": tokens.decode(row.tokens)}
            for row in generation.rows
        ],
    }
