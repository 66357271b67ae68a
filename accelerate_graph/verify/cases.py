"""Which runs `verify` makes: every captured graph, at full and padded batch, plus context crossings.

A case is a batch of `batch` rows (padded up to `bucket`) decoding `steps` tokens from cache slot
`start`. Graph (bucket, C) runs the steps whose write slot lies in C's range [previous bucket, C), so
each (batch bucket, context bucket) gets a case that starts inside that range, and each boundary
between context buckets gets a case that starts a few slots before it (the step moves to the next
graph mid-run). Starts are chosen so the steps asked fit; a case gets fewer steps only where its
context bucket holds fewer slots than that, and the plan says so (`Shortened`).

All cases start from one prefilled cache: the prompt covers the latest start, and a case rewinds the
write position to its own start (later slots are hidden by causality and overwritten as it runs), so
one prefill and one snapshot serve every case.
"""

from __future__ import annotations

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

    @property
    def slots(self) -> str:
        return f"{self.start}-{self.start + self.steps - 1}"

    def describe(self) -> str:
        padded = f" (padded to {self.bucket})" if self.batch < self.bucket else ""
        return f"batch {self.batch}{padded}, context {self.context}, slots {self.slots}"


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

    @property
    def prefill_len(self) -> int:
        """Prompt slots every case's start lies within (or right after)."""
        return max((c.start for c in self.cases), default=1)

    @property
    def rows(self) -> int:
        """Cache rows the cases touch, padding included."""
        return max((c.bucket for c in self.cases), default=1)


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
    buckets: tuple[int, ...], contexts: tuple[int, ...], steps: int, prompt_len: int, crossing_buckets: int = 2
) -> CasePlan:
    """Every batch bucket at every context bucket, full and most-padded; then the smallest and the
    largest bucket (`crossing_buckets` of them, from the largest down) across each context boundary."""
    buckets, contexts = tuple(sorted(buckets)), tuple(sorted(contexts))
    plan = CasePlan()
    for bucket in buckets:
        for batch in (bucket, padded_batch(bucket, buckets)):
            if batch is None:
                continue
            for lo, context in zip((0, *contexts), contexts):
                start, run = _in_context(lo, context, steps, prompt_len)
                _add(
                    plan,
                    Case(bucket, batch, context, start, run),
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
            case = Case(bucket, bucket, boundary, start, run, crossing=True)
            _add(plan, case, cross_steps, f"context {contexts[k + 1]} ends at slot {contexts[k + 1] - 1}")
    return plan


def _add(plan: CasePlan, case: Case, asked: int, why: str) -> None:
    plan.cases.append(case)
    if case.steps < asked:
        plan.shortened.append(Shortened(case, asked, case.steps, why))
