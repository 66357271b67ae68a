"""`accelerate(model)`: the model's own `generate()` runs its decode steps through our graphs.

Only the decode step's forward is replaced, so HF's generation config, logits processors, stopping
criteria and streamers keep working. `generate()` is given our static cache (when the call fits it);
`prepare_inputs_for_generation` is watched for the 2D attention mask (HF turns it into a 4D mask for
static caches, and the graphs read a 2D mask buffer); `forward` replays a graph for one-token steps
on our cache and runs everything else eagerly, counted.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from accelerate_graph.core.buckets import bucket_for


@dataclass
class Counts:
    graph_steps: int = 0  # decode steps replayed
    eager_on_cache: int = 0  # prefills and steps on our cache that no graph fits
    eager_calls: dict[str, int] = field(default_factory=dict)  # generate() calls left to HF, by reason

    def eager_call(self, reason: str) -> None:
        self.eager_calls[reason] = self.eager_calls.get(reason, 0) + 1


def _output_cache_field() -> str:
    """transformers renamed the output's `past_key_values` to `cache` with the argument (after 5.22)."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def _same_signature(wrapper, original):
    """HF reads the signatures of forward and prepare_inputs_for_generation to route kwargs: keep them."""

    def call(*args, **kwargs):
        return wrapper(*args, **kwargs)

    return functools.update_wrapper(call, original)


class Accelerated:
    """The handle `accelerate()` returns: `counts`, `graphs`, `notes`, `undo()`; also a context manager."""

    def __init__(self, model: torch.nn.Module, graphs, undo_extra=(), settings=None, notes=()):
        from transformers.modeling_outputs import CausalLMOutputWithPast

        from accelerate_graph import settings as engine_settings

        self.settings = settings if settings is not None else engine_settings.current()
        self._use = engine_settings.use
        self.model = model
        self.graphs = graphs
        self.session = graphs.session
        self.counts = Counts()
        self.notes = list(notes)  # what the capture chose that the call did not ask for (a shorter cache, ...)
        self._output = CausalLMOutputWithPast
        self._field = _output_cache_field()
        self._mask_2d: torch.Tensor | None = None
        self._undo_extra = list(undo_extra)
        self._originals = {
            name: model.__dict__.get(name) for name in ("forward", "generate", "prepare_inputs_for_generation")
        }
        self._bound = {name: getattr(model, name) for name in self._originals}
        for name, mine in (
            ("forward", self._forward),
            ("generate", self._generate),
            ("prepare_inputs_for_generation", self._prepare_inputs),
        ):
            setattr(model, name, _same_signature(mine, self._bound[name]))
        self.active = True

    # -- generate(): hand it our cache when the call fits it ------------------------------------
    def _refusal(self, args, kwargs) -> str | None:
        cache_arg = self.session.cache_arg
        if kwargs.get(cache_arg) is not None or kwargs.get("past_key_values") is not None:
            return "a cache of the caller's"
        config = kwargs.get("generation_config") or self.model.generation_config
        get = lambda name, default=None: kwargs.get(name, getattr(config, name, default))  # noqa: E731
        if get("cache_implementation") is not None:
            return "cache_implementation given"
        if (get("num_beams", 1) or 1) > 1:
            return "beam search"
        ids = kwargs.get("input_ids", args[0] if args else None)
        if not isinstance(ids, torch.Tensor) or ids.ndim != 2:
            return "no input_ids tensor"
        rows = ids.shape[0] * (get("num_return_sequences", 1) or 1)
        if rows > self.session.max_batch:
            return f"batch {rows} above the cache's {self.session.max_batch} rows"
        new = get("max_new_tokens")
        total = ids.shape[1] + new if new is not None else get("max_length", 20)
        if total - 1 > self.session.max_cache_len:
            return f"{total} tokens exceed the cache's {self.session.max_cache_len} slots"
        return None

    def _generate(self, *args, **kwargs):
        with self._use(self.settings):  # its eager prefill reads them as the captured steps did
            return self._generate_here(*args, **kwargs)

    def _generate_here(self, *args, **kwargs):
        reason = self._refusal(args, kwargs)
        if reason is not None:
            self.counts.eager_call(reason)
            return self._bound["generate"](*args, **kwargs)
        self.session.kv.rewind(0)
        kwargs[self.session.cache_arg] = self.session.kv.cache
        kwargs.setdefault("disable_compile", True)  # the graphs are the compiled form
        try:
            return self._bound["generate"](*args, **kwargs)
        finally:
            self._mask_2d = None
            self.session.attention_mask.fill_(1)

    def _prepare_inputs(self, *args, **kwargs):
        mask = kwargs.get("attention_mask")
        self._mask_2d = mask if isinstance(mask, torch.Tensor) and mask.ndim == 2 else None
        return self._bound["prepare_inputs_for_generation"](*args, **kwargs)

    # -- forward(): replay where a graph fits ---------------------------------------------------
    def _forward(self, *args, **kwargs):
        cache_arg = self.session.cache_arg
        if args or kwargs.get(cache_arg) is not self.session.kv.cache:
            return self._bound["forward"](*args, **kwargs)
        ids = kwargs.get("input_ids")
        if self._fits_graph(ids, kwargs):
            return self._replay(ids, kwargs)
        return self._eager_on_cache(ids, kwargs)

    def _fits_graph(self, ids, kwargs) -> bool:
        extras = ("inputs_embeds", "output_attentions", "output_hidden_states")
        if not isinstance(ids, torch.Tensor) or ids.shape[1] != 1 or any(kwargs.get(k) for k in extras):
            return False
        slot = self.session.kv.next_slot
        return bucket_for(ids.shape[0], self.graphs.buckets) is not None and slot < self.session.max_cache_len

    def _load_mask(self, batch: int) -> None:
        buffer = self.session.attention_mask
        buffer.fill_(1)
        if self._mask_2d is not None:
            width = min(self._mask_2d.shape[1], buffer.shape[1])
            buffer[:batch, :width].copy_(self._mask_2d[:, :width])

    def _replay(self, ids: torch.Tensor, kwargs):
        batch = ids.shape[0]
        positions = kwargs.get("position_ids")
        if positions is None:
            positions = torch.full((batch, 1), self.session.kv.next_slot, device=ids.device)
        self._load_mask(batch)
        logits = self.graphs.run(ids[:, 0], positions[:, 0])
        self.counts.graph_steps += 1
        return self._output(logits=logits[:, None, :], **{self._field: self.session.kv.cache})

    def _eager_on_cache(self, ids, kwargs):
        """The prefill (and any step no graph takes) on a view of our cache, with the 2D mask."""
        length = (ids if ids is not None else kwargs["inputs_embeds"]).shape[1]
        batch = (ids if ids is not None else kwargs["inputs_embeds"]).shape[0]
        kwargs[self.session.cache_arg] = self.session.kv.view(batch)
        if self._mask_2d is not None:
            kwargs["attention_mask"] = self._mask_2d
        self._load_mask(batch)
        out = self._bound["forward"](**kwargs)
        self.session.kv.advance(length)
        out[self._field] = self.session.kv.cache
        self.counts.eager_on_cache += 1
        return out

    # -- undo ---------------------------------------------------------------------------------
    def undo(self) -> None:
        if not self.active:
            return
        for name, original in self._originals.items():
            if original is None:
                self.model.__dict__.pop(name, None)
            else:
                setattr(self.model, name, original)
        for undo in self._undo_extra:
            undo()
        self.active = False

    def __enter__(self) -> Accelerated:
        return self

    def __exit__(self, *exc) -> None:
        self.undo()


def _softcap_ignored(model: torch.nn.Module) -> list[str]:
    """A note where the model softcaps attention logits but was loaded with sdpa, which ignores that."""
    from accelerate_graph.compat.transformers_internals import attention_implementations, attention_softcap

    softcap = attention_softcap(model.config)
    if not softcap or "sdpa" not in attention_implementations(model).values():
        return []
    return [
        f"this model's config softcaps attention logits ({softcap:g}), which its sdpa attention ignores: the "
        "graphs replay the model as loaded; load it with attn_implementation='eager' for the model as configured."
    ]


def accelerate(
    model: torch.nn.Module,
    buckets=(1, 2, 4, 8),
    max_cache_len: int | None = None,
    fuse: bool = False,
    mode: str = "auto",
    contexts: tuple[int, ...] | None = None,
    emulate: bool = False,
    settings=None,
    weights: str = "model",
) -> Accelerated:
    """Capture decode graphs for `model` (already loaded, on its device) and route its `generate()`'s
    decode steps through them: the capture flow `cugraph-accel capture` runs (capture_flow.py). Returns a
    handle; `handle.undo()` (or leaving `with`) restores the model.
    `max_cache_len`: slots per row of the cache; None: 1024, or the model's positions where it has fewer
    (a warning and `handle.notes` say so); more than the model's positions is refused.
    `settings`: the engine settings (accelerate_graph.settings) to capture and run under; None, those in
    use now (the defaults, unless inside `settings.use(...)`).
    `weights`: "model" (as they are), "fp8" or "fp8-block": the decoder's Linear layers replaced by FP8 ones
    (docs/FP8.md) for the handle's life; the originals are kept, and `undo()` puts them back."""
    import warnings

    from accelerate_graph import settings as engine_settings
    from accelerate_graph.capture_flow import GraphRequest, capture_model, resolve_cache_len
    from accelerate_graph.common.errors import BadOptionError, CaptureError, EngineWarning, option
    from accelerate_graph.models.recipes import RecipeDefaults

    if mode == "eager":
        raise BadOptionError(
            f"{option('mode', 'eager')} captures no graph for accelerate() to replay.",
            f"Use {option('mode', 'auto')}, or the model's own generate() without accelerate().",
        )
    cache_len, shortened = resolve_cache_len(max_cache_len, RecipeDefaults().max_cache_len, model.config)
    request = GraphRequest(
        buckets=tuple(buckets),
        cache_len=cache_len,
        prompt_len=cache_len // 2,
        settings=settings if settings is not None else engine_settings.current(),
        mode=mode,
        contexts=contexts,
        fuse=fuse,
        emulate=emulate,
        weights=weights,
    )
    quantized = None
    if weights != "model":
        from accelerate_graph.quant.quantize import quantize_model

        quantized = quantize_model(model, weights, keep_originals=True)
    try:
        captured = capture_model(model, request)
        if captured.graphs is None:
            raise CaptureError(f"no graph can be captured for this model: {captured.decision.regions.reason}")
    except BaseException:
        if quantized is not None:
            quantized.restore()
        raise
    undo = [*captured.undo, *([quantized.restore] if quantized is not None else [])]
    notes = ([shortened] if shortened else []) + ([quantized.describe()] if quantized else []) + captured.notes
    notes += _softcap_ignored(model)
    for note in notes:
        warnings.warn(note, EngineWarning, stacklevel=2)
    return Accelerated(model, captured.graphs, undo, request.settings, notes)
