"""Capture one decode graph per (batch bucket, context bucket), largest first, and dispatch steps to them."""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from accelerate_graph.common.debug import debug_enabled
from accelerate_graph.common.errors import (
    CaptureError,
    EngineWarning,
    ReplaySafetyError,
    ResourceError,
    first_line,
    is_out_of_memory,
    option,
)
from accelerate_graph.common.source_location import traceback_location
from accelerate_graph.core.backends import CapturedGraph, GraphBackend
from accelerate_graph.core.buckets import bucket_for, context_for
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.core.module_stack import ModuleStack

PIECEWISE_HINT = "Use {mode='piecewise'} to run that module eagerly, or {mode='eager'}."


def capture_order(buckets) -> list[int]:
    """The batch buckets in the order capture_decode_graphs captures them: largest first, so smaller graphs
    reuse the pool the largest grew (batch 1 first cost batch 1 and 8 more than it gave 16 and 32). A
    lazy capture (LaterCapture, generate's) takes each graph when first used instead."""
    return sorted(buckets, reverse=True)


@dataclass
class BucketCapture:
    bucket: int
    seconds: float
    memory_bytes: int
    context: int = 0  # cache slots its attention reads (0: unknown, plans written before context buckets)


@contextmanager
def frozen_gc(collect_first: bool = True) -> Iterator[None]:
    """No garbage collection during capture: a collection can free memory a graph still points at.
    Automatic collections are off and every object alive at the start is frozen (out of reach of an
    explicit gc.collect() too). `collect_first` frees garbage before the pool grows; a lazy capture,
    on the way to `generate`'s first token or between two tokens, skips it: with torch's compiler
    stack imported a full collection took 0.2 s, and frozen garbage cannot be freed mid-capture."""
    if collect_first:
        gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


class DecodeGraphs:
    """Replays the graph of the smallest bucket that fits a batch and the smallest context bucket that
    holds the write slot; larger batches run eagerly, counted."""

    def __init__(
        self,
        session: DecodeSession,
        graphs: dict[tuple[int, int], CapturedGraph],
        dropped: list[int] | None = None,
        later: LaterCapture | None = None,
        backend: GraphBackend | None = None,
    ):
        self.session = session
        self.graphs = graphs  # (batch bucket, context bucket) -> graph
        pending = later.pending if later is not None else set()
        self.buckets = tuple(sorted({b for b, _ in graphs} | {b for b, _ in pending}))
        self.contexts = tuple(sorted({c for _, c in graphs} | {c for _, c in pending}))
        self.dropped = dropped or []  # buckets left out by --max-memory
        self.eager_fallbacks = 0
        self.check_pointers = debug_enabled()  # --debug also checks buffer addresses per replay
        self._pointers = {name: t.data_ptr() for name, t in self._static_buffers().items()}
        self._later = later  # graphs captured when first needed (capture_decode_graphs(lazy=True))
        self.backend = backend  # what captured them: small graphs of the same kind may join them (generate)
        self.retained: list[torch.Tensor] = []  # tensors the graphs read that the model no longer holds

    @property
    def pending(self) -> set[tuple[int, int]]:
        """(bucket, context) graphs not captured yet: captured on first use, before their first replay."""
        return self._later.pending if self._later is not None else set()

    def captures(self) -> list[BucketCapture]:
        """What each graph took, largest bucket and context first (capture_order's, whatever order a lazy
        capture took them in)."""
        return [
            BucketCapture(b, g.stats.seconds, g.stats.memory_bytes, c)
            for (b, c), g in sorted(self.graphs.items(), reverse=True)
        ]

    def bucket_memory(self, bucket: int) -> int:
        return sum(g.stats.memory_bytes for (b, _), g in self.graphs.items() if b == bucket)

    def bucket_seconds(self, bucket: int) -> float:
        return sum(g.stats.seconds for (b, _), g in self.graphs.items() if b == bucket)

    def context_now(self) -> int:
        """The context bucket the next step runs in, from the host's copy of the write slot."""
        slot = self.session.kv.next_slot
        context = context_for(slot, self.contexts)
        if context is None:
            raise ReplaySafetyError(
                f"the cache is full: the next token would go to slot {slot} of {self.session.max_cache_len}.",
                "Capture with a larger {max_cache_len}.",
            )
        return context

    def run(self, tokens: torch.Tensor, positions: torch.Tensor, copy: bool = True) -> torch.Tensor:
        """Next-token logits [b, V] for tokens/positions [b]. With copy=False the result is a view of
        the graph's output, overwritten by the next replay."""
        batch = tokens.shape[0]
        bucket = bucket_for(batch, self.buckets)
        if bucket is None:
            self._note_fallback(batch)
            return self._eager(tokens, positions)
        if self.check_pointers:
            self.check_static_buffers()
        self.session.load_inputs(bucket, tokens, positions)
        logits = self.replay_loaded(bucket)[:batch]
        return logits.clone() if copy else logits

    def graph_now(self, bucket: int) -> tuple[tuple[int, int], CapturedGraph]:
        """The graph of `bucket` for the next step's context bucket, captured now if it was left for later."""
        return self.graph_at(bucket, self.context_now())

    def graph_at(self, bucket: int, context: int) -> tuple[tuple[int, int], CapturedGraph]:
        """The graph of (`bucket`, `context`), captured now if it was left for later."""
        key = (bucket, context)
        if key not in self.graphs:
            if self._later is None or key not in self._later.pending:
                raise ReplaySafetyError(f"no graph was captured for bucket {bucket}, context {key[1]}.")
            self.graphs[key] = self._later.capture(*key)
        return key, self.graphs[key]

    def replay_loaded(self, bucket: int) -> torch.Tensor:
        """One step of `bucket` rows from inputs already in the session's buffers (no copy, no check, no
        host read): the graph's output [bucket, V], overwritten by its next replay."""
        _, graph = self.graph_now(bucket)
        logits = graph.replay()
        self.session.kv.advance()
        return logits

    def _static_buffers(self) -> dict[str, torch.Tensor]:
        """Every tensor the graphs read or write in place, by name."""
        s = self.session
        buffers = {"input_ids": s.input_ids, "position_ids": s.position_ids, "attention_mask": s.attention_mask}
        if s.per_row:
            buffers.update({"write_slots": s.write_slots, "slot_numbers": s.slot_numbers})
        for i, layer in enumerate(s.kv.layers):
            buffers.update(
                {
                    f"cache layer {i} keys": layer.keys,
                    f"cache layer {i} values": layer.values,
                    f"cache layer {i} position": layer.cumulative_length,
                }
            )
        return buffers

    def check_static_buffers(self) -> None:
        """A graph keeps the addresses it captured: a buffer replaced since then would be silently ignored.
        The host's write slot must match the device's, or a context bucket would be too short (per-row
        mode keeps its write slots in `write_slots`, loaded with every step's positions)."""
        device_slot = int(self.session.kv.positions()[0].item())
        if not self.session.per_row and device_slot != self.session.kv.next_slot:
            raise ReplaySafetyError(
                f"the cache's write slot is {device_slot} on the device but {self.session.kv.next_slot} on the host.",
                "Move the cache only through the session (prefill, rewind, restore) and DecodeGraphs.",
            )
        for name, tensor in self._static_buffers().items():
            if tensor.data_ptr() != self._pointers.get(name):
                raise ReplaySafetyError(
                    f"the {name} buffer moved since capture: a replay would not see it.",
                    "Re-capture after replacing session buffers or the cache.",
                )

    def _eager(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """A batch no graph fits: the session's own step, without graphs, over the whole cache."""
        batch = tokens.shape[0]
        self.session.load_inputs(batch, tokens, positions)
        with torch.no_grad():
            logits = self.session.step_fn(batch)()
        self.session.kv.advance()
        return logits

    def _note_fallback(self, batch: int) -> None:
        if self.eager_fallbacks == 0:
            warnings.warn(
                f"batch {batch} is larger than the largest captured bucket {self.buckets[-1]}: "
                "running it eagerly (slow). Capture a larger bucket.",
                EngineWarning,
                stacklevel=3,
            )
        self.eager_fallbacks += 1


def _capture_one(session: DecodeSession, backend: GraphBackend, bucket: int, context: int, islands) -> CapturedGraph:
    """One graph; a failure names the bucket and the submodule that was running."""
    modules = ModuleStack(session.model)
    # compiled code does not run module hooks one by one: under --fuse a failure names no module
    attribution = modules.active() if session.fused is None else contextlib.nullcontext()
    try:
        with attribution:
            return backend.capture(session.capture_step(bucket, context), islands=islands, batch=bucket)
    except (CaptureError, RuntimeError) as err:
        if is_out_of_memory(err):
            raise
        message = err.message if isinstance(err, CaptureError) else first_line(err)
        where = modules.describe_current()
        at = traceback_location(err)
        hint = session.fused.refusal_hint if session.fused is not None else PIECEWISE_HINT
        raise CaptureError(
            f"capturing bucket {bucket} failed in {where}{' at ' + at if at else ''}: {message}", hint
        ) from err


# Slots a capture writes from slot 0: its warm-ups and the recording itself (the emulation runs it) each
# write one token per row.
CAPTURE_WRITES = 3


class LaterCapture:
    """Graphs captured on first use (`generate`: a request needs one or two of them, and the first token
    should not wait for the rest). A capture mid-generation keeps the session as it was: the rows and
    slots its warm-ups overwrite, the write positions and the input buffers are put back after it. In
    per-row mode the warm-ups write the spare slot only, which no step reads."""

    def __init__(self, session: DecodeSession, backend: GraphBackend, pending, islands, on_captured):
        self.session = session
        self.backend = backend
        self.pending = set(pending)
        self.islands = islands
        self.on_captured = on_captured

    def capture(self, bucket: int, context: int) -> CapturedGraph:
        s = self.session
        kept = s.kv.snapshot(bucket, 0, CAPTURE_WRITES)
        inputs = (s.input_ids.clone(), s.position_ids.clone(), s.write_slots.clone())
        s.kv.rewind(0)
        if s.per_row:
            s.write_slots.fill_(s.spare_slot)
        try:
            with frozen_gc(collect_first=False):
                graph = _capture_one(s, self.backend, bucket, context, self.islands)
        except RuntimeError as err:
            if not is_out_of_memory(err):
                raise
            raise ResourceError(
                f"out of device memory while capturing bucket {bucket}, context {context}.",
                "Lower the largest {buckets} value or {max_cache_len}.",
            ) from err
        finally:
            s.kv.restore(kept)
            s.input_ids.copy_(inputs[0])
            s.position_ids.copy_(inputs[1])
            s.write_slots.copy_(inputs[2])
        self.pending.discard((bucket, context))
        if self.on_captured:
            self.on_captured(BucketCapture(bucket, graph.stats.seconds, graph.stats.memory_bytes, context))
        return graph


def capture_decode_graphs(
    session: DecodeSession,
    backend: GraphBackend,
    buckets: tuple[int, ...],
    on_captured: Callable[[BucketCapture], None] | None = None,
    islands: Sequence[torch.nn.Module] = (),
    max_memory_bytes: int | None = None,
    contexts: tuple[int, ...] = (),
    lazy: bool = False,
) -> DecodeGraphs:
    """Capture every (bucket, context) graph in capture_order (largest first: smaller graphs reuse the
    pool it grew), then reset the cache: warm-ups wrote into it. `contexts` are the context buckets
    (default: the whole cache only). Buckets whose graphs would push the total past `max_memory_bytes`
    are dropped (listed in `DecodeGraphs.dropped`); running out of memory frees what was captured.
    `lazy`: capture none now, each on its first use (LaterCapture); not with `max_memory_bytes`, which
    needs every graph measured."""
    contexts = tuple(sorted(set(contexts) | {session.max_cache_len}, reverse=True))
    if lazy and max_memory_bytes is None:
        pending = {(b, c) for b in buckets for c in contexts}
        session.kv.reset()
        later = LaterCapture(session, backend, pending, islands, on_captured)
        return DecodeGraphs(session, {}, later=later, backend=backend)
    graphs: dict[tuple[int, int], CapturedGraph] = {}
    dropped: list[int] = []
    held = 0
    with frozen_gc():
        for bucket in capture_order(buckets):
            mine: dict[tuple[int, int], CapturedGraph] = {}
            for context in contexts:
                session.kv.rewind(0)
                try:
                    mine[bucket, context] = _capture_one(session, backend, bucket, context, islands)
                except RuntimeError as err:
                    if not is_out_of_memory(err):
                        raise
                    graphs.clear()
                    mine.clear()
                    backend.release()
                    raise ResourceError(
                        f"out of device memory while capturing bucket {bucket} "
                        f"({held / 2**20:.0f} MiB of graphs captured before it were freed).",
                        f"Lower the largest bucket (now {max(buckets)}), {option('max_cache_len')}, or cap graph "
                        f"memory with {option('max_memory_mib')}.",
                    ) from err
            grown = sum(g.stats.memory_bytes for g in mine.values())
            if max_memory_bytes is not None and held + grown > max_memory_bytes:
                dropped.append(bucket)
                mine.clear()
                backend.release()
                continue
            graphs.update(mine)
            held += grown
            if on_captured:
                for (b, c), graph in mine.items():
                    on_captured(BucketCapture(b, graph.stats.seconds, graph.stats.memory_bytes, c))
    backend.synchronize()
    session.kv.reset()
    if not graphs:
        raise ResourceError(
            f"no bucket's graph fits in {option('max_memory_mib', round(max_memory_bytes / 2**20, 3))} MiB "
            f"(dropped {', '.join(map(str, dropped))}).",
            "Raise {max_memory_mib} or lower the buckets.",
        )
    return DecodeGraphs(session, graphs, dropped, backend=backend)
