"""Continuous batching: one engine thread drives the engine; requests join and leave the batch at any step.

Each turn of the loop: drop cancelled requests (their rows freed), give free rows to waiting requests, prefill at
most one chunk's worth of prompt tokens (the engine's `chunk`: one chunk of the oldest prompt, or several short
prompts whole), so a decode step waits for one chunk at most, then one decode step of every decoding row. The
next tokens are chosen on the device (greedy rows in one argmax, each sampling row with its own seeded
generator) and read to the host once a step, for the stop checks and the text.

A failure inside a step fails only the requests of that step (500); the loop goes on with the rest.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from accelerate_graph.generate.sampling import Sampler, Sampling
from accelerate_graph.serve.metrics import Metrics
from accelerate_graph.serve.protocol import ApiError, GenerationParams, usage
from accelerate_graph.serve.text import IncrementalText

DEFAULT_QUEUE = 256  # requests waiting for a row before new ones get 429


@dataclass
class Event:
    """What the engine thread hands a request: new text, its end (with usage), or its failure."""

    kind: str  # "text", "done" or "error"
    text: str = ""
    finish: str | None = None  # "stop" or "length" (kind "done")
    usage: dict | None = None
    error: ApiError | None = None


@dataclass(eq=False)
class Job:
    """One request inside the scheduler. `deliver` is called on the engine thread: it must hand over, not block."""

    prompt: list[int]
    params: GenerationParams
    text: IncrementalText
    deliver: Callable[[Event], None]
    row: int | None = None
    generated: int = 0
    last_token: int = 0
    cancelled: bool = False
    finished: bool = False
    sampler: Sampler | None = field(default=None, repr=False)

    @property
    def greedy(self) -> bool:
        return self.params.temperature == 0.0


class Scheduler:
    def __init__(
        self,
        engine,
        tokenizer,
        eos_ids: list[int],
        *,
        max_batch: int | None = None,
        queue_limit: int = DEFAULT_QUEUE,
        metrics: Metrics | None = None,
        device: torch.device | str = "cpu",
    ):
        self.engine = engine
        self.tokenizer = tokenizer
        self.eos = set(eos_ids)
        self.max_rows = min(max_batch or engine.max_rows, engine.max_rows)
        self.chunk = engine.chunk  # prompt tokens a turn prefills at most: what a decode step may wait for
        self.queue_limit = queue_limit
        self.metrics = metrics or Metrics(self.max_rows, self.gauges)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._waiting: deque[Job] = deque()
        self._cancelled: list[Job] = []
        self._prefilling: deque[Job] = deque()
        self._decoding: list[Job] = []
        self._draining = False
        self._abort: ApiError | None = None
        self._closing = False
        self._unfinished = 0  # submitted and not finished, counted under the lock (drain waits for 0)
        self._device = torch.device(device)  # the engine's: where each step's tokens go
        self._thread = threading.Thread(target=self._run, name="serve-engine", daemon=True)

    # the front's side (any thread) ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def new_job(self, prompt: list[int], params: GenerationParams, deliver: Callable[[Event], None]) -> Job:
        return Job(prompt, params, IncrementalText(self.tokenizer, params.stop), deliver)

    def submit(self, job: Job) -> None:
        """Queue `job`; ApiError 503 while draining, 429 when the queue is full."""
        with self._lock:
            if self._draining or self._closing:
                raise ApiError(503, "the server is shutting down and takes no new request; retry on another.")
            if len(self._waiting) >= self.queue_limit:
                raise ApiError(
                    429,
                    f"the queue is full ({self.queue_limit} requests wait for a row); retry shortly.",
                    code="queue_full",
                )
            self._waiting.append(job)
            self._unfinished += 1
            self._wake.notify()

    def cancel(self, job: Job) -> None:
        """The client went away: a waiting job leaves at once, a running one frees its row on the next turn."""
        with self._lock:
            if job.finished or job.cancelled:
                return
            job.cancelled = True
            if job in self._waiting:
                self._waiting.remove(job)
                job.finished = True
                self._unfinished -= 1
                self.metrics.request_done("cancelled")
                return
            self._cancelled.append(job)
            self._wake.notify()

    def drain(self) -> None:
        """Take no new request; those queued and running go on."""
        with self._lock:
            self._draining = True

    def abort(self, error: ApiError) -> None:
        """Fail every queued and running request with `error` (a drain's deadline passed)."""
        with self._lock:
            self._abort = error
            self._wake.notify()

    def close(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._closing = True
            self._wake.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def draining(self) -> bool:
        return self._draining

    def queue_length(self) -> int:
        return len(self._waiting)

    def rows_in_use(self) -> int:
        return len(self._prefilling) + len(self._decoding)

    def in_flight(self) -> int:
        """Requests taken and not finished: waiting, prefilling, decoding, or leaving."""
        with self._lock:
            return self._unfinished

    def gauges(self) -> dict[str, float]:
        return {"queue_length": self.queue_length(), "rows_in_use": self.rows_in_use()}

    # the engine thread ---------------------------------------------------------------------------------------

    def _run(self) -> None:
        if self._device.type == "cuda":  # a thread's current device is cuda:0 until it says otherwise
            torch.cuda.set_device(self._device)
        with torch.no_grad():
            self._loop()

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not (self._waiting or self._cancelled or self._prefilling or self._decoding) and not (
                    self._closing or self._abort
                ):
                    self._wake.wait()
                cancelled, self._cancelled = self._cancelled, []
                abort, self._abort = self._abort, None
                closing = self._closing
                admitted = self._admissible() if not (abort or closing) else []
            for job in cancelled:
                self._end(job, "cancelled")
            if cancelled:  # their rows are free now: a step over them would fail every request in it
                self._prefilling = deque(job for job in self._prefilling if not job.finished)
                self._decoding = [job for job in self._decoding if not job.finished]
            if abort or closing:
                self._fail_all(abort or ApiError(503, "the server stopped before this request finished."))
                if closing:
                    return
                continue
            try:
                for job in admitted:
                    self._admit(job)
                self._prefill()
                self._decode()
            except Exception as err:  # noqa: BLE001 - outside any one step (a stop check, a hand-over): the
                # requests in flight fail, the thread lives on for the next ones
                self._fail_all(ApiError(500, f"the server failed between steps: {_line(err)}"))

    def _admissible(self) -> list[Job]:
        """Waiting jobs that get a row this turn (the lock held)."""
        taken = []
        free = min(self.engine.free_rows(), self.max_rows - len(self._prefilling) - len(self._decoding))
        while self._waiting and len(taken) < free:
            taken.append(self._waiting.popleft())
        return taken

    def _admit(self, job: Job) -> None:
        try:
            job.row = self.engine.admit(job.prompt)
        except Exception as err:  # noqa: BLE001 - a failed admission fails this request only
            self._fail(job, err)
            return
        self._prefilling.append(job)

    def _prefill(self) -> None:
        """Prefill chunks, oldest row first, while their prompt tokens fit one chunk: a long prompt takes a
        chunk a turn, several short ones share one."""
        budget = self.chunk
        while self._prefilling:
            job = self._prefilling[0]
            size = self.engine.next_chunk(job.row)
            if size > budget:
                return
            budget -= size
            self._prefill_chunk(job)

    def _prefill_chunk(self, job: Job) -> None:
        started = time.perf_counter()
        try:
            logits = self.engine.prefill_chunk(job.row)
            token = None if logits is None else self._choose([job], logits[None])[0]
        except Exception as err:  # noqa: BLE001 - a failed chunk fails its request only
            self._prefilling.popleft()
            self._fail(job, err)
            return
        self.metrics.step("prefill", time.perf_counter() - started)
        if token is None:
            return
        if self._take(job, token):
            self._decoding.append(job)
        self._prefilling.popleft()

    def _decode(self) -> None:
        jobs = list(self._decoding)  # the list itself stays whole during the step: the gauges read it
        if not jobs:
            return
        started = time.perf_counter()
        try:
            rows = [job.row for job in jobs]
            tokens = torch.tensor([job.last_token for job in jobs], dtype=torch.long, device=self._device)
            logits = self.engine.decode(rows, tokens)
            chosen = self._choose(jobs, logits)
        except Exception as err:  # noqa: BLE001 - a failed step fails the requests in it, the server goes on
            for job in jobs:
                self._fail(job, err)
            self._decoding = []
            return
        self.metrics.step("decode", time.perf_counter() - started, len(jobs))
        self._decoding = [job for job, token in zip(jobs, chosen) if self._take(job, token)]

    def _choose(self, jobs: list[Job], logits: torch.Tensor) -> list[int]:
        """Each job's next token from its row of `logits` [n, V], chosen on the device; one host read."""
        greedy = [i for i, job in enumerate(jobs) if job.greedy]
        if len(greedy) == len(jobs):
            return logits.argmax(-1).tolist()
        chosen = torch.empty(len(jobs), dtype=torch.long, device=logits.device)
        if greedy:
            index = torch.tensor(greedy, device=logits.device)
            chosen[index] = logits[index].argmax(-1)
        for i, job in enumerate(jobs):
            if not job.greedy:
                chosen[i] = self._sampler(job, logits.device)(logits[i : i + 1])[0]
        return chosen.tolist()

    @staticmethod
    def _sampler(job: Job, device: torch.device) -> Sampler:
        if job.sampler is None:
            p = job.params
            seed = p.seed if p.seed is not None else random.SystemRandom().randrange(2**63)
            job.sampler = Sampler(Sampling(temperature=p.temperature, top_p=p.top_p, seed=seed), device)
        return job.sampler

    def _take(self, job: Job, token: int) -> bool:
        """Record `token` for `job`, hand out its text; False when the job ended with it."""
        job.generated += 1
        if token in self.eos:
            self._end(job, "stop")
            return False
        piece = job.text.push(token)
        if piece:
            job.deliver(Event("text", piece))
        limit = job.params.max_tokens
        if job.text.stopped:
            self._end(job, "stop")
        elif (limit is not None and job.generated >= limit) or self.engine.position(job.row) >= self.engine.max_len:
            self._end(job, "length")
        else:
            job.last_token = token
            return True
        return False

    def _release(self, job: Job) -> None:
        if job.row is not None:
            row, job.row = job.row, None
            self.engine.release(row)

    def _end(self, job: Job, finish: str) -> None:
        """A job done: its row freed, its last text and usage handed out (or nothing: it was cancelled)."""
        if not self._mark_finished(job):
            return
        try:
            self._release(job)
        except Exception as err:  # noqa: BLE001 - a row that cannot be freed is this request's failure
            self._fail(job, err, already_finished=True)
            return
        if finish == "cancelled":
            self.metrics.request_done("cancelled", len(job.prompt), job.generated)
            return
        self.metrics.request_done("ok", len(job.prompt), job.generated)  # counted before the client hears
        rest = job.text.finish()
        if rest:
            job.deliver(Event("text", rest))
        job.deliver(Event("done", finish=finish, usage=usage(len(job.prompt), job.generated)))

    def _fail(self, job: Job, err: BaseException | ApiError, already_finished: bool = False) -> None:
        if not already_finished and not self._mark_finished(job):
            return
        try:
            self._release(job)
        except Exception:  # noqa: BLE001, S110 - the request fails already; its row stays taken
            pass
        error = err if isinstance(err, ApiError) else ApiError(500, f"the engine failed on this request: {_line(err)}")
        self.metrics.request_done("error", len(job.prompt), job.generated)
        job.deliver(Event("error", error=error))

    def _mark_finished(self, job: Job) -> bool:
        """Whether `job` was unfinished (now it is finished)."""
        with self._lock:
            if job.finished:
                return False
            job.finished = True
            self._unfinished -= 1
            return True

    def _fail_all(self, error: ApiError) -> None:
        with self._lock:
            waiting, self._waiting = list(self._waiting), deque()
        running = [*self._prefilling, *self._decoding]
        self._prefilling, self._decoding = deque(), []
        for job in [*waiting, *running]:
            self._fail(job, error)


def _line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__
