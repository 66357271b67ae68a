"""One HF StaticCache sized for the largest batch, and views of its first rows and first slots.

Every graph sees a cache whose K/V tensors are `[:b, :, :C]` views of the same storage (b rows, C
context slots) and whose per-layer write position (`cumulative_length`, a device tensor HF advances in
place) is the very same tensor. So a sequence in row i keeps its state whichever graph runs it, the
buckets cost no extra cache memory, and attention in a context bucket reads C slots, not all of them.
"""

from __future__ import annotations

import inspect

import torch
from transformers import StaticCache
from transformers.cache_utils import Cache, StaticLayer

from accelerate_graph.common.errors import ResourceError, UnsupportedModelError, option
from accelerate_graph.compat.transformers_internals import static_layer_view


def cache_argument_name(model: torch.nn.Module) -> str:
    """transformers renamed `past_key_values=` to `cache=` after 5.22: ask the signature."""
    params = inspect.signature(model.forward).parameters
    if "cache" in params:
        return "cache"
    if "past_key_values" in params:
        return "past_key_values"
    raise UnsupportedModelError(
        f"{type(model).__name__}.forward takes neither `cache` nor `past_key_values`.",
        "This model cannot run a static-cache decode step; use {mode='eager'}.",
    )


def estimate_cache_bytes(config, batch: int, cache_len: int, dtype: torch.dtype) -> int | None:
    """K and V for every layer at full length, from the config; None where its geometry is non-standard."""
    text = config.get_text_config()
    try:
        layers = int(text.num_hidden_layers)
        heads = int(getattr(text, "num_key_value_heads", None) or text.num_attention_heads)
        head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads)
    except Exception:  # noqa: BLE001 - per-layer configs raise their own errors on global reads
        return None
    return 2 * layers * heads * head_dim * batch * cache_len * torch.finfo(dtype).bits // 8


def check_cache_fits(config, batch: int, cache_len: int, dtype: torch.dtype, device: torch.device) -> None:
    """Refuse, with the numbers, a cache the GPU cannot hold, before trying to allocate it."""
    need = estimate_cache_bytes(config, batch, cache_len, dtype)
    if need is None or device.type != "cuda":
        return
    free, _ = torch.cuda.mem_get_info(device)
    usable = int(free * 0.9)  # leave room for activations and graphs
    if need > usable:
        fits = max(usable * cache_len // need, 0)
        raise ResourceError(
            f"a static cache of {cache_len} slots for {batch} rows needs {need / 2**30:.1f} GiB; "
            f"{free / 2**30:.1f} GiB of the GPU is free.",
            f"Lower {option('max_cache_len')} to at most {fits} or the largest bucket.",
        )


SPARE_SLOTS = 1


class CacheSnapshot(list):
    """(keys, values, position) per layer, plus the host's copy of the next write slot; keys and values
    are [rows, heads, slots, dim] from slot `first_slot` on."""

    next_slot: int = 0
    first_slot: int = 0

    def at_slot(self, slot: int) -> CacheSnapshot:
        """The same cache contents with the write position at `slot` (no copy of the K/V)."""
        moved = CacheSnapshot((keys, values, torch.full_like(position, slot)) for keys, values, position in self)
        moved.next_slot = slot
        moved.first_slot = self.first_slot
        return moved


class _LayerView(StaticLayer):
    """A layer whose K/V are views of another's: its length is its view's, so HF sizes the mask to the
    context bucket (under torch.compile a symbolic size, so one compile serves every bucket)."""

    def get_mask_sizes(self, *args, **kwargs) -> tuple[int, int]:
        return self.keys.shape[2], 0

    def get_max_length(self) -> int:
        return self.keys.shape[2]


class RowLayer(_LayerView):
    """A view for per-row mode: row r writes its new tokens at the slots `write_slots[r]` names, its own
    sequence's positions (each row's sequence starts at slot 0 of its own row), instead of at one write
    position shared by every row. The writes go to the rows' whole storage (`write_keys`, the spare slot
    included, where rows that take no part in a step write); attention reads the context view. The shared
    position tensor is never moved."""

    write_keys: torch.Tensor  # [b, H, storage slots, d]: the same rows as `keys`, every slot
    write_values: torch.Tensor
    write_slots: torch.Tensor | None = None  # [b, t] long: where each row's t new tokens go

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        rows = torch.arange(key_states.shape[0], device=key_states.device)[:, None]  # [b, 1] against slots [b, t]
        self.write_keys[rows, :, self.write_slots] = key_states.transpose(1, 2)
        self.write_values[rows, :, self.write_slots] = value_states.transpose(1, 2)
        # views of the tensors just written, not the separate context views `keys`/`values` (the same memory):
        # given those, inductor cloned every row's whole K/V, wrote into the clones and copied them back
        context = self.keys.shape[2]
        return self.write_keys[:, :, :context], self.write_values[:, :, :context]

    def narrowed_copy(self) -> RowLayer:
        """A new layer object over new views of the same tensors (the fused step hands each layer a fresh
        one, whose tensors it marks for dynamo)."""
        copy = static_layer_view(self, self.keys.shape[0], self.keys.shape[2], RowLayer)
        copy.write_keys, copy.write_values = self.write_keys[:], self.write_values[:]
        copy.write_slots = self.write_slots[:] if self.write_slots is not None else None
        return copy


class FreshLayer(_LayerView):
    """A view for the first part of prompts, each from slot 0 of its row (per-row mode): the part's K/V go into
    the cache rows `rows` names (a device tensor: one captured graph serves any rows) at `write_slots`, and
    attention reads the part's own K/V, all that lies before it. `keys`/`values` are there for their shapes."""

    storage_keys: torch.Tensor  # [max_batch, H, storage slots, d]: the whole layer
    storage_values: torch.Tensor
    rows: torch.Tensor  # [b] long: the cache row of each row of the part
    write_slots: torch.Tensor  # [b, t] long: where each of its tokens goes

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        self.storage_keys[self.rows[:, None], :, self.write_slots] = key_states.transpose(1, 2)
        self.storage_values[self.rows[:, None], :, self.write_slots] = value_states.transpose(1, 2)
        return key_states, value_states


def row_layer(layer: StaticLayer, rows: slice, context: int) -> RowLayer:
    """A RowLayer over storage rows `rows` of an allocated layer, reading its first `context` slots."""
    view = static_layer_view(layer, rows.stop - rows.start, context, RowLayer, first_row=rows.start)
    view.write_keys = layer.keys[rows]
    view.write_values = layer.values[rows]
    return view


class SharedStaticCache:
    """Owns the storage; hands out views for any batch size up to `max_batch`. `per_row`: the views are
    RowLayers (each row writes at its own positions); otherwise every row writes at the shared position."""

    def __init__(self, config, max_batch: int, max_cache_len: int, per_row: bool = False):
        self.per_row = per_row
        self.max_batch = max_batch
        self.max_cache_len = max_cache_len
        # One spare slot that no step writes: every view is then a strict slice of the storage, so no
        # view looks contiguous and torch.compile (--fuse) sees one stride pattern for all of them.
        self.storage_len = max_cache_len + SPARE_SLOTS
        self.cache = StaticCache(config=config, max_cache_len=self.storage_len)
        self.allocated = False
        self.fixes = self._unslide_layers()
        self._views: dict[tuple[int, int], Cache] = {}
        # The next write slot as the host knows it: which context bucket a step needs, without reading
        # the device counter. Only this class writes it: rewind/restore set it, `advance` follows a step.
        self.next_slot = 0

    def _unslide_layers(self) -> list[str]:
        """HF's static sliding-window layer keeps its write position in a Python int, which a replay
        freezes (past the window: a device-side assert). Full-length layers keep it on the device, and
        the sliding-window mask, built from that position, still limits what each token attends."""
        sliding = [
            i
            for i, layer in enumerate(self.cache.layers)
            if isinstance(layer, StaticLayer) and getattr(layer, "is_sliding", False)
        ]
        for i in sliding:
            self.cache.layers[i] = StaticLayer(max_cache_len=self.storage_len)
        if not sliding:
            return []
        return [
            f"{len(sliding)} sliding-window cache layer(s) keep their position in a Python int: replaced by "
            f"full-length layers with a device-side position (the mask still applies the window)"
        ]

    @property
    def layers(self) -> list:
        return list(self.cache.layers)

    def check_allocated(self) -> None:
        for i, layer in enumerate(self.layers):
            if type(layer) is not StaticLayer:
                raise UnsupportedModelError(
                    f"cache layer {i} is a {type(layer).__name__}, whose per-row state cannot be shared "
                    "between batch buckets (only plain static attention layers can).",
                    "Use {mode='eager'} for this model.",
                )
            if not getattr(layer, "is_initialized", False) or not hasattr(layer, "keys"):
                raise UnsupportedModelError(
                    f"cache layer {i} ({type(layer).__name__}) was not allocated by a forward pass.",
                    "This model's layers do not all use the static cache; use {mode='eager'}.",
                )
            if not isinstance(getattr(layer, "cumulative_length", None), torch.Tensor):
                raise UnsupportedModelError(
                    f"cache layer {i} ({type(layer).__name__}) keeps its write position in a Python int, "
                    "which a graph replay would never advance.",
                    "Use {mode='eager'} for this model.",
                )
        self.allocated = True

    def slots(self, context: int | None = None) -> int:
        """The slots a step attends: `context`, by default all but the spare; before allocation the whole
        storage, which the first forward allocates."""
        if not self.allocated:
            return self.storage_len
        return context or self.max_cache_len

    def view(self, batch: int, context: int | None = None, write_slots: torch.Tensor | None = None) -> Cache:
        """A cache whose layers are views of rows [:batch] and slots [:self.slots(context)]; positions
        are shared. Before allocation, the cache itself (its first forward allocates). Per-row mode: the
        rows write their new tokens at `write_slots` [batch, t] (None: where the last forward wrote)."""
        if not self.allocated:
            return self.cache
        context = self.slots(context)
        if (batch, context) not in self._views:
            if self.per_row:
                layers = [row_layer(layer, slice(0, batch), context) for layer in self.cache.layers]
            else:
                layers = [static_layer_view(layer, batch, context, _LayerView) for layer in self.cache.layers]
            self._views[batch, context] = Cache(layers=layers)
        view = self._views[batch, context]
        if self.per_row:
            self._aim(view, write_slots)
        return view

    def row_view(self, row: int, write_slots: torch.Tensor) -> Cache:
        """Per-row mode: a cache over the k rows from `row` on and every slot, their new tokens written at
        `write_slots` [k, t] (prompt chunks of those rows, the other rows untouched)."""
        rows = slice(row, row + write_slots.shape[0])
        view = Cache(layers=[row_layer(layer, rows, self.max_cache_len) for layer in self.cache.layers])
        self._aim(view, write_slots)
        return view

    def fresh_view(self, rows: torch.Tensor, write_slots: torch.Tensor) -> Cache:
        """Per-row mode: a cache for the first part of k prompts ([k, t] `write_slots`) going into cache rows
        `rows` [k], whose attention reads only the part itself (FreshLayer)."""
        batch, width = write_slots.shape
        layers = []
        for layer in self.cache.layers:
            view = static_layer_view(layer, batch, width, FreshLayer)
            view.storage_keys, view.storage_values = layer.keys, layer.values
            view.rows, view.write_slots = rows, write_slots
            layers.append(view)
        return Cache(layers=layers)

    @staticmethod
    def _aim(view: Cache, write_slots: torch.Tensor | None) -> None:
        if write_slots is not None:
            for layer in view.layers:
                layer.write_slots = write_slots

    def copy_row(self, source: int, target: int, slots: int) -> None:
        """Row `source`'s first `slots` slots into row `target`, every layer (per-row mode moves a request)."""
        for layer in self.layers:
            layer.keys[target, :, :slots].copy_(layer.keys[source, :, :slots])
            layer.values[target, :, :slots].copy_(layer.values[source, :, :slots])

    def positions(self) -> list[torch.Tensor]:
        return [layer.cumulative_length for layer in self.layers]

    def advance(self, tokens: int = 1) -> None:
        """Follow a forward that wrote `tokens` tokens per row: HF moved the device positions in place
        (inside the graph too), so only the host's copy moves here."""
        self.next_slot += tokens

    def rewind(self, position: int) -> None:
        """Set every layer's write position (the next token goes to slot `position`)."""
        for counter in self.positions():
            counter.fill_(position)
        self.next_slot = position

    def reset(self) -> None:
        for layer in self.layers:
            layer.keys.zero_()
            layer.values.zero_()
        self.rewind(0)

    def snapshot(self, rows: int, first_slot: int = 0, steps: int | None = None) -> CacheSnapshot:
        """A copy of what `steps` decode steps from `first_slot` on rows [:rows] will overwrite: those rows
        at slots first_slot .. first_slot + steps - 1 (a step writes one slot per row), and the write
        positions. Nothing else changes, so nothing else is copied: a whole-cache copy of a 32-row,
        4096-slot cache of a 3.8B model is 51 GB. steps=None: every slot from `first_slot` on."""
        stop = self.storage_len if steps is None else min(first_slot + steps, self.storage_len)
        window = slice(first_slot, max(stop, first_slot))
        snap = CacheSnapshot(
            (
                layer.keys[:rows, :, window].clone(),
                layer.values[:rows, :, window].clone(),
                layer.cumulative_length.clone(),
            )
            for layer in self.layers
        )
        snap.next_slot = self.next_slot
        snap.first_slot = first_slot
        return snap

    def restore(self, snap: CacheSnapshot) -> None:
        """Put back the rows and slots `snap` holds, and the write positions."""
        self.next_slot = snap.next_slot
        for layer, (keys, values, position) in zip(self.layers, snap):
            rows, slots = keys.shape[0], keys.shape[2]
            window = slice(snap.first_slot, snap.first_slot + slots)
            layer.keys[:rows, :, window].copy_(keys)
            layer.values[:rows, :, window].copy_(values)
            layer.cumulative_length.copy_(position)
