"""What a bench contender is: one object that says how to set it up and run it, when it runs, which
columns it adds to the step table and how its line is drawn. `CONTENDERS` (this package) lists them.

Light on purpose: the CLI reads the names at start-up (bench/options.py), before torch is imported, so
contender files import their heavy modules inside the functions that run them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: see the module's docstring
    import torch

    from accelerate_graph.bench.results import BenchRow, ContextInfo
    from accelerate_graph.bench.run import BenchHooks, BenchSettings
    from accelerate_graph.core.capture import DecodeGraphs
    from accelerate_graph.pipeline import CaptureRequest, Prepared

# A row's kind: "step" rows time one decode step; "generate" rows time whole generate calls, per new token.
STEP, GENERATE = "step", "generate"


class Tier(IntEnum):
    """When a contender runs, within one cache length: lower tiers first, registry order within a tier.
    torch.compile's cudagraph trees (the compile contender's, and HF generate's) clear the cuBLAS
    workspaces our captured graphs point at: a replay of ours after them reads freed memory (an illegal
    address, seen on the H200). So everything that replays our graphs runs before them."""

    OURS = 0  # eager, and replays of the plan's graphs; per bucket, from one prefilled cache
    OURS_RECAPTURED = 1  # our graphs captured anew on the same session (fused)
    TORCH_COMPILE = 2  # torch.compile with its cudagraph trees
    HF_GENERATE = 3  # HF generate, which compiles itself: last


def _nothing() -> None:
    pass


@dataclass
class TimedStep:
    """One step contender set up for one bucket: the call timed per step and what setting it up cost."""

    name: str
    call: Callable[[torch.Tensor, torch.Tensor], object]  # (tokens [b], positions [b]) -> logits
    setup_seconds: float | None = None  # capture (graph) or compilation (compile)
    memory_bytes: int | None = None
    before: Callable[[], None] = _nothing  # untimed, before every call
    notes: list[str] = field(default_factory=list)


@dataclass
class ContextRun:
    """Everything of one cache length that a contender may use."""

    prepared: Prepared
    graphs: DecodeGraphs  # the plan's graphs (none captured in an eager plan)
    settings: BenchSettings
    floors: dict[int, float]  # batch -> floor ms
    hooks: BenchHooks
    info: ContextInfo  # its notes are shown under the tables
    request: CaptureRequest

    @property
    def session(self):
        return self.prepared.session


# (graphs, batch, rewind) -> the step set up for that batch; `rewind` puts the cache back at the prompt's end
SetUpStep = Callable[["DecodeGraphs", int, Callable[[], None]], TimedStep]
# (run, graphs, batch) -> one row of whole calls (kind GENERATE)
RunCalls = Callable[[ContextRun, "DecodeGraphs", int], "BenchRow"]
# (run) -> held while the contender's rows are made, yielding the graphs it runs (None: no rows, say why in a note)
Scope = Callable[[ContextRun], AbstractContextManager["DecodeGraphs | None"]]


@contextmanager
def plan_graphs(run: ContextRun) -> Iterator[DecodeGraphs | None]:
    yield run.graphs


@dataclass(frozen=True)
class SetupColumn:
    """A column the contender adds after the latency columns of the step table: its header, its cell
    from the contender's row, and whether the 'all' row sums the contender's setup seconds under it."""

    header: str
    cell: Callable[[BenchRow], str]
    summed: bool = False


@dataclass(frozen=True)
class Contender:
    """One thing `bench` times. A step contender (kind STEP) gives `step`; a contender of whole calls
    (kind GENERATE, rows per new token) gives `calls`."""

    name: str  # its --compare name and its rows' `contender`
    tier: Tier
    color: str  # its line in --plot (a matplotlib colour)
    kind: str = STEP
    step: SetUpStep | None = None
    calls: RunCalls | None = None
    scope: Scope = plan_graphs  # e.g. capture graphs of its own first, or hold a compiler setting
    title: str = ""  # its name in the end-to-end table (GENERATE), e.g. "HF generate (static cache)"
    label: str = ""  # its short name in that table's headers, e.g. "HF"
    selected_by: str = ""  # the --compare name that turns it on, when not its own (our-loop: hf-generate)
    replays_graphs: bool = False  # no row at a batch whose graph was not kept (--max-memory)
    needs_graphs: bool = False  # refused on an eager plan, which has no graph
    columns: tuple[SetupColumn, ...] = ()
    stage: str = ""  # progress text per batch (default: "timing NAME")
    on_start: Callable[[torch.device, str | None], None] | None = None  # (device, inductor cache) before any load

    @property
    def chosen_as(self) -> str:
        return self.selected_by or self.name

    @property
    def progress_text(self) -> str:
        return self.stage or f"timing {self.name}"
