"""SlotEngine: continuous batching over graphs captured in per-row mode (DecodeSession(per_row=True)).

Every request holds one row of the cache from its admission to its release. Prompts go in eagerly: one forward
takes the next part (at most `chunk` tokens) of several requests' prompts at once, left-padded to the longest
part, each row at its own positions. Then each decode step replays one graph for every row that decodes, each row
at its own position. Requests keep the id `admit` gave them while the engine moves their rows: the rows in use
are kept at the front of the cache (a release moves the last row into the hole), so a step of n rows in use runs
the graph of the smallest bucket holding n rows. The first parts of prompts replay prefill graphs
(serve/prefill_graphs.py) where a plan of full graphs captured them.

One caller at a time: the engine holds no lock.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from accelerate_graph.common.errors import (
    BadOptionError,
    CaptureError,
    EngineWarning,
    ResourceError,
    UnsupportedModelError,
    first_line,
    option,
)
from accelerate_graph.core.buckets import bucket_for, context_for
from accelerate_graph.core.decode_session import PAD_TOKEN
from accelerate_graph.serve.prefill_graphs import PrefillGraphs, prefill_shapes
from accelerate_graph.serve.transfers import upload
from accelerate_graph.settings import Settings, current, use


@dataclass
class _Request:
    prompt: list[int]
    prefilled: int = 0  # prompt tokens in the row so far
    position: int = 0  # tokens in the row's cache: where its next token goes
    done: bool = False  # the whole prompt is in the row: it may decode


class SlotEngine:
    def __init__(self, prepared, *, chunk: int = 2048, settings: Settings | None = None):
        """`prepared`: pipeline.prepare's result for a CaptureRequest with per_row=True (its graphs, or
        its eager step where the plan is eager). `chunk`: the most prompt tokens one prefill forward runs,
        its padding included (rows x the longest part). An eager forward's host time is about the same for a
        few tokens as for a couple of thousand: fewer, fuller forwards hold the decode steps up less; with the
        prefill_graphs setting (`settings`, default those in use) a first part replays a captured graph."""
        session = prepared.session
        if not session.per_row:
            raise BadOptionError(
                "the engine needs graphs captured in per-row mode (each row at its own position); these share "
                "one write position.",
                f"Prepare with {option('per_row', True)}.",
            )
        if prepared.plan.tp > 1:
            raise UnsupportedModelError(
                f"the engine drives one process's graphs; this plan runs {prepared.plan.tp} tensor-parallel ranks.",
                f"Prepare with {option('tp', 1)}.",
            )
        if not isinstance(chunk, int) or chunk < 1:
            raise BadOptionError(f"a prefill chunk of {chunk!r} tokens is invalid.", "Use at least 1 token.")
        self.session = session
        self.graphs = prepared.graphs  # None: the plan is eager, each step runs the session's own forward
        self.chunk = chunk
        self.buckets = self.graphs.buckets if self.graphs is not None else (session.max_batch,)
        self.contexts = self.graphs.contexts if self.graphs is not None else (session.max_cache_len,)
        self.max_rows: int = self.buckets[-1]
        self.max_len: int = session.max_cache_len
        self.vocab_size: int = session.vocab_size
        self.prefill_graphs = self._prefill_graphs(prepared, settings or current())
        self._requests: dict[int, _Request] = {}
        self._order: list[int] = []  # request ids by physical row: row i of the cache holds _order[i]
        self._row_of: dict[int, int] = {}  # request id -> its physical row (the inverse of _order)

    def _prefill_graphs(self, prepared, settings: Settings) -> PrefillGraphs | None:
        """The prefill graphs of a plan of full graphs, where the setting asks for them and they capture; else
        None (eager prefills), said in one warning when the capture failed."""
        if not settings.prefill_graphs or self.graphs is None or prepared.plan.mode != "full":
            return None
        shapes = prefill_shapes(self.chunk, self.max_rows, self.max_len)
        if not shapes:
            return None
        try:
            with use(settings):
                return PrefillGraphs(self.session, self.graphs.backend, shapes)
        except (CaptureError, RuntimeError) as err:  # out of memory too: the decode graphs serve all the same
            self.graphs.backend.release()  # what the graphs captured before it holds
            warnings.warn(
                f"prefills run eagerly: their graphs did not capture ({first_line(err)})", EngineWarning, stacklevel=2
            )
            return None

    # -- rows ---------------------------------------------------------------------------------------------

    def free_rows(self) -> int:
        return self.max_rows - len(self._order)

    def admit(self, tokens: list[int]) -> int:
        """Give the prompt `tokens` a free row; returns the request's id (the smallest id not in use,
        below max_rows), which stays its own until `release` whichever cache row holds it. Requests
        admitted one after another, with no release between, hold consecutive rows: one prefill forward."""
        prompt = self._checked_prompt(tokens)
        if not self.free_rows():
            raise ResourceError(
                f"every one of the {self.max_rows} rows holds a request.",
                "Release a row first, or capture with a larger largest bucket.",
            )
        ident = next(i for i in range(self.max_rows) if i not in self._requests)
        self._requests[ident] = _Request(prompt)
        self._row_of[ident] = len(self._order)
        self._order.append(ident)
        return ident

    def _checked_prompt(self, tokens) -> list[int]:
        prompt = [int(t) for t in tokens]
        if not prompt:
            raise BadOptionError("the prompt is empty.", "Give at least one token.")
        if len(prompt) >= self.max_len:
            raise BadOptionError(
                f"a prompt of {len(prompt)} tokens leaves no room for a new token in a row of {self.max_len} "
                "cache slots.",
                f"Shorten the prompt or capture with a larger {option('max_cache_len')}.",
            )
        bad = next((t for t in prompt if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise BadOptionError(f"token id {bad} is not in the model's vocabulary of {self.vocab_size}.")
        return prompt

    def _request(self, row: int) -> _Request:
        request = self._requests.get(row)
        if request is None:
            raise BadOptionError(f"row {row} holds no request.", "Use an id that admit returned and not released.")
        return request

    def release(self, row: int) -> None:
        """Free the request's row (at any moment, also mid-prefill). The last row in use moves into the
        hole (its cache up to its position), so the rows in use stay at the front."""
        self._request(row)
        hole = self._row_of.pop(row)
        last = len(self._order) - 1
        if hole != last:
            moved = self._order[last]
            self.session.kv.copy_row(last, hole, self._requests[moved].position)
            self._order[hole] = moved
            self._row_of[moved] = hole
        self._order.pop()
        del self._requests[row]

    def position(self, row: int) -> int:
        """Tokens in the request's cache row: where its next token goes."""
        return self._request(row).position

    # -- steps --------------------------------------------------------------------------------------------

    def next_chunk(self, row: int) -> int:
        """Prompt tokens the request's next prefill runs (0 once its prompt is in)."""
        request = self._request(row)
        return min(self.chunk, len(request.prompt) - request.prefilled)

    def prefill_tokens(self, remaining: list[int]) -> int:
        """What one prefill forward of prompts with `remaining` tokens still to go in runs: rows x the longest
        part (a part: at most `chunk` tokens), its padding included."""
        return len(remaining) * min(self.chunk, max(remaining))

    def prefill_groups(self, rows: list[int]) -> list[list[int]]:
        """`rows` in order, cut where the next row would take a prefill forward past the chunk: the forwards
        that run each row's next part."""
        groups: list[list[int]] = []
        for row in rows:
            if groups and self.prefill_tokens([self.next_chunk(r) for r in (*groups[-1], row)]) <= self.chunk:
                groups[-1].append(row)
            else:
                groups.append([row])
        return groups

    def prefill(self, rows: list[int]) -> torch.Tensor:
        """The next part of each request's prompt into its row, eagerly, in one forward (one per run of
        consecutive rows), its other rows untouched; returns the logits [n, V] (on the device) of each
        request's last position so far, in the order of `rows`: the next token's where `next_chunk` is now 0.

        The parts are left-padded to the longest; a padding token sits past its row's whole prompt (only a
        row that finishes its prompt is padded), at a slot no token of the row attends before writing it."""
        requests = [self._request(r) for r in rows]
        if not rows or len(set(rows)) != len(rows):
            raise BadOptionError(f"a prefill of rows {list(rows)}.", "Give at least one row, and each row once.")
        for r, request in zip(rows, requests):
            if request.done:
                raise BadOptionError(f"row {r} has prefilled its whole prompt.", "Decode it instead.")
        remaining = [len(q.prompt) - q.prefilled for q in requests]
        if self.prefill_tokens(remaining) > self.chunk:
            raise BadOptionError(
                f"a prefill of {len(rows)} rows of up to {max(remaining)} prompt tokens runs "
                f"{self.prefill_tokens(remaining)} tokens, more than the chunk of {self.chunk}.",
                "Prefill fewer rows at once (prefill_tokens says what a set of rows runs).",
            )
        width = min(self.chunk, max(remaining))
        shape = self.prefill_graphs.shape_for(len(rows), width) if self.prefill_graphs is not None else None
        if shape is not None and not any(q.prefilled for q in requests):  # first parts: the graph of their shape
            parts = [q.prompt[: min(width, n)] for q, n in zip(requests, remaining)]
            logits = self.prefill_graphs.run(shape, [self._row_of[r] for r in rows], parts)
            for request, part in zip(requests, parts):
                request.prefilled = request.position = len(part)
                request.done = request.prefilled == len(request.prompt)
            return logits
        order = sorted(range(len(rows)), key=lambda i: self._row_of[rows[i]])  # by physical row
        tokens, positions = [], []
        for i in order:
            request = requests[i]
            first, part = request.prefilled, min(width, remaining[i])
            pads = width - part
            tokens += [PAD_TOKEN] * pads + request.prompt[first : first + part]
            # padding past the prompt (the last slot at most; a prompt leaves it free): never attended
            after = first + part
            positions += [min(after + j, self.max_len - 1) for j in range(pads)] + list(range(first, after))
        device = self.session.device
        tokens = upload(tokens, device).view(len(rows), width)
        positions = upload(positions, device).view(len(rows), width)
        runs = _consecutive_runs([self._row_of[rows[i]] for i in order])
        with torch.no_grad():
            outs = [self.session.row_forward(first, tokens[at:end], positions[at:end]) for first, at, end in runs]
        logits = outs[0] if len(outs) == 1 else torch.cat(outs)
        for i in order:
            request = requests[i]
            request.prefilled = request.position = request.prefilled + min(width, remaining[i])
            request.done = request.prefilled == len(request.prompt)
        if order == sorted(order):
            return logits
        back = sorted(range(len(order)), key=order.__getitem__)  # where each of `rows` sits in `order`
        return logits.index_select(0, upload(back, logits.device))

    def decode(self, rows: list[int], tokens: torch.Tensor) -> torch.Tensor:
        """One step for the requests `rows`, each fed its token of `tokens` [n] (long) at its own next
        position; returns their next-token logits [n, V] on the device, in the order of `rows`."""
        requests = [self._request(r) for r in rows]
        if not rows or len(set(rows)) != len(rows) or tokens.shape != (len(rows),):
            raise BadOptionError(
                f"a decode step of rows {list(rows)} with tokens of shape {tuple(tokens.shape)}.",
                "Give each row once, and one token per row.",
            )
        for r, request in zip(rows, requests):
            if not request.done:
                raise BadOptionError(f"row {r} has not prefilled its whole prompt yet.", "Finish its prefill first.")
            if request.position >= self.max_len:
                raise ResourceError(
                    f"row {r} is full: its next token would go to slot {request.position} of {self.max_len}.",
                    f"Release it, or capture with a larger {option('max_cache_len')}.",
                )
        physical = [self._row_of[r] for r in rows]
        positions = [q.position for q in requests]
        bucket = bucket_for(max(physical) + 1, self.buckets)
        context = context_for(max(positions), self.contexts)
        where = self._load(bucket, physical, tokens, positions)
        if self.graphs is not None:
            if self.graphs.check_pointers:
                self.graphs.check_static_buffers()
            _, graph = self.graphs.graph_at(bucket, context)
            logits = graph.replay()
        else:
            with torch.no_grad():
                logits = self.session.step_fn(bucket, context)()
        for request in requests:
            request.position += 1
        return logits.index_select(0, where)

    def _load(self, bucket: int, physical: list[int], tokens: torch.Tensor, positions: list[int]) -> torch.Tensor:
        """The step's buffers for rows [:bucket]: each decoding row its token, position and write slot;
        every other row (free, prefilling or not decoding now) a padding token at position 0, writing the
        spare slot, which no step reads. One upload: positions, write slots and the rows; returns the rows
        on the device."""
        s = self.session
        places = [0] * bucket + [s.spare_slot] * bucket
        for row, position in zip(physical, positions):
            places[row] = places[bucket + row] = position
        staged = upload(places + physical, s.device)
        s.position_ids[:bucket, 0].copy_(staged[:bucket])
        s.write_slots[:bucket, 0].copy_(staged[bucket : 2 * bucket])
        where = staged[2 * bucket :]
        if physical == list(range(bucket)):
            s.input_ids[:bucket, 0].copy_(tokens)
        else:
            s.input_ids[:bucket].fill_(PAD_TOKEN)
            s.input_ids[:, 0].index_copy_(0, where, tokens.to(s.device))
        return where


def _consecutive_runs(physical: list[int]) -> list[tuple[int, int, int]]:
    """(first row, start, end) of each run of consecutive rows in the ascending `physical` ([start:end] of it)."""
    runs, start = [], 0
    for at in range(1, len(physical) + 1):
        if at == len(physical) or physical[at] != physical[at - 1] + 1:
            runs.append((physical[start], start, at))
            start = at
    return runs
