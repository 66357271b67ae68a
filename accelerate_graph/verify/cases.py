"""Which runs `verify` makes: every captured graph, at full and padded batch, plus context crossings,
and (`Coverage`) left-padded batches, positions spread over each context bucket, and long runs.

A case is a batch of `batch` rows (padded up to `bucket`) decoding `steps` tokens from cache slot
`start`. Graph (bucket, C) runs the steps whose write slot lies in C's range [previous bucket, C), so
each (batch bucket, context bucket) gets a case that starts inside that range, and each boundary
between context buckets gets a case that starts a few slots before it (the step moves to the next
graph mid-run). Starts are chosen so the steps asked fit; a case gets fewer steps only where its
context bucket holds fewer slots than that, and the plan says so (`Shortened`).

All cases start from one prefilled cache: the prompt covers the latest start, and a case rewinds the
write position to its own start (later slots are hidden by causality and overwritten as it runs), so
one prefill and one snapshot serve every case.

What `cugraph-accel verify` adds (`VERIFY`; `THOROUGH` more of it), because generate and serve do it:
- ragged batches: a full batch's rows are prompts of different lengths, left-padded as generate pads
  them: row r hides its first `pads[r]` slots from attention and counts its positions from there;
  row 0 keeps every slot (the longest prompt), so the batch's largest position is the write slot;
- positions spread over each context bucket's whole range, its first and last slots included, and
  across the sliding window's edge where the model has one;
- long runs: every graph is replayed `soak` times before any of its steps is judged (against_eager).
`variant` n > 0 (each `--repeat` after the first) draws the spread windows and the padding anew.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

from accelerate_graph.core.buckets import bucket_for, context_for, padded_batch


@dataclass(frozen=True)
class Case:
    bucket: int  # the batch bucket whose graphs run it
    batch: int  # real rows; bucket - batch rows are padding
    context: int  # the context bucket of its first step
    start: int  # the cache slot its first step writes
    steps: int
    crossing: bool = False  # starts before a context boundary and runs across it
    pads: tuple[int, ...] = ()  # each real row's left padding (empty: none); row 0's is 0

    @property
    def slots(self) -> str:
        return f"{self.start}-{self.start + self.steps - 1}"

    @property
    def padding(self) -> str:
        """The rows' left padding, e.g. "0/5/10" (empty: none)."""
        return "/".join(map(str, self.pads))

    def describe(self) -> str:
        padded = f" (padded to {self.bucket})" if self.batch < self.bucket else ""
        ragged = f", left padding {self.padding}" if self.pads else ""
        return f"batch {self.batch}{padded}, context {self.context}, slots {self.slots}{ragged}"


# Replays of every graph before any of its steps is judged. A fault tied to a count (a pool of buffers
# reused in turn, a counter that wraps or saturates, a read lagging behind the writes) shows only once
# the count is passed: 64 is 8x the longest interval the engine keeps (generate reads tokens every 8
# steps) and past the 41st replay, where a planted fault (faults.late_replay) must show.
SOAK_REPLAYS = 64
THOROUGH_SOAK_REPLAYS = 512  # --thorough: a counter of up to 9 bits wraps within it


@dataclass(frozen=True)
class Coverage:
    """What verify replays beyond one case per graph and one per context crossing."""

    positions: int = 0  # windows per context bucket, spread from its first slot to its last (0: none)
    ragged: bool = False  # full batches of two rows or more run as left-padded prompts of different lengths
    soak: int = 0  # replays of every graph before any of its steps is judged
    variant: int = 0  # 0: evenly spread windows and padding; n > 0: drawn from n (what --repeat varies)

    def again(self, variant: int) -> Coverage:
        return Coverage(self.positions, self.ragged, self.soak, variant)


BASIC = Coverage()  # one case per graph and crossing: the library's default, a quick equivalence check
VERIFY = Coverage(positions=3, ragged=True, soak=SOAK_REPLAYS)  # `cugraph-accel verify`
THOROUGH = Coverage(positions=9, ragged=True, soak=THOROUGH_SOAK_REPLAYS)  # `verify --thorough`


@dataclass(frozen=True)
class Shortened:
    case: Case
    asked: int
    run: int
    why: str

    def as_json(self) -> dict:
        return {**asdict(self.case), "asked": self.asked, "run": self.run, "why": self.why}

    def line(self) -> str:
        return f"bucket {self.case.bucket}, {self.case.describe()}: {self.run} of {self.asked} steps ({self.why})"


@dataclass
class CasePlan:
    cases: list[Case] = field(default_factory=list)
    shortened: list[Shortened] = field(default_factory=list)
    coverage: Coverage = BASIC

    @property
    def prefill_len(self) -> int:
        """Prompt slots every case's start lies within (or right after)."""
        return max((c.start for c in self.cases), default=1)

    @property
    def rows(self) -> int:
        """Cache rows the cases touch, padding included."""
        return max((c.bucket for c in self.cases), default=1)


def slot_ranges(cases: list[Case]) -> list[tuple[int, int]]:
    """The write slots the cases' steps cover, merged into sorted (first, last) ranges."""
    ranges: list[tuple[int, int]] = []
    for first, last in sorted((c.start, c.start + c.steps - 1) for c in cases if c.steps > 0):
        if ranges and first <= ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], last))
        else:
            ranges.append((first, last))
    return ranges


def describe_slots(cases: list[Case], cache_len: int) -> str:
    """E.g. "slots 1-8, 16-23, 124-131, 248-255 of 256": the write slots replayed."""
    parts = ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in slot_ranges(cases))
    return f"slots {parts or 'none'} of {cache_len}"


def graphs_replayed(case: Case, buckets: tuple[int, ...], contexts: tuple[int, ...]) -> set[tuple[int, int]]:
    """The (batch bucket, context bucket) graphs that `case`'s steps dispatch to."""
    bucket = bucket_for(case.batch, buckets)
    return {(bucket, context_for(slot, contexts)) for slot in range(case.start, case.start + case.steps)}


def uncovered(plan: CasePlan, buckets: tuple[int, ...], contexts: tuple[int, ...]) -> list[tuple[int, int]]:
    """Captured graphs no case replays: empty for a plan from `plan_cases`."""
    seen = set().union(*(graphs_replayed(c, buckets, contexts) for c in plan.cases))
    return sorted({(b, c) for b in buckets for c in contexts} - seen)


def _in_context(lo: int, context: int, steps: int, prompt_len: int) -> tuple[int, int]:
    """(start, steps run) for a case inside [lo, context): at the prompt's end where it fits, else as
    late as the steps allow; never before slot 1 (a case needs one prompt token)."""
    first = max(lo, 1)
    start = min(max(prompt_len, first), context - 1)
    start = max(first, min(start, context - steps))
    return start, min(steps, context - start)


def plan_cases(
    buckets: tuple[int, ...],
    contexts: tuple[int, ...],
    steps: int,
    prompt_len: int,
    crossing_buckets: int = 2,
    coverage: Coverage = BASIC,
    window: int | None = None,
) -> CasePlan:
    """Every batch bucket at every context bucket, full and most-padded; then the smallest and the
    largest bucket (`crossing_buckets` of them, from the largest down) across each context boundary;
    with `coverage`, those two buckets also at windows spread over each context bucket and across the
    sliding `window`'s edge (the first slot whose step no longer sees slot 0)."""
    buckets, contexts = tuple(sorted(buckets)), tuple(sorted(contexts))
    plan = CasePlan(coverage=coverage)
    pad = _Padding(coverage)
    for bucket in buckets:
        for batch in (bucket, padded_batch(bucket, buckets)):
            if batch is None:
                continue
            for lo, context in zip((0, *contexts), contexts):
                start, run = _in_context(lo, context, steps, prompt_len)
                pads = pad(batch, start) if batch == bucket else ()
                _add(
                    plan,
                    Case(bucket, batch, context, start, run, pads=pads),
                    steps,
                    f"context {context} holds slots {lo}-{context - 1}",
                )
    crossers = sorted({buckets[-1], buckets[0]}, reverse=True)[:crossing_buckets] if buckets else []
    cross_steps = max(steps, 2)  # one step on each side at least
    for k, boundary in enumerate(contexts[:-1]):
        lo = contexts[k - 1] if k else 0
        start = max(boundary - cross_steps // 2, lo, 1)
        run = min(cross_steps, contexts[k + 1] - start)
        for bucket in crossers:
            case = Case(bucket, bucket, boundary, start, run, crossing=True, pads=pad(bucket, start))
            _add(plan, case, cross_steps, f"context {contexts[k + 1]} ends at slot {contexts[k + 1] - 1}")
    taken = {c.start for c in plan.cases if c.bucket == c.batch and c.bucket in crossers}
    for start, context, why in _spread_starts(contexts, steps, coverage, window, taken):
        for bucket in crossers:
            run = min(steps, contexts[-1] - start)
            _add(plan, Case(bucket, bucket, context, start, run, pads=pad(bucket, start)), steps, why)
    return plan


def sliding_window(config) -> int | None:
    """The model's sliding attention window, where some layer attends through one (None: none)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    window = getattr(text, "sliding_window", None)
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return None
    if getattr(text, "use_sliding_window", True) is False:
        return None
    types = getattr(text, "layer_types", None)
    if types is not None and not any("sliding" in str(t) for t in types):
        return None
    return window


def _spread_starts(
    contexts: tuple[int, ...], steps: int, coverage: Coverage, window: int | None, taken: set[int]
) -> list[tuple[int, int, str]]:
    """(start, context bucket, why it may be short) of the windows `coverage` spreads over each context
    bucket: its first slot (slot 1 in the first bucket: a case needs one prompt token), its last, and
    the rest evenly between; then one across the sliding window's edge. Starts in `taken` already run.
    A variant draws the windows between first and last anew, as many as variant 0 has, so every
    repeat runs as many cases."""
    starts: list[tuple[int, int, str]] = []
    if coverage.positions <= 0 or not contexts:
        return starts
    draw = random.Random(coverage.variant)
    for lo, context in zip((0, *contexts), contexts):
        first, last = max(lo, 1), max(max(lo, 1), context - steps)
        n = coverage.positions
        even = [last] if n == 1 or last == first else [first + round(i * (last - first) / (n - 1)) for i in range(n)]
        chosen = [start for start in dict.fromkeys(even) if start not in taken]
        if coverage.variant:
            free = [s for s in range(first + 1, last) if s not in taken]
            middle = [s for s in chosen if first < s < last]
            drawn = draw.sample(free, len(middle)) if len(free) >= len(middle) else middle
            chosen = sorted([s for s in chosen if s in (first, last)] + drawn)
        why = f"context {context} holds slots {lo}-{context - 1}"
        starts += [(start, context, why) for start in chosen]
    if window is not None and 1 < window < contexts[-1]:
        start = max(window - max(steps, 2) // 2, 1)
        starts.append((start, context_for(start, contexts), f"the cache ends at slot {contexts[-1] - 1}"))
    return starts


class _Padding:
    """Each row's left padding for a ragged case of `batch` rows whose first step writes slot `start`:
    row 0 none, the last row all but one prompt slot, the rows between evenly spread (drawn, for a
    variant), so the rows' prompts have different lengths as in a batch of real requests."""

    def __init__(self, coverage: Coverage):
        self.coverage = coverage
        self.draw = random.Random(10_000 + coverage.variant)

    def __call__(self, batch: int, start: int) -> tuple[int, ...]:
        if not self.coverage.ragged or batch < 2 or start < 2:
            return ()
        most = start - 1  # one prompt token stays visible
        if self.coverage.variant:
            return (0, *(self.draw.randint(0, most) for _ in range(batch - 2)), most)
        return tuple(round(r * most / (batch - 1)) for r in range(batch))


def _add(plan: CasePlan, case: Case, asked: int, why: str) -> None:
    plan.cases.append(case)
    if case.steps < asked:
        plan.shortened.append(Shortened(case, asked, case.steps, why))
