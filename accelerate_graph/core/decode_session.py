"""The static decode step: fixed input buffers, a static KV cache, next-token logits out.

A graph can only replay reads of the same memory, so everything a decode step consumes lives in
buffers allocated once at the largest batch; a step for batch b reads their first b rows.

Two modes. Shared (the default): every row writes at the cache's one write position, rows are
left-padded to line up. Per-row (`per_row=True`, continuous batching): row r's sequence starts at slot 0
of its own cache row and its new token goes to the slot `write_slots[r]` names (its position), and the
step builds each row's attention mask from its position (slots 0..position), inside the graph.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from typing import Any, Protocol

import torch

from accelerate_graph.common.errors import (
    BadOptionError,
    ResourceError,
    UnsupportedModelError,
    first_line,
    is_out_of_memory,
    option,
)
from accelerate_graph.compat import torch_internals
from accelerate_graph.compat.transformers_internals import attention_implementation, sdpa_mask_builder
from accelerate_graph.core.backends import Step
from accelerate_graph.core.host_constants import HostConstants
from accelerate_graph.core.static_cache import SharedStaticCache, cache_argument_name, check_cache_fits


class CompiledForward(Protocol):
    """A compiled form of the model's forward that capture records instead of the model (`--fuse` sets
    one). The feature that compiled it names the way out of its own refusals: `refusal_hint`."""

    refusal_hint: str

    def __call__(self, **kwargs) -> Any: ...


PAD_TOKEN = 0  # padding rows need some valid token id; their outputs are discarded
PREFILL_CHUNK = 256  # prompt tokens a forward for long prompts: bounds the prefill's attention scores


def draw_inputs(batch: int, steps: int, prompt_len: int, vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A random prompt [b, P] and the tokens fed at each later step [S, b], drawn up front (teacher forcing)
    on the CPU from `seed`, so every run of the same step sees the same inputs."""
    generator = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, vocab, (batch, prompt_len), generator=generator)
    tokens = torch.randint(0, vocab, (steps, batch), generator=generator)
    return prompt, tokens


# Layer kinds of a config's `layer_types` whose masks per-row mode builds; a model with layer types passes the
# masks as a dict by kind (HF's modeling files: `causal_mask_mapping`), one without takes one mask.
MASK_KINDS = ("full_attention", "sliding_attention")


def sliding_window_below(config, slots: int) -> int | None:
    """The model's sliding attention window where it is shorter than `slots` (so it hides slots a row
    would otherwise attend), else None."""
    text = config.get_text_config()
    window = getattr(text, "sliding_window", None)
    if not isinstance(window, int) or window >= slots or getattr(text, "use_sliding_window", True) is False:
        return None
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None and "sliding_attention" not in layer_types:
        return None
    return window


def check_per_row_supported(model: torch.nn.Module) -> None:
    """Per-row mode hands the model the 4D masks it built itself: refuse the models that would read them
    wrong (an attention that takes no 4D mask, layers of a kind other than full or sliding attention)."""
    implementation = attention_implementation(model.config)
    if not sdpa_mask_builder(implementation) and implementation != "eager":
        raise UnsupportedModelError(
            f"per-row decoding gives the model its own attention masks, which {implementation} attention does "
            "not take.",
            "Use {attn='sdpa'}.",
        )
    other = sorted(set(getattr(model.config.get_text_config(), "layer_types", None) or ()) - set(MASK_KINDS))
    if other:
        raise UnsupportedModelError(
            f"per-row decoding builds full and sliding attention masks; {type(model).__name__} also has layers of "
            f"kind {', '.join(other)}.",
            "Use the shared mode (per_row=False) for this model.",
        )


class DecodeSession:
    def __init__(self, model: torch.nn.Module, max_batch: int, max_cache_len: int, per_row: bool = False):
        if max_cache_len < 2:
            raise BadOptionError(f"{option('max_cache_len', max_cache_len)} is too small.", "Use at least 2 slots.")
        if per_row:
            check_per_row_supported(model)
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.max_batch = max_batch
        self.max_cache_len = max_cache_len
        self.per_row = per_row
        self.cache_arg = cache_argument_name(model)
        self._keeps_last_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        check_cache_fits(model.config, max_batch, max_cache_len, model.dtype, self.device)
        try:
            self.kv = SharedStaticCache(model.config, max_batch, max_cache_len, per_row)
        except Exception as err:  # noqa: BLE001 - HF raises many types for caches it cannot build
            if is_out_of_memory(err):
                raise self._out_of_memory() from err
            raise UnsupportedModelError(
                f"transformers cannot build a static cache for {type(model).__name__}: {first_line(err, 300)}.",
                "Use {mode='eager'} for this model.",
            ) from err
        longs = {"dtype": torch.long, "device": self.device}
        self.input_ids = torch.zeros(max_batch, 1, **longs)  # [B, 1]
        self.position_ids = torch.zeros(max_batch, 1, **longs)  # [B, 1]
        # [B, L]: 1 where a row may attend a cache slot; causality hides slots not yet written,
        # so this only changes for left-padded prompts and stays constant while decoding.
        self.attention_mask = torch.ones(max_batch, self.kv.storage_len, **longs)  # spare slot: see SharedStaticCache
        # Per-row mode: the slot each row's new token goes to [B, 1] (its position; a row that takes no
        # part in a step writes the spare slot, which no step reads), and the slot numbers its masks compare.
        self.write_slots = torch.zeros(max_batch, 1, **longs)
        self.slot_numbers = torch.arange(self.kv.storage_len, **longs)
        self.window = sliding_window_below(model.config, max_cache_len)  # where it hides slots, per-row masks apply it
        self._masks_by_kind = getattr(model.config.get_text_config(), "layer_types", None) is not None
        self.host_constants: HostConstants | None = None  # set by the fix that hoists constant host data
        self.fused: CompiledForward | None = None  # the compiled forward of --fuse: what capture records
        self._allocate_cache()

    def _out_of_memory(self) -> ResourceError:
        where = "host" if self.device.type == "cpu" else "device"
        return ResourceError(
            f"out of {where} memory allocating a static cache of {self.max_cache_len} slots for "
            f"{self.max_batch} rows (the largest bucket).",
            "Lower the largest {buckets} value or {max_cache_len}.",
        )

    def _allocate_cache(self) -> None:
        """Allocate the cache now, with one eager token: an allocation must never happen inside a capture."""
        with torch.no_grad():
            try:
                self.forward(self.max_batch, self.input_ids, self.position_ids, self.attention_mask)
            except Exception as err:  # noqa: BLE001 - any failure here means: no static-cache decode
                if is_out_of_memory(err):
                    raise self._out_of_memory() from err
                raise UnsupportedModelError(
                    f"{type(self.model).__name__} could not run a decode step with a static cache: {first_line(err, 300)}.",
                    "Try {attn='eager'}, or {mode='eager'}.",
                ) from err
        self.kv.check_allocated()
        self.kv.reset()

    @property
    def spare_slot(self) -> int:
        """The slot past every context bucket: rows that take no part in a per-row step write there."""
        return self.max_cache_len

    def forward(
        self,
        batch: int,
        input_ids,
        position_ids,
        attention_mask,
        context: int | None = None,
        runner=None,
        write_slots: torch.Tensor | None = None,
        every_position: bool = False,
    ) -> torch.Tensor:
        """One forward of `batch` rows through the shared cache, attending its first `context` slots
        (default: all), by the model itself or `runner` (its compiled form); returns last-position
        logits [b, V], or with `every_position` those of each of the t tokens [b, t, V]. Per-row mode: each
        row writes at `write_slots` [b, t] (default: its position ids) and attends the slots up to its
        position; `attention_mask` is not read."""
        if self.per_row:
            slots = position_ids[:batch] if write_slots is None else write_slots[:batch]
            cache = self.kv.view(batch, context, slots)
            attention_mask = self.rows_mask(position_ids[:batch], self.kv.slots(context))
        else:
            cache = self.kv.view(batch, context)
            attention_mask = attention_mask[:batch, : self.kv.slots(context)]
        return self._run(cache, input_ids[:batch], position_ids[:batch], attention_mask, runner, every_position)

    def rows_mask(self, position_ids: torch.Tensor, slots: int) -> torch.Tensor | dict[str, torch.Tensor]:
        """Per-row mode's mask [b, 1, t, slots]: the token at position p of a row attends that row's slots
        0..p, nothing else (a row's slots past its position hold a finished request's leftovers), and under
        a sliding window of W only p - W + 1..p, as HF's sliding mask. A dict by layer kind where the model
        has layer types. Bool where the attention takes sdpa's masks, additive for eager attention."""
        return self._visible(self.slot_numbers[:slots], position_ids[:, None, :, None])

    def columns_mask(self, position_ids: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """Per-row mode's mask [b, 1, t, t] over a prompt part's own tokens (FreshLayer): token i attends token j
        of its row where j's position is at most i's (and within the window), as rows_mask does over slots."""
        return self._visible(position_ids[:, None, None, :], position_ids[:, None, :, None])

    def _visible(self, key: torch.Tensor, query: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """The mask of keys at positions `key` for queries at `query` (broadcast to [b, 1, t, keys])."""
        causal = key <= query
        windowed = causal & (key > query - self.window) if self.window is not None else causal
        if not self._masks_by_kind:
            return self._as_attention_mask(windowed)
        return {
            "full_attention": self._as_attention_mask(causal),
            "sliding_attention": self._as_attention_mask(windowed),
        }

    def _as_attention_mask(self, visible: torch.Tensor) -> torch.Tensor:
        if sdpa_mask_builder(attention_implementation(self.model.config)):
            return visible
        dtype = self.model.dtype
        return torch.where(visible, 0.0, torch.finfo(dtype).min).to(dtype)

    def row_forward(self, row: int, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Per-row mode: one eager forward of the k rows from `row` on (input_ids/position_ids [k, t], written
        at those positions, every other row untouched); returns their last-position logits [k, V]."""
        cache = self.kv.row_view(row, position_ids)
        mask = self.rows_mask(position_ids, self.max_cache_len)
        return self._run(cache, input_ids, position_ids, mask, None)

    def fresh_forward(self, rows: torch.Tensor, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Per-row mode: one eager forward of the first part of k prompts (input_ids/position_ids [k, t], each
        from slot 0, written at its positions) into cache rows `rows` [k]; returns last-position logits [k, V].
        Reads only device tensors: a graph of it serves any rows and parts of its shape."""
        cache = self.kv.fresh_view(rows, position_ids)
        return self._run(cache, input_ids, position_ids, self.columns_mask(position_ids), None)

    def _run(self, cache, input_ids, position_ids, attention_mask, runner, every_position=False) -> torch.Tensor:
        kwargs = {self.cache_arg: cache, "use_cache": True}
        if self._keeps_last_logits:
            kwargs["logits_to_keep"] = 0 if every_position else 1  # HF's 0: every position
        # compiled code builds its constants itself: the hoisting mode is for eager and captured steps
        hoist = self.host_constants is not None and runner is None
        with self.host_constants if hoist else contextlib.nullcontext():
            out = (runner or self.model)(
                input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask, **kwargs
            )
        return out.logits if every_position else out.logits[:, -1, :]

    def step_fn(self, batch: int, context: int | None = None, runner=None) -> Step:
        """The decode step for `batch` rows over the first `context` cache slots, reading only the static
        buffers, by the model or `runner`. The write slot must lie below `context`."""

        def step() -> torch.Tensor:
            return self.forward(
                batch, self.input_ids, self.position_ids, self.attention_mask, context, runner, self.write_slots
            )

        return step

    def capture_step(self, batch: int, context: int | None = None) -> Step:
        """What a graph records: the step of `step_fn`, through the compiled forward under --fuse."""
        return self.step_fn(batch, context, self.fused)

    def first_steps(self, prompt: torch.Tensor, cases, runner=None) -> list[torch.Tensor]:
        """After prefilling `prompt` [b, P]: the logits of one decode step for each (batch, context) in
        `cases`, each from the same cache state (restored after), by the model or `runner`. What the
        fused layers are compared against the eager step with."""
        with torch.no_grad():
            self.prefill(prompt)
        start = self.kv.snapshot(self.max_batch, prompt.shape[1], 1)  # each case writes this one slot
        out = []
        for batch, context in cases:
            self.kv.restore(start)
            tokens = torch.arange(batch, device=self.device) + 3
            self.load_inputs(batch, tokens, torch.full((batch,), prompt.shape[1], device=self.device))
            with torch.no_grad():
                out.append(self.step_fn(batch, context, runner)())
        self.kv.restore(start)
        return out

    def load_inputs(self, bucket: int, tokens: torch.Tensor, positions: torch.Tensor) -> None:
        """Write a batch's next tokens and positions ([b] each) into the buffers, padding up to `bucket`.
        Per-row mode: each row writes at its position, padding rows at the spare slot."""
        b = tokens.shape[0]
        torch_internals.copy_each([self.input_ids[:b, 0], self.position_ids[:b, 0]], [tokens, positions])
        if self.per_row:
            self.write_slots[:b].copy_(self.position_ids[:b])
        if bucket > b:
            self.input_ids[b:bucket].fill_(PAD_TOKEN)
            # padding rows share the batch's write slot, in rows no sequence owns
            self.position_ids[b:bucket].copy_(self.position_ids[:1].expand(bucket - b, 1))
            if self.per_row:
                self.write_slots[b:bucket].fill_(self.spare_slot)

    def hide_left_padding(self, pads: torch.Tensor) -> None:
        """Rows [:len(pads)] of the mask buffer hide their first `pads[r]` cache slots, as a left-padded
        prompt's mask does (generate's); later steps read it. `show_every_slot` undoes it."""
        slots = torch.arange(self.attention_mask.shape[1], device=self.device)
        visible = slots[None, :] >= pads.to(self.device)[:, None]
        self.attention_mask[: pads.shape[0]].copy_(visible)

    def show_every_slot(self) -> None:
        """The mask buffer back to all ones: what a batch of equal-length prompts needs."""
        self.attention_mask.fill_(1)

    def prefill(
        self,
        prompt: torch.Tensor,
        chunk: int | None = None,
        pads: torch.Tensor | None = None,
        each_chunk: Callable[[int], contextlib.AbstractContextManager] | None = None,
    ) -> torch.Tensor:
        """Eagerly run a prompt [b, P] from slot 0 into rows [:b]; returns last-position logits [b, V].
        `chunk`: at most that many tokens per forward (bounds the attention scores of a long prompt).
        `each_chunk(slots)`: a context each chunk's forward runs in, given the slots filled once it is written
        (verify cuts the chunk's attention there); not in per-row mode.
        `pads` [b]: row r is left-padded by pads[r] slots (its tokens there are replaced by PAD_TOKEN), as
        generate pads a batch: the mask buffer hides them (left so for the steps after; the caller
        calls `show_every_slot` when done) and the row's positions count from its first real token.
        Per-row mode has no padding: row r's real tokens (after its pads[r]) go to its slots from 0 on, at
        the same positions, so the row's next token goes to slot P - pads[r]."""
        b, length = prompt.shape
        if length >= self.max_cache_len:
            raise BadOptionError(
                f"prompt length {length} leaves no room in a cache of {self.max_cache_len} slots.",
                "Raise {max_cache_len} or lower {prompt_len}.",
            )
        self.kv.rewind(0)
        step = chunk or length
        if self.per_row:
            logits = self._prefill_rows(prompt, step, pads)
            self.kv.advance(length)
            return logits
        offsets = torch.zeros(b, 1, dtype=torch.long, device=self.device)
        if pads is not None:
            self.hide_left_padding(pads)
            offsets = pads.to(self.device)[:, None]
            slots = torch.arange(length, device=prompt.device)[None, :]
            prompt = prompt.masked_fill(slots < pads.to(prompt.device)[:, None], PAD_TOKEN)
        with torch.no_grad():
            for first in range(0, length, step):
                part = prompt[:, first : first + step].to(self.device)
                slots = torch.arange(first, first + part.shape[1], device=self.device).expand(b, -1)
                positions = (slots - offsets).clamp(min=0)
                with each_chunk(first + part.shape[1]) if each_chunk else contextlib.nullcontext():
                    logits = self.forward(b, part, positions, self.attention_mask)
        self.kv.advance(length)
        return logits

    def _prefill_rows(self, prompt: torch.Tensor, step: int, pads: torch.Tensor | None) -> torch.Tensor:
        """Per-row mode's prefill: each row its real tokens, from slot 0 of its own row, `step` at a time."""
        out = []
        for row in range(prompt.shape[0]):
            tokens = prompt[row, int(pads[row]) if pads is not None else 0 :]
            for first in range(0, tokens.shape[0], step):
                logits = self.prefill_row(row, tokens[first : first + step], first)
            out.append(logits)
        return torch.cat(out)

    def prefill_row(self, row: int, tokens: torch.Tensor, first: int) -> torch.Tensor:
        """Per-row mode: a chunk of row `row`'s prompt, `tokens` [t], written at positions (and slots)
        first .. first + t - 1 of that row alone; its last position's logits [1, V]."""
        tokens = tokens.to(self.device)
        positions = torch.arange(first, first + tokens.shape[0], device=self.device)
        with torch.no_grad():
            return self.row_forward(row, tokens[None], positions[None])

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.get_text_config().vocab_size)
