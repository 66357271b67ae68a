"""torch internals we rely on, one function (or base class) each. Checked against torch 2.11 and 2.13.

Each docstring names the upstream symbol and why no public API serves; tests/compat/test_compat.py
fails naming the symbol when an upgrade removes or changes it. Dynamo and inductor are imported where
used: detection and the emulation import this module without needing the compiler.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode as _TorchDispatchMode
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten as _tree_flatten

CHECKED = "torch 2.11, 2.13"

# --- modes, pytrees, tensors and ops (detection, emulation, host constants) ---------------------------


class DispatchMode(_TorchDispatchMode):
    """Base of our aten-level modes: `torch.utils._python_dispatch.TorchDispatchMode` (a subclass
    implements `__torch_dispatch__(func, types, args, kwargs)` and is entered with `with`). Documented
    in "Extending PyTorch" but exported only from a private module. Checked: torch 2.11, 2.13."""


def pytree_leaves(value) -> list:
    """The leaves of nested tuples/lists/dicts, in order: `torch.utils._pytree.tree_flatten(value)[0]`.
    torch has no public pytree module (2.11, 2.13). Checked: torch 2.11, 2.13."""
    return _tree_flatten(value)[0]


def dispatch_modes_disabled():
    """A context in which no dispatch mode sees our ops: `torch.utils._python_dispatch._disable_current_modes`.
    No public equivalent. Checked: torch 2.11, 2.13."""
    return _disable_current_modes()


def torch_function_disabled():
    """A context in which no torch-function mode or override sees our calls: `torch._C.DisableTorchFunction`.
    No public equivalent. Checked: torch 2.11, 2.13."""
    return torch._C.DisableTorchFunction()


def script_object_type_name(obj: torch.ScriptObject) -> str:
    """The TorchScript class name of a script object (a process group, a reduce op):
    `torch.ScriptObject._type().qualified_name()`. No public equivalent. Checked: torch 2.11, 2.13."""
    return obj._type().qualified_name()


def tensor_version(tensor: torch.Tensor) -> int:
    """The counter torch bumps on every in-place write to a tensor: `torch.Tensor._version` (what autograd
    checks saved tensors with). No public equivalent. Checked: torch 2.11, 2.13."""
    return tensor._version


def op_is_mutable(op) -> bool:
    """Whether an aten op overload writes to any argument: `torch._ops.OpOverload._schema.is_mutable`
    (a `torch._C.FunctionSchema`). No public equivalent. Checked: torch 2.11, 2.13."""
    return op._schema.is_mutable


GROUPED_MM_FAST_MAJORS = (9, 10)  # sm90 and sm100: torch's CUTLASS grouped kernel (bf16 only)


def grouped_mm_reads_host(dtypes: tuple[torch.dtype, ...], capability: tuple[int, int]) -> bool:
    """Whether `aten._grouped_mm` (HF's `grouped_mm` MoE experts) on a GPU of this capability, with operands and
    output of these dtypes, takes torch's fallback, which copies the group offsets to the host (`offs.cpu()`)
    inside its CUDA kernel: no dispatch mode sees that copy, and a capture refuses it. The fast path is bf16
    throughout on sm90/sm100 (aten/src/ATen/native/cuda/GroupedBlas.cpp). Checked: torch 2.11 (an H100 capture
    in float32 raised), 2.13."""
    return any(d != torch.bfloat16 for d in dtypes) or capability[0] not in GROUPED_MM_FAST_MAJORS


# resolved once: detection asks of every op of two traced steps
_GROUPED_MM = getattr(getattr(torch.ops.aten, "_grouped_mm", None), "default", None)


def hidden_host_read(func, args: tuple, kwargs: dict) -> str | None:
    """Why the aten call `func(*args, **kwargs)` reads device data on the host inside its CUDA kernel, where a
    dispatch mode cannot see it, else None. The one such op known: `aten._grouped_mm` (grouped_mm_reads_host)."""
    if _GROUPED_MM is None or func is not _GROUPED_MM:
        return None
    a, b = args[0], args[1]
    if a.device.type != "cuda":
        return None
    dtypes = (a.dtype, b.dtype, kwargs.get("out_dtype") or a.dtype)
    if not grouped_mm_reads_host(dtypes, torch.cuda.get_device_capability(a.device)):
        return None
    return (
        "torch's grouped_mm runs one matmul per group here (not bf16, or not sm90/sm100): it copies the group "
        "offsets to the host inside the kernel"
    )


def add_to_each(tensors: list[torch.Tensor], value: int) -> None:
    """`value` added in place to every tensor of the list, on a GPU in one kernel for a list of a model's
    layers (the tensors of a device and dtype are chunked into few launches): `torch._foreach_add_`
    (underscored, documented only as the optimizers' fast path). Checked: torch 2.11, 2.13."""
    torch._foreach_add_(tensors, value)


def copy_each(destinations: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
    """Each source copied into its destination, on a GPU in one kernel where they share a device and a
    dtype (the step's tokens and positions: one launch before a replay, not two); tensors that differ in
    either are copied one by one. `torch._foreach_copy_` (underscored, like `_foreach_add_`). Checked:
    torch 2.11, 2.13."""
    torch._foreach_copy_(destinations, sources)


# --- nn.Module -----------------------------------------------------------------------------------------


@contextlib.contextmanager
def forwards_replaced(replacements: dict[torch.nn.Module, Callable]) -> Iterator[None]:
    """Each module runs its replacement as `forward` while the context is open; the class's own after.
    Relies on `torch.nn.Module._call_impl` (behind `__call__`) looking `self.forward` up on the instance at
    every call, so an instance attribute shadows the class's method, hooks still run. Checked: torch 2.11, 2.13."""
    for module, forward in replacements.items():
        module.forward = forward
    try:
        yield
    finally:
        for module in replacements:
            vars(module).pop("forward", None)


def has_call_hooks(module: torch.nn.Module) -> bool:
    """Whether calling `module` runs anything besides its `forward`: a forward (pre-)hook of its own or a
    global one. `torch.nn.Module._forward_hooks` / `_forward_pre_hooks` and the module-level
    `_global_forward_hooks` / `_global_forward_pre_hooks` (private; no public way to list hooks).
    Checked: torch 2.11, 2.13."""
    from torch.nn.modules import module as module_file

    return bool(
        module._forward_hooks or module._forward_pre_hooks
        or module_file._global_forward_hooks or module_file._global_forward_pre_hooks
    )  # fmt: skip


def forward_hook_tables(module: torch.nn.Module) -> tuple[dict, dict]:
    """A module's own forward pre-hooks and forward hooks: two ordered dicts {handle id: hook}, which may be
    changed in place (a hook replaced under its id keeps its with_kwargs and always_call flags, which live in
    other dicts under the same id). `torch.nn.Module._forward_pre_hooks` / `_forward_hooks` (private; no
    public way to list or wrap a module's hooks). Checked: torch 2.11, 2.13."""
    return module._forward_pre_hooks, module._forward_hooks


# --- dynamo --------------------------------------------------------------------------------------------


def maybe_mark_dynamic(tensor: torch.Tensor, dim: int) -> None:
    """Ask dynamo to compile `dim` of this tensor object as a symbolic size, unless it must specialise:
    `torch._dynamo.maybe_mark_dynamic`. torch.compiler has no equivalent (2.11, 2.13). Checked: torch 2.11, 2.13."""
    _dynamo().maybe_mark_dynamic(tensor, dim)


def mark_static_address(tensor: torch.Tensor) -> None:
    """Tell torch.compile (and its cudagraph trees) this tensor object keeps its address across calls:
    `torch._dynamo.mark_static_address`. torch.compiler has no equivalent (2.11, 2.13). Checked: torch 2.11, 2.13."""
    _dynamo().mark_static_address(tensor)


def _dynamo():
    import torch._dynamo

    return torch._dynamo


def _inductor_config():
    import torch._inductor.config

    return torch._inductor.config


def _counters():
    from torch._dynamo.utils import counters

    return counters


def dynamo_graph_count() -> int:
    """FX graphs dynamo has made in this process: `torch._dynamo.utils.counters["stats"]["unique_graphs"]`.
    No public counter. Checked: torch 2.11, 2.13."""
    return _counters()["stats"]["unique_graphs"]


def cudagraph_skip_count() -> int:
    """Graphs inductor ran without its CUDA graphs: `torch._dynamo.utils.counters["inductor"]["cudagraph_skips"]`.
    No public counter. Checked: torch 2.11, 2.13."""
    return _counters()["inductor"]["cudagraph_skips"]


def recompile_limit_at_least(entries: int):
    """A context in which dynamo keeps at least `entries` compiled entries per code object before it falls
    back to eager: `torch._dynamo.config.recompile_limit` (named `cache_size_limit` before torch 2.6).
    Not in torch.compiler.config. Checked: torch 2.11, 2.13."""
    config = _dynamo().config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    return config.patch(**{name: max(getattr(config, name), entries)})


# --- inductor ------------------------------------------------------------------------------------------


def inductor_config_patched(settings: dict):
    """A context with inductor's settings changed (dotted keys, e.g. "triton.cudagraphs"):
    `torch._inductor.config.patch`. torch.compile(options=...) applies some too late (freezing, seen with
    torch 2.13). Checked: torch 2.11, 2.13."""
    return _inductor_config().patch(settings)


def warm_compile_workers() -> None:
    """Start inductor's kernel-compiling worker processes now: `torch._inductor.async_compile.maybe_warm_pool`.
    No public equivalent. Checked: torch 2.11, 2.13."""
    from torch._inductor.async_compile import maybe_warm_pool

    maybe_warm_pool()


def reset_cudagraph_trees() -> None:
    """Free cudagraph trees' graphs and memory pool: `torch._inductor.cudagraph_trees.reset_cudagraph_trees`.
    torch.compiler.reset() does it only through the backend on some versions. Checked: torch 2.11, 2.13."""
    from torch._inductor.cudagraph_trees import reset_cudagraph_trees as reset

    reset()


def _decomposition_tables() -> list[dict]:
    from torch._inductor import decomposition

    tables = [decomposition.decompositions]
    fast = getattr(decomposition, "fast_random_decomps", None)  # a cached copy of the base table
    if fast is not None:
        tables.append(fast())
    return tables


@contextlib.contextmanager
def inductor_decompositions_replaced(makers: dict) -> Iterator[None]:
    """Inductor decomposes each op in `makers` with `makers[op](original)` (original: inductor's own
    decomposition or None) while the context is open; its own after. Mutates
    `torch._inductor.decomposition.decompositions` and the table `fast_random_decomps()` caches: inductor
    takes no decomposition table from the user. Checked: torch 2.11, 2.13."""
    saved = [(table, op, table.get(op)) for table in _decomposition_tables() for op in makers]
    for table, op, original in saved:
        table[op] = makers[op](original)
    try:
        yield
    finally:
        for table, op, original in saved:
            if original is None:
                table.pop(op, None)
            else:
                table[op] = original


@functools.cache
def _custom_graph_pass() -> type:
    from torch._inductor.custom_graph_pass import CustomGraphPass

    return CustomGraphPass


@functools.cache
def _cache_tag_class() -> type:
    class CacheTag(_custom_graph_pass()):
        """Changes no graph (runs the pass it wraps, if any); its uuid enters inductor's cache keys."""

        def __init__(self, tag: tuple, inner):
            self.tag = tag
            self.inner = inner

        def __call__(self, graph) -> None:
            if self.inner is not None:
                self.inner(graph)

        def uuid(self):
            return (*self.tag, None if self.inner is None else self.inner.uuid())

    return CacheTag


def inductor_cache_tagged(tag: tuple):
    """A context in which `tag` enters inductor's FX-graph cache keys (which do not see decomposition
    tables), through a no-op graph pass in `torch._inductor.config.post_grad_custom_post_pass`, a
    `torch._inductor.custom_graph_pass.CustomGraphPass` whose `uuid()` is hashed. A user's pass there
    still runs, keyed with it; one inductor cannot key (no uuid) already keeps graphs out of its caches,
    so it is left alone. Checked: torch 2.11, 2.13."""
    config = _inductor_config()
    current = config.post_grad_custom_post_pass
    if current is not None and not isinstance(current, _custom_graph_pass()):
        return contextlib.nullcontext()
    return config.patch({"post_grad_custom_post_pass": _cache_tag_class()(tag, current)})


def inductor_materialized(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` unchanged, but inductor writes it to a buffer instead of inlining the ops that make it
    into each consumer's loads: `torch.ops.prims.inductor_force_stride_order` (registered by
    `torch._inductor.inductor_prims`; its lowering copies an unrealized value into a fixed layout). Only
    for use while inductor decomposes (inside its compile). Checked: torch 2.11, 2.13."""
    import torch._inductor.inductor_prims  # noqa: F401  (registers the prim)

    return torch.ops.prims.inductor_force_stride_order(tensor, tensor.stride())


def inductor_generated_code(fn: Callable, *args, **kwargs) -> tuple[object, list[str]]:
    """fn(*args, **kwargs)'s result and the Python source of every graph inductor compiled during the
    call: `torch._inductor.utils.run_and_get_code` (inductor's own tests use it; no public API shows
    what inductor generated). Checked: torch 2.11, 2.13."""
    from torch._inductor.utils import run_and_get_code

    return run_and_get_code(fn, *args, **kwargs)


def statically_known_true(condition) -> bool:
    """Whether a (possibly symbolic) condition holds for every size the compiled graph may see, without
    adding a guard: `torch.fx.experimental.symbolic_shapes.statically_known_true` (an experimental
    module). Checked: torch 2.11, 2.13."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true as known

    return known(condition)


# --- symmetric memory (--allreduce oneshot) --------------------------------------------------------------


def _symmetric_memory():
    import torch.distributed._symmetric_memory as symm_mem

    return symm_mem


def symmetric_empty(numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A 1-D buffer every rank can map: `torch.distributed._symmetric_memory.empty` (alpha, private module;
    no public symmetric allocation in torch 2.11 or 2.13). Checked: torch 2.11, 2.13."""
    return _symmetric_memory().empty(numel, dtype=dtype, device=device)


def symmetric_rendezvous(tensor: torch.Tensor, group_name: str):
    """Exchange the peers' mappings of a `symmetric_empty` buffer (a collective):
    `torch.distributed._symmetric_memory.rendezvous(tensor, group_name)`, returning its `_SymmetricMemory`
    handle. Before torch 2.9 a group had to be enabled first (`enable_symm_mem_for_group`, deprecated
    with a FutureWarning since): it is called, silenced, only where the group is not enabled yet and
    the function still exists, which leaves the result the same on 2.11 and 2.13. Checked: torch 2.11, 2.13."""
    import warnings

    symm_mem = _symmetric_memory()
    enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
    if enable is not None and not symm_mem.is_symm_mem_enabled_for_group(group_name):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            enable(group_name)
    return symm_mem.rendezvous(tensor, group_name)


def one_shot_all_reduce_copy(buffer: torch.Tensor, local: torch.Tensor, group_name: str) -> torch.Tensor:
    """The sum over the ranks of `local`, as a new tensor: `torch.ops.symm_mem.one_shot_all_reduce_copy`
    (`symm_buffer`, `local_input`, "sum", `group_name`). One kernel: it copies `local` into this rank's
    `buffer` (a view of a rendezvoused symmetric buffer, `local`'s shape), meets the peers at a barrier on
    the signal pads, sums every peer's buffer over peer-to-peer loads (no NVLink multicast), and meets them
    again, so the next call may reuse the buffer. Alpha op of the symm_mem namespace. Checked: torch 2.11, 2.13."""
    return torch.ops.symm_mem.one_shot_all_reduce_copy(buffer, local, "sum", group_name)


# --- inductor's compile workers ------------------------------------------------------------------------


def stop_compile_workers() -> None:
    """Stop inductor's kernel-compiling worker pools if this process started them:
    `torch._inductor.async_compile.shutdown_compile_workers`, looked up only if that module was imported
    (no --fuse: nothing to stop, and inductor is not imported on the way out). A process that ends through
    os._exit would otherwise leave the pools' processes and semaphores behind. No public equivalent.
    Checked: torch 2.11, 2.13."""
    import sys

    module = sys.modules.get("torch._inductor.async_compile")
    shutdown = getattr(module, "shutdown_compile_workers", None)
    if shutdown is not None:
        shutdown()


# --- CUDA allocator history (benchmarks/memory_peak.py) -------------------------------------------------


def cuda_memory_history(enabled: bool, max_entries: int = 1_000_000) -> None:
    """Record (or stop recording) every CUDA allocation and free with its Python stack:
    `torch.cuda.memory._record_memory_history` (underscored; the documented way to take memory snapshots
    in torch 2.11 and 2.13). Checked: torch 2.11, 2.13."""
    torch.cuda.memory._record_memory_history("all" if enabled else None, max_entries=max_entries)


def cuda_memory_snapshot() -> dict:
    """The recorded history and the allocator's segments: `torch.cuda.memory._snapshot()` (a dict with
    "segments" and "device_traces"). Checked: torch 2.11, 2.13."""
    return torch.cuda.memory._snapshot()
