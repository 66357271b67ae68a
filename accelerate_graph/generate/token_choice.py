"""The work between two decode steps, on the device and in place: choose each row's next token, give
finished rows the pad token, mark rows that just ended, record the token, and write it and the next
position into the session's input buffers, so the next replay reads them with no copy from the host.

Greedy choice is captured as a second small graph per step graph (it reads that graph's output), so a
token costs two replays and no host read; sampling runs the same ops eagerly (its generator draws
fresh numbers each call), still with no host read.
"""

from __future__ import annotations

import torch

from accelerate_graph.core.backends import CapturedGraph, GraphBackend
from accelerate_graph.core.capture import CAPTURE_WRITES
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.generate.sampling import Sampler


class TokenChoice:
    """State of one chunk of rows, sized for the largest bucket and `new_tokens` tokens."""

    def __init__(self, session: DecodeSession, sampler: Sampler, eos: torch.Tensor, pad_id: int, new_tokens: int):
        self.session = session
        self.sampler = sampler
        self.eos = eos
        self.pad_id = pad_id
        device, rows = session.device, session.max_batch
        self.new_tokens = new_tokens
        # spare columns: a capture's warm-ups and recording write columns 0-2 even for 1 or 2 new tokens
        self.out = torch.full((rows, new_tokens + CAPTURE_WRITES), pad_id, dtype=torch.long, device=device)
        self.finished = torch.zeros(rows, dtype=torch.bool, device=device)
        self.made = torch.zeros(1, dtype=torch.long, device=device)  # the column the next token goes to
        # per row, the first column whose logits held NaN/Inf (-1: none): read with the tokens, never alone
        self.non_finite = torch.full((rows,), -1, dtype=torch.long, device=device)
        self._graphs: dict[tuple[int, int], CapturedGraph] = {}

    def start(self, logits: torch.Tensor, positions: torch.Tensor, bucket: int) -> None:
        """After the prefill: rows [:b] choose from `logits` [b, V] and will feed at `positions` [b];
        rows b..bucket are padding, finished from the start."""
        batch = logits.shape[0]
        self.out.fill_(self.pad_id)
        self.finished.zero_()
        self.finished[batch:bucket] = True
        self.made.zero_()
        self.non_finite.fill_(-1)
        token = self._record(logits, batch)
        self.session.load_inputs(bucket, token, positions)

    def _record(self, logits: torch.Tensor, rows: int) -> torch.Tensor:
        # NaN, +Inf or no finite value: nothing to sample from (a -Inf alone is a masked token)
        unusable = torch.isnan(logits) | (logits == float("inf")) | ~torch.isfinite(logits).any(-1, keepdim=True)
        bad = unusable.any(-1) & ~self.finished[:rows]
        first = self.non_finite[:rows]
        first.copy_(torch.where(bad & (first < 0), self.made, first))
        token = torch.where(self.finished[:rows], self.pad_id, self.sampler(logits))
        if self.eos.numel():
            self.finished[:rows] |= torch.isin(token, self.eos)
        self.out[:rows].index_copy_(1, self.made, token[:, None])
        self.made.add_(1)
        return token

    def _after_step(self, logits: torch.Tensor, bucket: int) -> torch.Tensor:
        token = self._record(logits, bucket)
        self.session.input_ids[:bucket, 0].copy_(token)
        self.session.position_ids[:bucket, 0].add_(1)
        return token

    def after_step(self, key: tuple[int, int], logits: torch.Tensor, backend: GraphBackend | None) -> None:
        """Choose from a step graph's output `logits` [bucket, V] (graph `key`): replay its choice graph,
        captured on first use when `backend` is given (greedy), else run the ops eagerly."""
        bucket = key[0]
        if backend is None:
            self._after_step(logits, bucket)
            return
        if key not in self._graphs:
            self._graphs[key] = self._capture(backend, logits, bucket)
        self._graphs[key].replay()

    def _capture(self, backend: GraphBackend, logits: torch.Tensor, bucket: int) -> CapturedGraph:
        """Warm-ups and recording run the ops: what they change is put back after."""
        s = self.session
        state = [self.out, self.finished, self.made, self.non_finite, s.input_ids, s.position_ids]
        kept = [t.clone() for t in state]
        self.made.zero_()  # the warm-ups write columns from 0 on, wherever the chunk is
        try:
            return backend.capture(lambda: self._after_step(logits, bucket))
        finally:
            for tensor, value in zip(state, kept):
                tensor.copy_(value)
