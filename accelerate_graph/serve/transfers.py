"""The serving loop's copies between host and device: small lists of ids and positions up, each step's chosen
tokens down. Neither waits for the device: the lists go up through pinned memory (a copy from pageable memory
may wait for the work queued before it), and the tokens come down into pinned memory, read a turn later, when
the device has usually passed them while running the next step.
"""

from __future__ import annotations

import torch


def upload(values: list[int], device: torch.device) -> torch.Tensor:
    """`values` as a long tensor on `device`, queued behind the work before it without waiting for it."""
    if device.type != "cuda":
        return torch.tensor(values, dtype=torch.long, device=device)
    return torch.tensor(values, dtype=torch.long, pin_memory=True).to(device, non_blocking=True)


def launch_mark(device: torch.device) -> torch.cuda.Event | None:
    """A timing event queued now on `device`'s stream, before a step's work: where its device time starts
    (None off CUDA). The stream passes it when the work queued before is done, so a step launched while the
    one before still runs is timed alone."""
    if device.type != "cuda":
        return None
    mark = torch.cuda.Event(enable_timing=True)
    mark.record()
    return mark


class TokenRead:
    """Tokens [n] chosen on the device, on their way to the host; `tokens()` waits for them and reads them.
    `launched`: the step's launch_mark, for `device_seconds`."""

    def __init__(self, chosen: torch.Tensor, launched: torch.cuda.Event | None = None):
        self._launched = launched
        if chosen.device.type != "cuda":
            self._host, self._copied = chosen, None
            return
        self._host = torch.empty(chosen.shape, dtype=chosen.dtype, pin_memory=True)
        self._host.copy_(chosen, non_blocking=True)
        self._copied = torch.cuda.Event(enable_timing=launched is not None)
        self._copied.record()

    def tokens(self) -> list[int]:
        if self._copied is not None:
            self._copied.synchronize()
        return self._host.tolist()

    def device_seconds(self) -> float | None:
        """The device's time from the launch mark to the tokens' copy, once `tokens()` returned; None
        without a mark (or off CUDA)."""
        if self._launched is None or self._copied is None:
            return None
        try:
            return self._launched.elapsed_time(self._copied) / 1000
        except RuntimeError:  # a measure, never a request's failure
            return None
