"""The native decode loop: eager prefill of a left-padded batch, then one graph replay per token.

Left padding keeps one write slot for the whole batch (the static cache has one position counter);
each row's attention mask hides its padding and its own position ids count only its real tokens,
as HF `generate()` does. The next token is chosen on the device, and the host reads the device only
every `check_every` steps (to stop when every row has finished and to stream text).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from accelerate_graph.common.errors import BadOptionError, NonFiniteError, option
from accelerate_graph.core.buckets import bucket_for
from accelerate_graph.core.capture import DecodeGraphs
from accelerate_graph.generate.lagged_reader import LaggedReader, Ready
from accelerate_graph.generate.sampling import Sampler, Sampling
from accelerate_graph.generate.timing import StepClock
from accelerate_graph.generate.token_choice import TokenChoice

# Streaming callback: (row index in the whole request, its new token ids since the last call).
OnTokens = Callable[[int, list[int]], None]


@dataclass
class RowResult:
    prompt: list[int]
    tokens: list[int]  # new tokens, up to and including the first end-of-sequence token


@dataclass
class Generation:
    rows: list[RowResult]
    first_token_seconds: float  # from the call to the first token of the first chunk on the host
    seconds: float
    step_ms: list[float] = field(default_factory=list)  # every decode step (graph + choice) of every chunk
    first_token_unix: float = 0.0  # wall clock at the first token: from a process's start, with capture
    host_ms_per_step: float = 0.0  # host time to issue one decode step (replays, lookups); below the step: no wait

    @property
    def new_tokens(self) -> int:
        return sum(len(r.tokens) for r in self.rows)

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


def check_fits(prompt_len: int, max_new_tokens: int, cache_len: int) -> None:
    """The prompt fills prompt_len slots and every new token but the last one more."""
    if prompt_len >= cache_len:
        raise BadOptionError(
            f"a prompt of {prompt_len} tokens leaves no room in a cache of {cache_len} slots.",
            "Shorten the prompt or capture with a larger {max_cache_len}.",
        )
    if prompt_len + max_new_tokens - 1 > cache_len:
        raise BadOptionError(
            f"{option('max_new_tokens', max_new_tokens)} after a prompt of {prompt_len} tokens needs "
            f"{prompt_len + max_new_tokens - 1} cache slots; the cache holds {cache_len}.",
            f"Lower {option('max_new_tokens')} to at most {cache_len - prompt_len + 1} or raise {option('max_cache_len')}.",
        )


class NativeLoop:
    def __init__(
        self,
        graphs: DecodeGraphs,
        sampling: Sampling = Sampling(),
        eos_ids: Sequence[int] = (),
        pad_id: int = 0,
        check_every: int = 8,
    ):
        self.graphs = graphs
        self.session = graphs.session
        self.sampler = Sampler(sampling, self.session.device)
        self._eos_ids = set(eos_ids)
        self.eos = torch.tensor(sorted(self._eos_ids), dtype=torch.long, device=self.session.device)
        self.pad_id = pad_id
        self.check_every = max(1, check_every)
        # greedy choice is captured (a graph per step graph); sampling draws fresh numbers eagerly
        self._capturing = graphs.backend if sampling.greedy else None
        self._token_choice: TokenChoice | None = None
        self.host_seconds = 0.0  # host time spent issuing decode steps (not waiting for the device), all calls

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        on_tokens: OnTokens | None = None,
        on_rows: Callable[[int], None] | None = None,
    ) -> Generation:
        """Generate for every prompt, in chunks of the largest bucket."""
        if max_new_tokens < 1:
            raise BadOptionError(f"{option('max_new_tokens', max_new_tokens)} is invalid.", "Use at least 1.")
        for i, prompt in enumerate(prompts):
            if len(prompt) == 0:
                raise BadOptionError(f"prompt {i + 1} is empty.", "Give every prompt at least one token.")
            check_fits(len(prompt), max_new_tokens, self.session.max_cache_len)
        chunk = self.graphs.buckets[-1] if self.graphs.buckets else self.session.max_batch
        start = time.perf_counter()
        host_before = self.host_seconds
        rows: list[RowResult] = []
        steps: list[float] = []
        first = None
        first_unix = 0.0
        for at in range(0, len(prompts), chunk):
            part = [list(p) for p in prompts[at : at + chunk]]
            tokens, part_steps, first_at = self._chunk(part, max_new_tokens, on_tokens, at)
            if first is None:
                first, first_unix = first_at - start, time.time() - (time.perf_counter() - first_at)
            rows += [RowResult(p, t) for p, t in zip(part, tokens)]
            steps += part_steps
            if on_rows is not None:
                on_rows(len(part))
        self.session.kv.rewind(0)
        host_ms = (self.host_seconds - host_before) * 1000.0 / max(len(steps), 1)
        return Generation(rows, first or 0.0, time.perf_counter() - start, steps, first_unix, host_ms)

    def _left_pad(self, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            mask[row, width - len(prompt) :] = 1
        device = self.session.device
        return ids.to(device), mask.to(device)

    def _prefill(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Eager forward of the padded prompts from slot 0; the mask buffer keeps their padding hidden
        for every later step (the graphs read it)."""
        session = self.session
        batch, width = ids.shape
        session.attention_mask.fill_(1)
        session.attention_mask[:batch, :width].copy_(mask)
        session.kv.rewind(0)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            logits = session.forward(batch, ids, positions, session.attention_mask)
        session.kv.advance(width)  # from slot 0 (the rewind above)
        return logits

    def _chunk(self, prompts, max_new_tokens: int, on_tokens: OnTokens | None, first_row: int):
        ids, mask = self._left_pad(prompts)
        batch = ids.shape[0]
        bucket = bucket_for(batch, self.graphs.buckets)
        choice = self._choice(max_new_tokens)
        if self.graphs.check_pointers:  # --debug: the buffers' addresses once per chunk, not per token
            self.graphs.check_static_buffers()
        clock = StepClock(self.session.device)
        reader = LaggedReader(choice, batch)
        choice.start(self._prefill(ids, mask), mask.sum(-1), bucket)  # each row's next position
        shown = self._stream(reader.now(1), 0, on_tokens, first_row)
        first_at = time.perf_counter()  # the host has read the first token: it exists
        made = 1
        clock.mark()
        with torch.no_grad():
            while made < max_new_tokens:
                if made % self.check_every == 0:
                    ready = reader.ask(made)  # read at the next check: this one costs no wait
                    if ready is not None:
                        shown = self._stream(ready, shown, on_tokens, first_row)
                        if ready.finished:
                            break
                issued = time.perf_counter()
                key, graph = self.graphs.graph_now(bucket)
                logits = graph.replay()
                self.session.kv.advance()
                choice.after_step(key, logits, self._capturing)
                made += 1
                clock.mark()
                self.host_seconds += time.perf_counter() - issued
        final = reader.now(made)
        self._stream(final, shown, on_tokens, first_row)
        return self._trim(final.tokens), clock.step_ms(), first_at

    def _choice(self, new_tokens: int) -> TokenChoice:
        """One TokenChoice per length of request, kept: its captured graphs serve every later call."""
        if self._token_choice is None or self._token_choice.new_tokens != new_tokens:
            self._token_choice = TokenChoice(self.session, self.sampler, self.eos, self.pad_id, new_tokens)
        return self._token_choice

    def _stream(self, ready: Ready, shown: int, on_tokens: OnTokens | None, first_row: int) -> int:
        """Hand the rows' new tokens on; stop with NonFiniteError at a token chosen from NaN/Inf logits,
        after handing on only the tokens before it."""
        bad = ready.first_non_finite()
        upto = ready.made if bad is None else bad[1]
        if on_tokens is not None and upto > shown:
            for row, tokens in enumerate(ready.tokens):
                on_tokens(first_row + row, tokens[shown:upto])
        if bad is not None:
            row, at = bad
            raise NonFiniteError(
                f"generate stopped: the logits of prompt {first_row + row + 1} for new token {at + 1} hold NaN or "
                f"Inf, so no token can be chosen from them ({at} token(s) of that row were made before).",
                "Run `cugraph-accel verify` on the plan: it names the graph and step that made them.",
            )
        return max(shown, upto)

    def _trim(self, rows: list[list[int]]) -> list[list[int]]:
        eos = self._eos_ids
        trimmed = []
        for tokens in rows:
            stop = next((i for i, t in enumerate(tokens) if t in eos), None)
            trimmed.append(tokens if stop is None else tokens[: stop + 1])
        return trimmed
