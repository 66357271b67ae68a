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


class TokenRead:
    """Tokens [n] chosen on the device, on their way to the host; `tokens()` waits for them and reads them."""

    def __init__(self, chosen: torch.Tensor):
        if chosen.device.type != "cuda":
            self._host, self._copied = chosen, None
            return
        self._host = torch.empty(chosen.shape, dtype=chosen.dtype, pin_memory=True)
        self._host.copy_(chosen, non_blocking=True)
        self._copied = torch.cuda.Event()
        self._copied.record()

    def tokens(self) -> list[int]:
        if self._copied is not None:
            self._copied.synchronize()
        return self._host.tolist()
