"""An engine of SlotEngine's API that runs the prepared HF model eagerly, one row at a time, each row with its own
DynamicCache: the server's tests drive the scheduler through it where the captured rows are not needed. It checks
the contract the scheduler must keep (no release of a free row, no decode before the prompt is done, no write
past the cache's end), so a scheduler bug fails here as it would on the real engine."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache


@dataclass
class _Row:
    prompt: list[int]
    done: int = 0  # prompt tokens prefilled
    position: int = 0  # the next cache slot
    cache: DynamicCache = field(default_factory=DynamicCache)


class EagerRowEngine:
    def __init__(self, prepared, *, chunk: int = 256):
        self.model = prepared.loaded.model
        self.device = prepared.loaded.device
        self.max_rows = max(prepared.plan.buckets)
        self.max_len = prepared.plan.max_cache_len
        self.vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        self.chunk = chunk
        self.rows: dict[int, _Row] = {}

    def free_rows(self) -> int:
        return self.max_rows - len(self.rows)

    def admit(self, tokens: list[int]) -> int:
        if not tokens or len(tokens) >= self.max_len:
            raise ValueError(f"a prompt of {len(tokens)} tokens does not fit a row of {self.max_len}")
        free = sorted(set(range(self.max_rows)) - set(self.rows))
        if not free:
            raise RuntimeError("no free row")
        self.rows[free[0]] = _Row(list(tokens))
        return free[0]

    @torch.no_grad()
    def prefill_chunk(self, row: int) -> torch.Tensor | None:
        state = self.rows[row]
        if state.done == len(state.prompt):
            raise RuntimeError(f"row {row}'s prompt is prefilled already")
        piece = state.prompt[state.done : state.done + self.chunk]
        logits = self._forward(state, piece)
        state.done += len(piece)
        return logits if state.done == len(state.prompt) else None

    @torch.no_grad()
    def decode(self, rows: list[int], tokens: torch.Tensor) -> torch.Tensor:
        if len(set(rows)) != len(rows) or tokens.shape != (len(rows),):
            raise ValueError(f"rows {rows} and tokens of shape {tuple(tokens.shape)} do not match")
        out = []
        for row, token in zip(rows, tokens.tolist()):
            state = self.rows[row]
            if state.done != len(state.prompt):
                raise RuntimeError(f"row {row} decodes before its prompt is done")
            out.append(self._forward(state, [token]))
        return torch.stack(out)

    def _forward(self, state: _Row, ids: list[int]) -> torch.Tensor:
        if state.position + len(ids) > self.max_len:
            raise RuntimeError(f"a write past the cache's end ({state.position} + {len(ids)} > {self.max_len})")
        inputs = torch.tensor([ids], device=self.device)
        positions = torch.arange(state.position, state.position + len(ids), device=self.device)
        logits = self.model(
            input_ids=inputs, past_key_values=state.cache, use_cache=True, cache_position=positions
        ).logits
        state.position += len(ids)
        return logits[0, -1].float()

    def release(self, row: int) -> None:
        if row not in self.rows:
            raise RuntimeError(f"row {row} is free already")
        del self.rows[row]

    def position(self, row: int) -> int:
        return self.rows[row].position
