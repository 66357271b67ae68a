"""The loop's only reads of the device while decoding: every few steps, and one check late.

At a check the tokens so far and whether every row has finished are copied to pinned host memory
without waiting, and the copy asked for at the previous check is read: by then the device has passed
that point while the host queued the steps after it, so the read costs no idle device time. A stop is
seen at most two checks after the last row ends; the extra steps only add pad tokens, trimmed after.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Ready:
    made: int  # tokens per row read
    tokens: list[list[int]]  # rows of the chunk, `made` tokens each
    finished: bool  # every row has ended
    non_finite: list[int] | None = None  # per row, the first token whose logits held NaN/Inf (-1: none)

    def first_non_finite(self) -> tuple[int, int] | None:
        """(row, token index) of the earliest token chosen from non-finite logits among those read."""
        found = [(at, row) for row, at in enumerate(self.non_finite or []) if 0 <= at < self.made]
        return min(found)[::-1] if found else None


class LaggedReader:
    def __init__(self, choice, batch: int):
        self.choice = choice
        self.batch = batch
        cuda = choice.out.device.type == "cuda"
        new_tokens = choice.new_tokens
        # column 0: the row's first token from NaN/Inf logits (-1: none); then its tokens: one read for both
        self._rows = torch.empty((batch, new_tokens + 1), dtype=torch.long, pin_memory=cuda)
        self._finished = torch.empty((), dtype=torch.bool, pin_memory=cuda)
        self._event = torch.cuda.Event() if cuda else None
        self._asked: int | None = None  # `made` at the check whose copy is under way

    def _copy(self, made: int) -> None:
        self._rows[:, 0].copy_(self.choice.non_finite[: self.batch], non_blocking=True)
        self._rows[:, 1 : made + 1].copy_(self.choice.out[: self.batch, :made], non_blocking=True)
        self._finished.copy_(self.choice.finished[: self.batch].all(), non_blocking=True)
        if self._event is not None:
            self._event.record()

    def _read(self, made: int) -> Ready:
        if self._event is not None:
            self._event.synchronize()
        rows = self._rows[:, : made + 1].tolist()
        return Ready(made, [row[1:] for row in rows], bool(self._finished), [row[0] for row in rows])

    def ask(self, made: int) -> Ready | None:
        """Read what the previous check asked for (None at the first), then ask for the state at `made`."""
        ready = self._read(self._asked) if self._asked is not None else None
        self._copy(made)
        self._asked = made
        return ready

    def now(self, made: int) -> Ready:
        """The state at `made`, waiting for it (the first token, and the end of the chunk)."""
        self._copy(made)
        self._asked = None
        return self._read(made)
