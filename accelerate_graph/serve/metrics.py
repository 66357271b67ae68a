"""The server's counters, in Prometheus' text format (no client library: a handful of series).

The engine thread and the HTTP front both write, so every update takes the lock; a scrape reads a copy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

PREFIX = "cugraph_accel_serve"
OUTCOMES = ("ok", "bad_request", "rejected_full", "rejected_draining", "cancelled", "error")
STEP_KINDS = ("decode", "prefill")
# seconds: a decode step of a small model on a CPU to a prefill forward of a large one
STEP_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


class Metrics:
    def __init__(self, max_rows: int, gauges: Callable[[], dict[str, float]] | None = None):
        self.max_rows = max_rows
        self._gauges = gauges or (lambda: {})  # read at scrape time: queue length, rows in use
        self._lock = threading.Lock()
        self.requests = dict.fromkeys(OUTCOMES, 0)
        self.prompt_tokens = 0
        self.generated_tokens = 0
        self.occupancy_sum = 0.0  # decode steps' rows / max_rows, summed: with steps, the mean occupancy
        self._counts = {kind: [0] * (len(STEP_BUCKETS) + 1) for kind in STEP_KINDS}
        self._sums = dict.fromkeys(STEP_KINDS, 0.0)
        # where a step's time goes: the device's own time (CUDA), and the engine thread's wait for it; the
        # rest of the thread's time is host work (launching, stop checks, text, the hand-over)
        self._device = dict.fromkeys(STEP_KINDS, 0.0)
        self.engine_wait = 0.0

    def request_done(self, outcome: str, prompt_tokens: int = 0, generated_tokens: int = 0) -> None:
        with self._lock:
            self.requests[outcome] += 1
            self.prompt_tokens += prompt_tokens
            self.generated_tokens += generated_tokens

    def step(self, kind: str, seconds: float, rows: int = 0, device: float | None = None) -> None:
        index = next((i for i, bound in enumerate(STEP_BUCKETS) if seconds <= bound), len(STEP_BUCKETS))
        with self._lock:
            self._counts[kind][index] += 1
            self._sums[kind] += seconds
            self._device[kind] += device or 0.0
            if kind == "decode":
                self.occupancy_sum += rows / self.max_rows

    def waited(self, seconds: float) -> None:
        with self._lock:
            self.engine_wait += seconds

    def steps(self, kind: str) -> int:
        with self._lock:
            return sum(self._counts[kind])

    def seconds(self, kind: str) -> tuple[float, float]:
        """The steps of `kind` so far: their seconds as the engine thread saw them, and the device's."""
        with self._lock:
            return self._sums[kind], self._device[kind]

    def render(self) -> str:
        with self._lock:
            requests, counts, sums = (
                dict(self.requests),
                {k: list(v) for k, v in self._counts.items()},
                dict(self._sums),
            )
            device, wait = dict(self._device), self.engine_wait
            prompt, generated, occupancy = self.prompt_tokens, self.generated_tokens, self.occupancy_sum
        gauges = self._gauges()
        lines = [
            f"# HELP {PREFIX}_requests_total Requests finished, by outcome.",
            f"# TYPE {PREFIX}_requests_total counter",
            *(f'{PREFIX}_requests_total{{outcome="{o}"}} {n}' for o, n in requests.items()),
            f"# HELP {PREFIX}_prompt_tokens_total Prompt tokens of finished requests.",
            f"# TYPE {PREFIX}_prompt_tokens_total counter",
            f"{PREFIX}_prompt_tokens_total {prompt}",
            f"# HELP {PREFIX}_generated_tokens_total Tokens generated for finished requests.",
            f"# TYPE {PREFIX}_generated_tokens_total counter",
            f"{PREFIX}_generated_tokens_total {generated}",
            f"# HELP {PREFIX}_queue_length Requests waiting for a row.",
            f"# TYPE {PREFIX}_queue_length gauge",
            f"{PREFIX}_queue_length {gauges.get('queue_length', 0)}",
            f"# HELP {PREFIX}_rows_in_use Rows holding a request (prefilling or decoding).",
            f"# TYPE {PREFIX}_rows_in_use gauge",
            f"{PREFIX}_rows_in_use {gauges.get('rows_in_use', 0)}",
            f"# HELP {PREFIX}_max_rows Rows the engine holds at most.",
            f"# TYPE {PREFIX}_max_rows gauge",
            f"{PREFIX}_max_rows {self.max_rows}",
            f"# HELP {PREFIX}_batch_occupancy_sum Decode steps' rows over max_rows, summed (divide by the "
            "decode step count for the mean occupancy).",
            f"# TYPE {PREFIX}_batch_occupancy_sum counter",
            f"{PREFIX}_batch_occupancy_sum {occupancy:.6f}",
            f"# HELP {PREFIX}_step_seconds Engine step latency: one decode step of every decoding row, or one "
            "prefill forward (the prompts that go in together).",
            f"# TYPE {PREFIX}_step_seconds histogram",
        ]
        for kind in STEP_KINDS:
            running = 0
            for bound, count in zip((*STEP_BUCKETS, "+Inf"), counts[kind]):
                running += count
                lines.append(f'{PREFIX}_step_seconds_bucket{{kind="{kind}",le="{bound}"}} {running}')
            lines.append(f'{PREFIX}_step_seconds_sum{{kind="{kind}"}} {sums[kind]:.6f}')
            lines.append(f'{PREFIX}_step_seconds_count{{kind="{kind}"}} {running}')
        lines += [
            f"# HELP {PREFIX}_device_seconds_total The device's own time in the steps (CUDA; 0 elsewhere).",
            f"# TYPE {PREFIX}_device_seconds_total counter",
            *(f'{PREFIX}_device_seconds_total{{kind="{kind}"}} {device[kind]:.6f}' for kind in STEP_KINDS),
            f"# HELP {PREFIX}_engine_wait_seconds_total The engine thread's time waiting for the device's tokens "
            "(the rest of its time is host work).",
            f"# TYPE {PREFIX}_engine_wait_seconds_total counter",
            f"{PREFIX}_engine_wait_seconds_total {wait:.6f}",
        ]
        return "\n".join(lines) + "\n"
