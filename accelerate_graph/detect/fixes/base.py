"""What a model fix is: one name and one function with one signature, registered in `MODEL_FIXES`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.detect.hazards import Hazard

Redetect = Callable[[], list[Hazard]]  # find the hazards again, on the session as it is now
# (session, hazards found so far, redetect) -> (what was done, in a sentence, or None; the hazards now)
ApplyFix = Callable[[DecodeSession, list[Hazard], Redetect], tuple[str | None, list[Hazard]]]


@dataclass(frozen=True)
class ModelFix:
    """A change that keeps a decode step whole instead of cutting it into pieces. `apply` changes the
    session or its model only where the hazards call for it, keeps the change only if `redetect` then
    finds fewer of them (else undoes it), and says what it did; the sentence lands in the plan's `fixes`.
    In `--mode eager` no hazard is looked for: fixes are applied to an empty list."""

    name: str
    apply: ApplyFix
