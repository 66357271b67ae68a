"""What `bench` measured: one row per (context, bucket, contender), and the report around them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from accelerate_graph.bench.contenders.base import GENERATE, STEP
from accelerate_graph.bench.floor import Bandwidth
from accelerate_graph.bench.timing import Latency

BENCH_FORMAT = "cugraph-accel-bench/2"  # 2: the run's description moved from "settings" to "run"
BASELINE = {STEP: "eager", GENERATE: "hf-generate"}  # what each kind's speedup is measured against


@dataclass
class BenchRow:
    """kind "step": one decode step. kind "generate": whole generate calls, per new token
    (call time / new tokens), so they sit on the same scale as a step and its floor."""

    kind: str
    cache_len: int  # slots per row of the cache (JSON/CSV key "context", as --context)
    prompt_len: int
    batch: int  # rows decoded at once (JSON/CSV key "bucket")
    contender: str
    median_ms: float
    p10_ms: float
    p90_ms: float
    samples: int
    drift: float  # relative gap between the medians of the two halves of the samples
    floor_ms: float  # bytes the step must move / measured bandwidth
    setup_seconds: float | None = None  # capture (graph), compilation (compile), first call (hf-generate)
    warmup_seconds: float | None = None
    memory_bytes: int | None = None  # graph memory (graph), memory reserved while compiling (compile)
    new_tokens: int | None = None
    speedup: float | None = None  # over BASELINE[kind] at the same cache length and batch

    @classmethod
    def measured(
        cls,
        kind: str,
        cache_len: int,
        prompt_len: int,
        batch: int,
        contender: str,
        latency: Latency,
        floor_ms: float,
        **extra,
    ) -> BenchRow:
        return cls(
            kind,
            cache_len,
            prompt_len,
            batch,
            contender,
            latency.median_ms,
            latency.p10_ms,
            latency.p90_ms,
            latency.samples,
            latency.drift,
            floor_ms,
            **extra,
        )

    @property
    def x_floor(self) -> float:
        return self.median_ms / self.floor_ms

    @property
    def tokens_per_s(self) -> float:
        return self.batch * 1000.0 / self.median_ms

    @property
    def under_floor(self) -> bool:
        """Faster than the bytes it must move allow: the floor or the timing is wrong."""
        return self.median_ms < self.floor_ms

    def record(self) -> dict:
        """The row as files write it: the keys they have always had."""
        fields = {RECORD_KEYS.get(key, key): value for key, value in asdict(self).items()}
        return {**fields, "x_floor": self.x_floor, "tokens_per_s": self.tokens_per_s, "under_floor": self.under_floor}


# BenchRow fields whose JSON/CSV keys keep their first names, which readers of old files rely on
RECORD_KEYS = {"cache_len": "context", "batch": "bucket"}


def fill_speedups(rows: list[BenchRow]) -> None:
    """Speedup of each row over its kind's baseline measured at the same cache length and batch."""
    baselines = {(r.kind, r.cache_len, r.batch): r for r in rows if r.contender == BASELINE[r.kind]}
    for row in rows:
        base = baselines.get((row.kind, row.cache_len, row.batch))
        row.speedup = base.median_ms / row.median_ms if base else None


@dataclass
class ContextInfo:
    cache_len: int
    prompt_len: int
    buckets: list[int]
    backend: str  # cuda-graph | emulated | none
    notes: list[str] = field(default_factory=list)
    floors: list[dict] = field(default_factory=list)  # per bucket: the bytes a step moves, and its floor
    eager_fallbacks: int = 0  # batches above the largest captured bucket that ran eagerly
    memory: dict = field(default_factory=dict)  # peak device memory of this cache length and its stated bound


@dataclass
class BenchReport:
    environment: dict
    bandwidth: Bandwidth
    run: dict  # what was measured and how: model, dtype, attention, contenders, steps
    contexts: list[ContextInfo] = field(default_factory=list)
    rows: list[BenchRow] = field(default_factory=list)
    settings: dict = field(default_factory=dict)  # the engine settings (accelerate_graph.settings), every value

    def to_dict(self) -> dict:
        bandwidth = {**asdict(self.bandwidth), "gb_per_s": self.bandwidth.gb_per_s}
        return {
            "format": BENCH_FORMAT,
            "environment": self.environment,
            "bandwidth": bandwidth,
            "run": self.run,
            "settings": self.settings,
            "contexts": [asdict(c) for c in self.contexts],
            "rows": [r.record() for r in self.rows],
        }

    def step_rows(self, cache_len: int) -> list[BenchRow]:
        return [r for r in self.rows if r.kind == STEP and r.cache_len == cache_len]

    def generate_rows(self, cache_len: int) -> list[BenchRow]:
        return [r for r in self.rows if r.kind == GENERATE and r.cache_len == cache_len]


def under_floor_notes(rows: list[BenchRow]) -> list[str]:
    """One loud line per row measured under its floor."""
    return [
        f"[red]UNDER THE FLOOR[/red]: {r.contender} at batch {r.batch} took {r.median_ms:.3f} ms, less than "
        f"the {r.floor_ms:.3f} ms its bytes need at the measured bandwidth: the floor or the timing is wrong"
        for r in rows
        if r.under_floor
    ]
