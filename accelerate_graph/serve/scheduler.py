"""Continuous batching: one engine thread drives the engine; requests join and leave the batch at any step.

Each turn of the loop: drop cancelled requests (their rows freed), run one prefill forward, launch one decode
step of every decoding row, then read the tokens that the last turn's step and this turn's prefill chose and
hand them out. The prefill takes the waiting requests together, as many as one forward of the engine's `chunk`
tokens holds (rows x the longest prompt); a prompt longer than a chunk goes in alone, a chunk a turn. So a
decode step waits for one prefill forward at most.

Tokens stay on the device from step to step: each step is fed what the step before chose (greedy rows in one
argmax, each sampling row with its own seeded generator), and its own choice is copied to the host without
waiting, to be read in the next turn, after the next step is launched (a prefill's in its own turn: the step
queued behind it keeps the device busy). So the host's work for a step (the stop checks, the text, the
hand-over) runs while the device computes the next one. A request that ends on an end-of-sequence token or a
stop string has run one step more, whose token is dropped; no step runs past `max_tokens` or the cache's end,
which are known ahead. The events of a turn go to the front in one hand-over.

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
from accelerate_graph.serve.transfers import TokenRead, launch_mark, upload

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
    """One request inside the scheduler. Its events go to `deliver` on the front's thread: the engine thread
    calls `post(fn, *args)` (the front's event loop's call_soon_threadsafe) to run fn there; it must not block."""

    prompt: list[int]
    params: GenerationParams
    text: IncrementalText
    deliver: Callable[[Event], None]
    post: Callable[..., object]
    limit: int  # tokens it may make: max_tokens, or fewer where its cache row ends first
    row: int | None = None
    issued: int = 0  # tokens chosen on the device (read on the host a turn later)
    generated: int = 0  # tokens read and handed out
    cancelled: bool = False
    finished: bool = False
    sampler: Sampler | None = field(default=None, repr=False)

    @property
    def greedy(self) -> bool:
        return self.params.temperature == 0.0


@dataclass
class _Launched:
    """A prefill or decode step on its way: its jobs, in the order of the tokens it chose, and their read."""

    kind: str  # "prefill" or "decode"
    jobs: list[Job]
    read: TokenRead
    started: float


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
        self.chunk = engine.chunk  # prompt tokens one prefill forward runs at most: what a decode step may wait for
        self.queue_limit = queue_limit
        self.metrics = metrics or Metrics(self.max_rows, self.gauges)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._waiting: deque[Job] = deque()
        self._cancelled: list[Job] = []
        self._running: list[Job] = []  # holding a row: prefilling, decoding, or their last token on its way
        self._prefilling: list[Job] = []  # prompts not all in: admitted this turn, or one longer than a chunk
        self._decoding: list[Job] = []  # those the next decode step runs
        self._launched: list[_Launched] = []  # the last turn's decode step: read in this one
        self._outbox: list[tuple[Job, Event]] = []  # this turn's events, handed over at its end
        self._last_decode_read = 0.0  # when the last decode step's tokens reached the host
        self._draining = False
        self._abort: ApiError | None = None
        self._closing = False
        self._unfinished = 0  # submitted and not finished, counted under the lock (drain waits for 0)
        self._device = torch.device(device)  # the engine's: where each step's tokens stay
        self._last_tokens = torch.zeros(engine.max_rows, dtype=torch.long, device=self._device)  # by request id
        self._step_ids: list[int] = []  # the rows of the last decode step, and them on the device
        self._step_index: torch.Tensor | None = None
        self._thread = threading.Thread(target=self._run, name="serve-engine", daemon=True)

    # the front's side (any thread) ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def new_job(
        self, prompt: list[int], params: GenerationParams, deliver: Callable[[Event], None], post: Callable[..., object]
    ) -> Job:
        room = self.engine.max_len - len(prompt) + 1  # the prefill's token, then one a free slot
        limit = room if params.max_tokens is None else min(params.max_tokens, room)
        return Job(prompt, params, IncrementalText(self.tokenizer, params.stop), deliver, post, limit)

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
        return self.engine.max_rows - self.engine.free_rows()

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
                while not (self._waiting or self._cancelled or self._running) and not (self._closing or self._abort):
                    self._wake.wait()
                cancelled, self._cancelled = self._cancelled, []
                abort, self._abort = self._abort, None
                closing = self._closing
                admitted = self._admissible() if not (abort or closing) else []
            try:
                for job in cancelled:
                    self._end(job, "cancelled")
                if cancelled:  # their rows are free now: a step over them would fail every request in it
                    self._forget_finished()
                if abort or closing:
                    self._fail_all(abort or ApiError(503, "the server stopped before this request finished."))
                    if closing:
                        return
                    continue
                try:
                    prefilled, stepped = self._launch(admitted)
                    self._read([*self._launched, *prefilled])
                    self._launched = stepped
                except Exception as err:  # noqa: BLE001 - outside any one step (a stop check, a hand-over):
                    # the requests in flight fail, the thread lives on for the next ones
                    self._fail_all(ApiError(500, f"the server failed between steps: {_line(err)}"))
            finally:
                self._forget_finished()
                self._hand_over()

    def _admissible(self) -> list[Job]:
        """Waiting jobs that get a row this turn, all prefilled by one forward (the lock held): none while a
        prompt longer than a chunk is still going in."""
        if self._prefilling:
            return []
        free = min(self.engine.free_rows(), self.max_rows - self.rows_in_use())
        taken: list[Job] = []
        while self._waiting and len(taken) < free:
            lengths = [len(job.prompt) for job in (*taken, self._waiting[0])]
            if taken and self.engine.prefill_tokens(lengths) > self.chunk:
                break
            taken.append(self._waiting.popleft())
        return taken

    def _launch(self, admitted: list[Job]) -> tuple[list[_Launched], list[_Launched]]:
        """This turn's prefill and decode step, on their way to the device (nothing read back yet)."""
        for job in admitted:
            try:
                job.row = self.engine.admit(job.prompt)
            except Exception as err:  # noqa: BLE001 - a failed admission fails this request only
                self._fail(job, err)
                continue
            self._running.append(job)
            self._prefilling.append(job)
        prefilled = self._prefill() if self._prefilling else []
        return prefilled, self._decode() if self._decoding else []

    def _prefill(self) -> list[_Launched]:
        """One forward of the prefilling prompts; those now all in get their first token and decode."""
        jobs, started, mark = self._prefilling, time.perf_counter(), launch_mark(self._device)
        try:
            logits = self.engine.prefill([job.row for job in jobs])
            ready = [i for i, job in enumerate(jobs) if self.engine.next_chunk(job.row) == 0]
            if not ready:  # a prompt longer than a chunk, part of the way in: no token, but a forward to count
                return [_Launched("prefill", [], TokenRead(logits.new_empty(0, dtype=torch.long), mark), started)]
            firsts = [jobs[i] for i in ready]
            if len(ready) < len(jobs):
                logits = logits.index_select(0, upload(ready, logits.device))
            chosen = self._choose(firsts, logits)
            self._last_tokens.index_copy_(0, upload([job.row for job in firsts], self._device), chosen)
        except Exception as err:  # noqa: BLE001 - a failed prefill fails its requests only
            for job in jobs:
                self._fail(job, err)
            self._prefilling = []
            return []
        self._prefilling = [job for job in jobs if job not in firsts]
        for job in firsts:
            job.issued = 1
        self._decoding += [job for job in firsts if job.issued < job.limit]
        return [_Launched("prefill", firsts, TokenRead(chosen, mark), started)]

    def _decode(self) -> list[_Launched]:
        jobs, started, mark = self._decoding, time.perf_counter(), launch_mark(self._device)
        try:
            rows = [job.row for job in jobs]
            if rows != self._step_ids:  # the same rows as the last step: their ids are on the device already
                self._step_ids, self._step_index = rows, upload(rows, self._device)
            logits = self.engine.decode(rows, self._last_tokens.index_select(0, self._step_index))
            chosen = self._choose(jobs, logits)
            self._last_tokens.index_copy_(0, self._step_index, chosen)
        except Exception as err:  # noqa: BLE001 - a failed step fails the requests in it, the server goes on
            for job in jobs:
                self._fail(job, err)
            self._decoding = []
            return []
        for job in jobs:
            job.issued += 1
        self._decoding = [job for job in jobs if job.issued < job.limit]
        return [_Launched("decode", jobs, TokenRead(chosen, mark), started)]

    def _choose(self, jobs: list[Job], logits: torch.Tensor) -> torch.Tensor:
        """Each job's next token [n] from its row of `logits` [n, V], chosen on the device (no host read)."""
        greedy = [i for i, job in enumerate(jobs) if job.greedy]
        if len(greedy) == len(jobs):
            return logits.argmax(-1)
        chosen = torch.empty(len(jobs), dtype=torch.long, device=logits.device)
        if greedy:
            index = upload(greedy, logits.device)
            chosen[index] = logits[index].argmax(-1)
        for i, job in enumerate(jobs):
            if not job.greedy:
                chosen[i] = self._sampler(job, logits.device)(logits[i : i + 1])[0]
        return chosen

    @staticmethod
    def _sampler(job: Job, device: torch.device) -> Sampler:
        if job.sampler is None:
            p = job.params
            seed = p.seed if p.seed is not None else random.SystemRandom().randrange(2**63)
            job.sampler = Sampler(Sampling(temperature=p.temperature, top_p=p.top_p, seed=seed), device)
        return job.sampler

    def _read(self, launched: list[_Launched]) -> None:
        """The tokens of `launched`, to their jobs (those that ended since drop theirs)."""
        for step in launched:
            waited = time.perf_counter()
            try:
                tokens = step.read.tokens()
                device = step.read.device_seconds()
            except Exception as err:  # noqa: BLE001 - a step that failed on the device fails its requests
                for job in step.jobs:
                    self._fail(job, err)
                continue
            now = time.perf_counter()
            self.metrics.waited(now - waited)
            if step.kind == "decode":  # a step queued behind the one before starts when that one is read
                self.metrics.step("decode", now - max(step.started, self._last_decode_read), len(step.jobs), device)
                self._last_decode_read = now
            else:
                self.metrics.step("prefill", now - step.started, device=device)
            for job, token in zip(step.jobs, tokens):
                if not job.finished:
                    self._take(job, token)

    def _take(self, job: Job, token: int) -> None:
        """Record `token` for `job` and queue its text; end the job where the token ends it."""
        job.generated += 1
        if token in self.eos:
            self._end(job, "stop")
            return
        piece = job.text.push(token)
        if piece:
            self._outbox.append((job, Event("text", piece)))
        if job.text.stopped:
            self._end(job, "stop")
        elif job.generated >= job.limit:
            self._end(job, "length")

    def _forget_finished(self) -> None:
        self._running = [job for job in self._running if not job.finished]
        self._prefilling = [job for job in self._prefilling if not job.finished]
        self._decoding = [job for job in self._decoding if not job.finished]

    def _hand_over(self) -> None:
        """The turn's events to the front: one post per receiving loop, the events in their order."""
        batches: dict[Callable[..., object], list[tuple[Callable[[Event], None], Event]]] = {}
        for job, event in self._outbox:
            batches.setdefault(job.post, []).append((job.deliver, event))
        self._outbox = []
        for post, events in batches.items():
            try:
                post(_deliver_all, events)
            except RuntimeError:  # its event loop has closed: nobody waits for these events
                pass

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
            self._outbox.append((job, Event("text", rest)))
        self._outbox.append((job, Event("done", finish=finish, usage=usage(len(job.prompt), job.generated))))

    def _fail(self, job: Job, err: BaseException | ApiError, already_finished: bool = False) -> None:
        if not already_finished and not self._mark_finished(job):
            return
        try:
            self._release(job)
        except Exception:  # noqa: BLE001, S110 - the request fails already; its row stays taken
            pass
        error = err if isinstance(err, ApiError) else ApiError(500, f"the engine failed on this request: {_line(err)}")
        self.metrics.request_done("error", len(job.prompt), job.generated)
        self._outbox.append((job, Event("error", error=error)))

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
        running, self._running = self._running, []
        self._prefilling, self._decoding, self._launched = [], [], []
        for job in [*waiting, *running]:
            self._fail(job, error)


def _deliver_all(events: list[tuple[Callable[[Event], None], Event]]) -> None:
    """On the front's event loop: each event to its request."""
    for deliver, event in events:
        deliver(event)


def _line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__
