"""Find what in a decode step cannot live in a CUDA graph, and which submodule does it.

Two eager steps run under a dispatch mode that notes, for every aten op, the innermost module that
called it. Three kinds of evidence:
- ops a capture refuses outright: host syncs (.item(), bool(tensor), torch.equal) and ops whose
  output shape depends on data (nonzero, boolean-mask indexing, unique, ...);
- tensors built from host data or copied between devices inside the step;
- Python values that change from step to step: a graph replays the first step's launches, so any
  op whose non-tensor arguments (ints, slices, shapes) differ between two consecutive steps would
  be frozen by a replay. This is what catches a position counter kept in a Python int.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from accelerate_graph.common.source_location import caller_location
from accelerate_graph.compat.torch_internals import (
    DispatchMode,
    hidden_host_read,
    pytree_leaves,
    script_object_type_name,
)
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.core.host_reads import HOST_SYNC_OPS, HostReadMode
from accelerate_graph.core.module_stack import ModuleStack

aten = torch.ops.aten
HOST_DATA_OPS = {aten.lift_fresh.default, aten.lift_fresh_copy.default}
COPY_OPS = {aten._to_copy.default, aten.copy_.default, aten._copy_from.default}


@dataclass(frozen=True)
class Hazard:
    kind: str  # host-sync | data-dependent-shape | host-data | device-copy | python-value
    op: str
    module_path: str  # "" is the model itself
    module_class: str
    location: str  # file:line of the modeling code that issued the op
    detail: str
    call_stack: tuple[str, ...] = field(default=(), compare=False, repr=False)  # running forwards, outermost first

    def describe(self) -> str:
        where = self.module_path or "<model>"
        return f"{self.kind} in {where} ({self.module_class}) at {self.location}: {self.detail}"


@dataclass
class _OpRecord:
    op: str
    signature: tuple  # non-tensor arguments and tensor shapes: what a replay would freeze
    module_path: str
    location: str
    call_stack: tuple[str, ...] = ()


def _leaves(value, out: list) -> list:
    """The leaves of an aten call's arguments (tuples, lists, torch.Size and kwargs dicts nest them):
    pytree_leaves' order for these, at a fraction of its cost (it runs for every op of two steps)."""
    if isinstance(value, tuple | list):
        for item in value:
            _leaves(item, out)
    elif type(value) is dict:
        for item in value.values():
            _leaves(item, out)
    else:
        out.append(value)
    return out


def _signature(args, kwargs) -> tuple:
    parts = []
    for leaf in _leaves((args, kwargs), []):
        if isinstance(leaf, torch.Tensor):
            parts.append(("tensor", tuple(leaf.shape), str(leaf.device)))
        elif isinstance(leaf, torch.ScriptObject):
            # a collective's process group and reduce op: a new wrapper (and address) on every call
            parts.append(("script-object", script_object_type_name(leaf)))
        else:
            parts.append(repr(leaf))
    return tuple(parts)


class _Tracer(DispatchMode):
    def __init__(self, modules: ModuleStack):
        super().__init__()
        self.modules = modules
        self.records: list[_OpRecord] = []
        self.hazards: list[Hazard] = []

    def _flag(self, kind: str, func, detail: str) -> None:
        path = self.modules.current()
        self.hazards.append(
            Hazard(
                kind,
                func.name(),
                path,
                self.modules.classes.get(path, "?"),
                caller_location(),
                detail,
                self.modules.call_stack(),
            )
        )

    def flag_host_read(self, what: str) -> None:
        path = self.modules.current()
        self.hazards.append(
            Hazard(
                "host-sync",
                what,
                path,
                self.modules.classes.get(path, "?"),
                caller_location(),
                f"{what} reads a device value on the host",
                self.modules.call_stack(),
            )
        )

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in HOST_SYNC_OPS:
            shape_op = "shape depends" in HOST_SYNC_OPS[func]
            self._flag("data-dependent-shape" if shape_op else "host-sync", func, HOST_SYNC_OPS[func])
        elif (hidden := hidden_host_read(func, args, kwargs)) is not None:
            self._flag("host-sync", func, hidden)
        elif func in HOST_DATA_OPS:
            self._flag(
                "host-data",
                func,
                "a tensor is built from Python data inside the step (torch.tensor): "
                "on a GPU a host-to-device copy, and its value frozen by a replay",
            )
        out = func(*args, **kwargs)
        if func in COPY_OPS:
            devices = {t.device for t in pytree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)}
            if len(devices) > 1:
                self._flag("device-copy", func, f"copies between {' and '.join(sorted(map(str, devices)))}")
        self.records.append(
            _OpRecord(
                func.name(),
                _signature(args, kwargs),
                self.modules.current(),
                caller_location(),
                self.modules.call_stack(),
            )
        )
        return out


def _trace_step(session: DecodeSession, bucket: int, tokens, position: int) -> _Tracer:
    modules = ModuleStack(session.model)
    tracer = _Tracer(modules)
    positions = torch.full((bucket,), position, device=session.device)
    session.load_inputs(bucket, tokens, positions)
    host_reads = HostReadMode(lambda what: tracer.flag_host_read(what))
    with torch.no_grad(), modules.active(), host_reads, tracer:
        session.step_fn(bucket)()
    return tracer


def _python_value_hazards(first: _Tracer, second: _Tracer, classes: dict[str, str]) -> list[Hazard]:
    """Ops whose non-tensor arguments differ between two consecutive steps (or a different op count)."""
    found: dict[str, Hazard] = {}
    for a, b in zip(first.records, second.records):
        if a.op != b.op or a.signature != b.signature:
            if a.module_path not in found:
                detail = (
                    f"{a.op} is called with different Python values in consecutive steps "
                    f"(a replay would freeze the first): {_first_difference(a, b)}"
                )
                found[a.module_path] = Hazard(
                    "python-value",
                    a.op,
                    a.module_path,
                    classes.get(a.module_path, "?"),
                    a.location,
                    detail,
                    a.call_stack,
                )
    if len(first.records) != len(second.records) and not found:
        found[""] = Hazard(
            "python-value",
            "-",
            "",
            classes.get("", "?"),
            "",
            f"the step runs {len(first.records)} ops, then {len(second.records)}: its Python "
            "control flow depends on the step",
        )
    return list(found.values())


def _first_difference(a: _OpRecord, b: _OpRecord) -> str:
    if a.op != b.op:
        return f"then {b.op}"
    for x, y in zip(a.signature, b.signature):
        if x != y:
            return f"{x} then {y}"
    return "different argument count"


def find_hazards(session: DecodeSession, bucket: int, position: int = 1) -> list[Hazard]:
    """Trace two eager decode steps at `position + 1` and `position + 2` after one untraced step (which
    does the one-time work a capture's warm-ups also do); the cache is restored afterwards."""
    snapshot = session.kv.snapshot(bucket, position, 3)  # the three steps write these slots only
    session.kv.rewind(position)
    tokens = torch.arange(bucket, device=session.device) % max(session.vocab_size, 1)
    try:
        session.load_inputs(bucket, tokens, torch.full((bucket,), position, device=session.device))
        with torch.no_grad():
            session.step_fn(bucket)()
        first = _trace_step(session, bucket, tokens, position + 1)
        # other tokens, so data-dependent Python values (MoE routing read on the host) differ
        second = _trace_step(session, bucket, (tokens * 7 + 3) % max(session.vocab_size, 1), position + 2)
    finally:
        session.kv.restore(snapshot)
    unique: dict[tuple, Hazard] = {}
    for hazard in first.hazards + _python_value_hazards(first, second, first.modules.classes):
        island = first.modules.island_for(hazard.call_stack) if hazard.call_stack else hazard.module_path
        if island != hazard.module_path:
            hazard = replace(
                hazard,
                module_path=island,
                module_class=first.modules.classes.get(island, "?"),
                detail=f"{hazard.detail} (widened to {island or '<model>'}: the module that raised it "
                "returns Python numbers)",
            )
        unique.setdefault((hazard.kind, hazard.module_path, hazard.op), hazard)
    return list(unique.values())
