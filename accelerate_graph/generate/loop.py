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

from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.core.capture import DecodeGraphs
from accelerate_graph.generate.sampling import Sampler, Sampling
from accelerate_graph.generate.timing import StepClock

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
            "Shorten the prompt or capture with a larger --max-cache-len.",
        )
    if prompt_len + max_new_tokens - 1 > cache_len:
        raise BadOptionError(
            f"--max-new-tokens {max_new_tokens} after a prompt of {prompt_len} tokens needs "
            f"{prompt_len + max_new_tokens - 1} cache slots; the cache holds {cache_len}.",
            f"Lower --max-new-tokens to at most {cache_len - prompt_len + 1} or raise --max-cache-len.",
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
        self.eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long, device=self.session.device)
        self.pad_id = pad_id
        self.check_every = max(1, check_every)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        on_tokens: OnTokens | None = None,
        on_rows: Callable[[int], None] | None = None,
    ) -> Generation:
        """Generate for every prompt, in chunks of the largest bucket."""
        if max_new_tokens < 1:
            raise BadOptionError(f"--max-new-tokens {max_new_tokens} is invalid.", "Use at least 1.")
        for i, prompt in enumerate(prompts):
            if len(prompt) == 0:
                raise BadOptionError(f"prompt {i + 1} is empty.", "Give every prompt at least one token.")
            check_fits(len(prompt), max_new_tokens, self.session.max_cache_len)
        chunk = self.graphs.buckets[-1] if self.graphs.buckets else self.session.max_batch
        start = time.perf_counter()
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
        return Generation(rows, first or 0.0, time.perf_counter() - start, steps, first_unix)

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

    def _choose(self, logits: torch.Tensor, finished: torch.Tensor) -> torch.Tensor:
        """Next tokens [b]; rows already finished get the pad token (as HF does). Updates `finished`."""
        token = self.sampler(logits).masked_fill(finished, self.pad_id)
        if self.eos.numel():
            finished |= torch.isin(token, self.eos)
        return token

    def _chunk(self, prompts, max_new_tokens: int, on_tokens: OnTokens | None, first_row: int):
        ids, mask = self._left_pad(prompts)
        batch = ids.shape[0]
        clock = StepClock(self.session.device)
        out = torch.full((batch, max_new_tokens), self.pad_id, dtype=torch.long, device=ids.device)
        finished = torch.zeros(batch, dtype=torch.bool, device=ids.device)
        next_position = mask.sum(-1)  # [b]: each row's position for the token fed next
        token = self._choose(self._prefill(ids, mask), finished)
        out[:, 0] = token
        shown = self._stream(out, 0, 1, on_tokens, first_row)
        if ids.device.type == "cuda":
            torch.cuda.synchronize(ids.device)  # time to first token: the token exists, not just its launch
        first_at = time.perf_counter()
        made = 1
        clock.mark()
        with torch.no_grad():
            while made < max_new_tokens:
                if made % self.check_every == 0:
                    shown = self._stream(out, shown, made, on_tokens, first_row)
                    if bool(finished.all()):
                        break
                logits = self.graphs.run(token, next_position, copy=False)
                next_position = next_position + 1
                token = self._choose(logits, finished)
                out[:, made] = token
                made += 1
                clock.mark()
        self._stream(out, shown, made, on_tokens, first_row)
        return self._trim(out[:, :made].tolist()), clock.step_ms(), first_at

    def _stream(self, out, shown: int, made: int, on_tokens: OnTokens | None, first_row: int) -> int:
        if on_tokens is not None and made > shown:
            for row, new in enumerate(out[:, shown:made].tolist()):
                on_tokens(first_row + row, new)
        return made

    def _trim(self, rows: list[list[int]]) -> list[list[int]]:
        eos = set(self.eos.tolist())
        trimmed = []
        for tokens in rows:
            stop = next((i for i, t in enumerate(tokens) if t in eos), None)
            trimmed.append(tokens if stop is None else tokens[: stop + 1])
        return trimmed
