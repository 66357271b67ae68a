"""Fused mode (`capture --fuse`): the decoder layers compiled by inductor, without inductor's own CUDA
graphs, then the whole step captured by us like any other: same buckets, shared pool, plan, `verify`.

Regional compilation: every decoder layer runs one compiled function (inductor's kernels for one
layer, fed each layer's weights and cache as inputs), so dynamo traces one layer, not 24: the whole
Qwen2.5-0.5B step took ~40 s to compile on the H200, its layer ~19 s for both batch classes. What runs
between the layers (embedding, mask, final norm, lm_head: ~10-30 small kernels) stays eager inside our
graph: compiling it too saved ~10 kernels and cost ~6 s per batch class (H200). The rotary module's cos
and sin come from a table instead (rotary_table.py): one gather, no compiling.

Two compilations per layer class serve every graph: one for batch 1 (static shapes; its projections
become GEMV kernels, gemv_lowering.py) and one for every larger batch (batch and context dimensions
dynamic; a spare cache slot keeps every cache view's strides alike). Inductor's caches live in a folder
next to the plan (TORCHINDUCTOR_CACHE_DIR), so `verify` and `bench` in a new process reuse its kernels.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import time
from pathlib import Path

import torch
from transformers.cache_utils import Cache

from accelerate_graph import settings as engine_settings
from accelerate_graph.common.errors import DROP_FUSE, CaptureError, option
from accelerate_graph.compat import torch_internals
from accelerate_graph.compat.transformers_internals import (
    cache_indices,
    cache_indices_set_to_zero,
    causal_mask_replaced,
    hf_create_causal_mask,
    static_layer_position,
    static_layer_view,
    writes_like_static_layer,
)
from accelerate_graph.core.static_cache import RowLayer
from accelerate_graph.fused import layer_program
from accelerate_graph.fused.causal_mask import CausalMaskStandIn
from accelerate_graph.fused.final_norm import final_norm_kernel
from accelerate_graph.fused.gemv_lowering import gemv_at_batch_1
from accelerate_graph.fused.kernels import pdl, skinny_matmul
from accelerate_graph.fused.layer_program import (
    MERGED_OPS,
    LayerOps,
    decode_layer,
    fp8_folds,
    kept_apart,
    layer_at_batch_1_is_skinny,
    merge_projections,
    program_for,
)
from accelerate_graph.fused.lm_head import lm_head_kernel
from accelerate_graph.fused.rotary_table import rotary_tables
from accelerate_graph.quant.quantize import fp8_scheme

# Our graphs, not inductor's; no padding of matmuls (its pass guards on the context length: a recompilation
# per context bucket); combo kernels run each layer's rotary and cache writes as one launch instead of three.
INDUCTOR_SETTINGS = {"triton.cudagraphs": False, "shape_padding": False, "combo_kernels": True}

# Coordinate-descent tuning: at compile time inductor benchmarks configs next to its heuristic's choice
# for each kernel and keeps the fastest. It pays where the GEMVs are long (H200, batch 1: the 8B 4.662 ->
# 4.280 ms, Llama-3.2-1B 1.152 -> 1.077) and costs where they are short (Qwen2.5-0.5B, hidden 896: 0.883 ->
# 1.041), so under inductor_tuning "auto" it runs from a hidden size of TUNE_FROM_HIDDEN_SIZE, and not where
# the skinny kernels run batch 1's GEMVs (it then tunes only small kernels, for nothing). Its results are
# not read back from inductor's cache: torch 2.11 restored tuned configs as slower ones (docs/PERF.md).
TUNE_SETTINGS = {"coordinate_descent_tuning": True, "autotune_local_cache": False}
# inductor's kernels launched with PDL, like ours, where fused/kernels/pdl.py says the GPU takes it
PDL_SETTINGS = {"triton.enable_pdl": True}
TUNE_FROM_HIDDEN_SIZE = 2048


def tunes_at(hidden_size: int, tuning: str) -> bool:
    """Whether layers of this hidden size compile with coordinate-descent tuning under the inductor_tuning
    setting `tuning` (auto, on or off)."""
    if tuning != "auto":
        return tuning == "on"
    return hidden_size >= TUNE_FROM_HIDDEN_SIZE


def tune_pays(model: torch.nn.Module, tuning: str, batch_1_skinny: bool = False) -> bool:
    """Whether the fused layers of `model` compile with coordinate-descent tuning: from the hidden size
    where it pays, unless the skinny kernels run batch 1's GEMVs (`batch_1_skinny`); `tuning` on or off
    decides alone."""
    hidden = int(getattr(model.config.get_text_config(), "hidden_size", 0) or 0)
    return tunes_at(hidden, tuning) and (tuning == "on" or not batch_1_skinny)


def inductor_settings(pdl_on: bool, tuned: bool) -> dict:
    """The inductor settings the fused layers compile with. INDUCTOR_SETTINGS last: a benchmark's way may
    turn inductor's PDL off and keep ours."""
    return {**(PDL_SETTINGS if pdl_on else {}), **(TUNE_SETTINGS if tuned else {}), **INDUCTOR_SETTINGS}


def inductor_cache_dir(plan_path: Path | str) -> Path:
    """`my.plan.yaml` -> `my.plan.inductor/`: compiled kernels kept beside the plan they serve."""
    path = Path(plan_path)
    return path.with_name(path.name.removesuffix(".yaml").removesuffix(".yml") + ".inductor")


def use_cache_dir(folder: Path | str | None) -> None:
    """Point inductor (and triton under it) at `folder`; must happen before the first compilation."""
    if folder is not None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(folder).resolve())


def warm_compile_workers(device: torch.device, cache_dir: Path | str | None) -> None:
    """Start inductor's kernel-compiling worker processes now (while a model loads) rather than at
    the first compilation, which would wait for them. They inherit the cache folder, so it is set first."""
    use_cache_dir(cache_dir)
    if device.type == "cuda":
        torch_internals.warm_compile_workers()


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The model's decoder layers: a module list as long as the config's layer count, preferably one
    whose layers carry a cache index (a vision tower's encoder layers, say, do not)."""
    count = getattr(model.config.get_text_config(), "num_hidden_layers", None)
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and count and len(m) == count]
    indexed = [m for m in lists if cache_indices(m[0])]
    if indexed or lists:
        return (indexed or lists)[0]
    raise CaptureError(
        f"{option('fuse')} compiles the decoder layers, and {type(model).__name__} has no list of "
        f"{count} layers (its config's num_hidden_layers).",
        DROP_FUSE,
    )


def _one_layer_cache(cache, index: int):
    """The cache as layer `index` alone sees it, as layer 0 of a one-layer cache over new tensor objects
    of the same memory: every layer then passes the same guards (and carries its own size marks)."""
    layer = cache.layers[index]
    if isinstance(layer, RowLayer):  # per-row mode: its write tensors come along
        return Cache(layers=[layer.narrowed_copy()])
    batch, _, context, _ = layer.keys.shape
    return Cache(layers=[static_layer_view(layer, batch, context, type(layer))])


@contextlib.contextmanager
def _as_layer_zero(layer: torch.nn.Module):
    """HF's attention passes its layer index to the cache, and dynamo specialises on that int: 24
    compilations. Under the one-layer cache every layer is layer 0, for the duration of the call."""
    try:
        with cache_indices_set_to_zero(layer):
            yield
    except IndexError as err:  # it reached past layer 0 of its one-layer cache
        raise CaptureError(
            f"{option('fuse')} runs each decoder layer over its own slice of the cache, as layer 0, but "
            f"{type(layer).__name__} addressed another layer's slot ({err}): it shares or offsets its cache.",
            DROP_FUSE,
        ) from err


def _ops_and_rows(above: dict[str, int]) -> str:
    """layer_program.layer_ops_above_batch_1's ops and row limits, for a note: "every op up to 8 rows",
    "o and down"."""
    names_of = {"proj": "q/k/v", "residual": "o and down", "gate_up": "gate/up"}
    by_rows: dict[int, list[str]] = {}
    for op, rows in above.items():
        by_rows.setdefault(rows, []).append(op)
    parts = []
    for rows, ops in sorted(by_rows.items()):
        every = len(ops) == len(layer_program.SKINNY_OPS)
        names = "every op" if every else ", ".join(names_of[op] for op in layer_program.SKINNY_OPS if op in ops)
        parts.append(names if rows == layer_program.EVERY_ROW else f"{names} up to {rows} rows")
    return "; ".join(parts)


def _fresh(value, batch: int):
    """A new view of a tensor (tuples walked), its batch dimension marked dynamic: dynamo reads marks
    from tensor objects, and the session's own (the compile contender's) must stay clean."""
    if isinstance(value, torch.Tensor):
        view = value[:]
        if view.dim() and view.shape[0] == batch:
            torch_internals.maybe_mark_dynamic(view, 0)
        return view
    if isinstance(value, tuple):
        return tuple(_fresh(v, batch) for v in value)
    return value


def _layer_arguments(signature: inspect.Signature, layer, index: int, batch: int, args: tuple, kwargs: dict):
    """The layer's call, bound to its class's forward, for the compiled forward: its one-layer cache in place
    of the whole cache, wherever the model passes it (by name or position), and fresh inputs with the
    batch and context dimensions marked dynamic. Refuses a call that passes no cache: such a layer
    finds its cache some other way, which the one-layer view cannot redirect."""
    bound = signature.bind(layer, *args, **kwargs)
    caches = 0

    def prepared(name: str, value):
        nonlocal caches
        if isinstance(value, Cache):
            caches += 1
            one = _one_layer_cache(value, index)
            for tensor in (one.layers[0].keys, one.layers[0].values):  # [b, H, C, d]
                torch_internals.maybe_mark_dynamic(tensor, 0)
                torch_internals.maybe_mark_dynamic(tensor, 2)
            if isinstance(one.layers[0], RowLayer):  # [b, H, storage, d] and [b, 1]: the batch is dynamic
                for tensor in (one.layers[0].write_keys, one.layers[0].write_values, one.layers[0].write_slots):
                    torch_internals.maybe_mark_dynamic(tensor, 0)
            return one
        value = _fresh(value, batch)
        if name == "attention_mask" and isinstance(value, torch.Tensor) and value.dim():
            torch_internals.maybe_mark_dynamic(value, value.dim() - 1)  # [b, 1, q, C]
        return value

    for name, value in list(bound.arguments.items())[1:]:  # after self
        if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            bound.arguments[name] = {key: prepared(key, v) for key, v in value.items()}
        else:
            bound.arguments[name] = prepared(name, value)
    if caches != 1:
        raise CaptureError(
            f"{option('fuse')} compiles each decoder layer over its own slice of the cache, but layer {index} "
            f"({type(layer).__name__}) was called with {caches} caches among its arguments.",
            DROP_FUSE,
        )
    return bound


def _named(bound: inspect.BoundArguments) -> dict:
    """The bound call's arguments by name, its **kwargs spread among them."""
    named = {}
    for name, value in bound.arguments.items():
        if bound.signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        else:
            named[name] = value
    return named


class FusedForward:
    """Calls the model with its decoder layers compiled by inductor; counts the time and graphs spent
    compiling, and the compilations beyond the first of each batch class (recompilations)."""

    refusal_hint = DROP_FUSE  # what capture and the quick check tell a user whose --fuse failed

    def __init__(
        self,
        model: torch.nn.Module,
        backend: str = "inductor",
        ops: LayerOps | None = None,
        positions: int = 0,
        settings: engine_settings.Settings | None = None,
    ):
        """`ops`: how the layer program's folded operations run (None: MERGED_OPS; tests pass others).
        `positions`: how many positions the step's cache holds (its rotary table's rows); 0: no table.
        `settings`: the engine settings it compiles, captures and runs under (None: those in use now)."""
        self.settings = settings if settings is not None else engine_settings.current()
        with engine_settings.use(self.settings):
            self._build(model, backend, ops, positions)

    def _build(self, model: torch.nn.Module, backend: str, ops: LayerOps | None, positions: int) -> None:
        self.model = model
        self.backend = backend
        self.layers = decoder_layers(model)
        # layer_program.py's merged forward (q/k/v and gate/up one projection each: Qwen2.5-0.5B's batch 8
        # 1.513 -> 1.268 ms on the H200), for the layers it covers; the others keep HF's forward
        self.ops = ops if ops is not None else MERGED_OPS
        self.programmed = self.ops is not None and all(program_for(layer, self.ops.fp8) for layer in self.layers)
        # FP8 layers run the program with the FP8 product (fp8_matmul) for every projection, not the skinny kernels
        self.fp8 = fp8_scheme(self.layers[0]) if self.programmed else None
        self.device = next(model.parameters()).device
        self.tuned = tune_pays(model, self.settings.inductor_tuning, self._batch_1_is_skinny())
        self.pdl = pdl.active(self.device)
        self.inductor_options = inductor_settings(self.pdl, self.tuned)
        if self.programmed and self.ops.merged:
            for layer in self.layers:
                merge_projections(layer)
        self._compiled: dict[type, object] = {}  # one compiled forward per layer class
        self._programs: dict[type, object] = {}  # one compiled layer_program.decode_layer per class, if any
        self._classes_done: set = set()  # batch classes (_batch_class) compiled so far
        self.compile_seconds = 0.0
        self.graphs = 0  # FX graphs dynamo made
        self.recompiles = 0  # compilations in a call whose batch class had compiled already
        self._layer_calls = 0  # in the current call: a step that never calls its layers is refused
        self._unadvanced: list[torch.Tensor] = []  # in the current call: positions the layers left to us
        # built here, before any capture: a graph keeps the table's address
        self.rotary = rotary_tables(model, positions) if self.settings.rotary_table and positions else {}
        if self._on_skinny_path():
            skinny_matmul.prepare_split_finish(self.device)  # split-K's arrival counters: the same reason
        # the final RMSNorm as one kernel, where the layer program's norms are its kind (fused/final_norm.py)
        self.final_norm = final_norm_kernel(model, self.layers[0].input_layernorm) if self.programmed else {}
        # the LM head's batch-1 call on the skinny kernels, for the head shapes measured faster (fused/lm_head.py)
        self.lm_head = lm_head_kernel(model, self.settings.lm_head_kernel) if self.programmed else {}
        # HF's create_causal_mask, or the one-kernel mask where it is exact (fused/causal_mask.py)
        self.causal_mask = CausalMaskStandIn(hf_create_causal_mask()) if self.settings.mask_kernel else None

    def _on_skinny_path(self) -> bool:
        """The merged layer program over plain weights on a CUDA device: where the skinny kernels may run."""
        return self.programmed and self.ops.merged and self.device.type == "cuda" and self.fp8 is None

    def _batch_class(self, batch: int) -> tuple:
        """Batches of one class share a compiled graph: batch 1 (a specialised size), and above it one class
        per set of calls on the skinny kernels (layer_program.skinny_calls_at: their row limits are guards)."""
        skinny = layer_program.skinny_calls_at(self.layers[0], batch) if self._on_skinny_path() else frozenset()
        return batch == 1, skinny

    def _batch_1_is_skinny(self) -> bool:
        """Whether every GEMV of batch 1 runs the skinny kernels (their table has the layer's shapes)."""
        return self._on_skinny_path() and layer_at_batch_1_is_skinny(self.layers[0])

    def layer_forward_kind(self) -> str:
        """What the fused step runs (what inductor compiles for each layer, the rotary table, the final norm
        kernel), for the notes a user reads."""
        with engine_settings.use(self.settings):
            return self._kind()

    def _kind(self) -> str:
        kind = f"the layer program, {self.ops.name}" if self.programmed else "HF's layer forward"
        if self.fp8:
            kind += f", FP8 weights ({self.fp8}"
            apart = kept_apart(self.layers[0]) if self.ops.merged else []
            if apart:
                block = self.layers[0].self_attn.q_proj.block
                kind += f"; {' and '.join(apart)} kept apart: an output size not a whole number of {block}-row blocks"
            on_cuda = self.device.type == "cuda"
            if fp8_folds(self.settings.fp8_fold, on_cuda, on_cuda):
                kind += "; norms, residual adds and gate/up's activation folded into the FP8 kernel"
            kind += ")"
        skinny = self._on_skinny_path()
        if self._batch_1_is_skinny():
            kind += ", skinny GEMV kernels at batch 1"
        above = layer_program.layer_ops_above_batch_1(self.layers[0]) if skinny else {}
        if above:
            kind += f", skinny kernels above batch 1 ({_ops_and_rows(above)})"
        kind += ", rotary table" if self.rotary else ""
        kind += ", final norm kernel" if self.final_norm else ""
        kind += ", LM head kernel at batch 1" if self.lm_head else ""
        kind += ", mask kernel" if self.causal_mask is not None else ""
        return kind + (", kernels tuned" if self.tuned else "") + (", PDL" if self.pdl else "")

    def _compiled_forward(self, layer: torch.nn.Module):
        kind = type(layer)
        if kind not in self._compiled:
            self._compiled[kind] = torch.compile(kind.forward, backend=self.backend, dynamic=None)
            if self.programmed:
                program = functools.partial(decode_layer, ops=self.ops)
                self._programs[kind] = torch.compile(program, backend=self.backend, dynamic=None)
        return self._compiled[kind]

    def _layer_forward(self, layer: torch.nn.Module, index: int, batch: int):
        """Layer `index`'s forward through its class's compiled forward, over its one-layer cache."""
        compiled = self._compiled_forward(layer)
        signature = inspect.signature(type(layer).forward)
        program = self._programs.get(type(layer))

        def forward(*args, **kwargs):
            self._layer_calls += 1
            bound = _layer_arguments(signature, layer, index, batch, args, kwargs)
            with _as_layer_zero(layer):
                if program is not None:
                    named = _named(bound)
                    hidden = named["hidden_states"]
                    if hidden.dim() == 3 and hidden.shape[1] == 1:  # a decode step; the prompt keeps HF's
                        cache = next(v for v in named.values() if isinstance(v, Cache))
                        mask, rotary = named.get("attention_mask"), named["position_embeddings"]
                        # a plain static layer's position is advanced after the step, with every other's
                        defer = writes_like_static_layer(cache.layers[0])
                        if defer:
                            self._unadvanced.append(static_layer_position(cache.layers[0]))
                        return program(layer, hidden, mask, rotary, cache, advance=not defer)
                return compiled(*bound.args, **bound.kwargs)

        return forward

    def _settings(self, batch: int):
        """Inductor's settings for our compilation only, patched around the call (options passed to
        torch.compile apply too late for some, e.g. freezing, seen with torch 2.13)."""
        if self.backend != "inductor":
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        stack.enter_context(torch_internals.inductor_config_patched(self.inductor_options))
        stack.enter_context(gemv_at_batch_1(batch == 1, self.settings.gemv_materialize))
        return stack

    def _mask_replaced(self):
        if self.causal_mask is None:
            return contextlib.nullcontext()
        return causal_mask_replaced(self.model, self.causal_mask)

    def __call__(self, *, input_ids, **kwargs):
        with engine_settings.use(self.settings):  # compiles and captures read the settings of this forward
            return self._call(input_ids=input_ids, **kwargs)

    def _call(self, *, input_ids, **kwargs):
        batch = input_ids.shape[0]
        # for this call only: eager runs stay eager
        compiled = {layer: self._layer_forward(layer, index, batch) for index, layer in enumerate(self.layers)}
        before = torch_internals.dynamo_graph_count()
        start = time.perf_counter()
        self._layer_calls, self._unadvanced = 0, []
        with (
            torch_internals.forwards_replaced({**compiled, **self.rotary, **self.final_norm, **self.lm_head}),
            self._mask_replaced(),
        ):
            with torch_internals.recompile_limit_at_least(64), torch.no_grad(), self._settings(batch):
                out = self.model(input_ids=input_ids, **kwargs)
            if self._unadvanced:  # one kernel for every layer's position (each layer's own add: ~1 us each)
                torch_internals.add_to_each(self._unadvanced, 1)
        if self._layer_calls < len(self.layers):
            raise CaptureError(
                f"{option('fuse')} compiles the {len(self.layers)} decoder layers it found in {type(self.model).__name__}, "
                f"but the step called them {self._layer_calls} times: it runs its layers some other way.",
                DROP_FUSE,
            )
        made = torch_internals.dynamo_graph_count() - before
        batch_class = self._batch_class(batch)
        if made:
            self.graphs += made
            self.compile_seconds += time.perf_counter() - start
            if batch_class in self._classes_done:
                self.recompiles += made
        self._classes_done.add(batch_class)
        return out
