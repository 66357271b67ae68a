"""Put FP8 layers in a model: each nn.Linear of the decoder becomes an Fp8Linear of the same weights
(round to nearest, amax / 448 scales); the LM head and the embeddings keep the model's dtype unless
asked. `--weights` (`weights=` in the API) names the scheme: model (nothing changes), fp8 (a scale per
output channel) or fp8-block (a scale per 128 x 128 block)."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from accelerate_graph.common.errors import BadOptionError, UnsupportedModelError, option
from accelerate_graph.quant.fp8_format import SCHEME_BLOCK, WEIGHTS
from accelerate_graph.quant.fp8_linear import Fp8Linear

DEFAULT_KEEP = ("lm_head", "embed")  # module names (any part) left in the model's dtype
FP8_DTYPES = (torch.bfloat16, torch.float16)  # activations the FP8 product runs with


def check_weights(weights: str) -> str:
    if weights not in WEIGHTS:
        raise BadOptionError(f"{option('weights', weights)} is not one of {', '.join(WEIGHTS)}.")
    return weights


def check_fp8_dtype(dtype: torch.dtype, asked_by: str = "") -> None:
    """FP8 weights run with bf16 or fp16 activations; `asked_by` names what asked for them."""
    if dtype not in FP8_DTYPES:
        raise BadOptionError(
            f"{asked_by + ': ' if asked_by else ''}FP8 weights multiply bf16 or fp16 activations, and this run "
            f"is {str(dtype).removeprefix('torch.')}.",
            f"Pass {option('dtype', 'bf16')} (or fp16).",
        )


def fp8_layers(model: torch.nn.Module) -> list[Fp8Linear]:
    return [module for module in model.modules() if isinstance(module, Fp8Linear)]


def fp8_scheme(model: torch.nn.Module) -> str | None:
    """fp8 or fp8-block where the model holds FP8 layers (the first one's scheme), else None."""
    layers = fp8_layers(model)
    return layers[0].scheme if layers else None


def _quantized_elsewhere(model: torch.nn.Module) -> str | None:
    """What already quantized the model, other than us, or None."""
    if getattr(model, "is_quantized", False) or getattr(model, "hf_quantizer", None) is not None:
        method = getattr(getattr(model.config, "quantization_config", None), "quant_method", None)
        return f"transformers ({method or 'a quantization method'})"
    low = next((p for p in model.parameters() if not p.is_floating_point() or p.element_size() == 1), None)
    return None if low is None else f"weights of dtype {str(low.dtype).removeprefix('torch.')}"


@dataclass
class Quantization:
    """The swaps quantize_model made: (parent module, attribute, original, FP8 layer). `install` and
    `restore` put either in place; the originals are kept only when asked (eval's comparisons, the API's
    undo), else dropped so that their memory goes."""

    scheme: str
    keep: tuple[str, ...] = DEFAULT_KEEP
    swaps: list[tuple[torch.nn.Module, str, torch.nn.Module | None, Fp8Linear]] = field(default_factory=list)

    def install(self) -> None:
        for parent, name, _, fp8 in self.swaps:
            setattr(parent, name, fp8)

    def restore(self) -> None:
        if any(original is None for _, _, original, _ in self.swaps):
            raise RuntimeError("the original layers were not kept: quantize_model(..., keep_originals=True)")
        for parent, name, original, _ in self.swaps:
            setattr(parent, name, original)

    @contextmanager
    def installed(self) -> Iterator[None]:
        """The FP8 layers in place for the block, the originals after."""
        self.install()
        try:
            yield
        finally:
            self.restore()

    @property
    def layers(self) -> int:
        return len(self.swaps)

    def describe(self) -> str:
        kept = " and ".join(f"'{word}'" for word in self.keep) or "nothing"
        return (
            f"weights {self.scheme}: {self.layers} linear layers in FP8 e4m3 "
            f"({'a scale per output channel' if self.scheme == 'fp8' else 'a scale per 128 x 128 block'}); "
            f"layers named {kept} kept in the model's dtype"
        )


# models quantize_model changed, and how: a second request for the same scheme is no second quantization
_QUANTIZED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _kept(name: str, keep: tuple[str, ...]) -> bool:
    return any(word in part for part in name.split(".") for word in keep)


def quantize_model(
    model: torch.nn.Module, scheme: str, keep: tuple[str, ...] = DEFAULT_KEEP, keep_originals: bool = False
) -> Quantization:
    """Replace every nn.Linear of `model` whose name has no part containing a word of `keep` with an
    Fp8Linear (`scheme` fp8 or fp8-block); `keep=("embed",)` quantizes the LM head too. Refused on a
    float32 model and on one already quantized."""
    check_weights(scheme)
    if scheme == "model":
        raise ValueError("quantize_model takes fp8 or fp8-block")
    already = "FP8 layers" if fp8_layers(model) else _quantized_elsewhere(model)
    if already is not None:
        raise BadOptionError(
            f"{option('weights', scheme)} asks to quantize a model that already holds {already}.",
            f"Drop {option('weights')} ({option('weights', 'model')}): the model runs its own weights.",
        )
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    check_fp8_dtype(dtype)
    block = SCHEME_BLOCK[scheme]
    done = Quantization(scheme, tuple(keep))
    # names, not modules: each original goes as soon as its FP8 layer replaces it, so quantizing on the GPU
    # peaks near the model's own weights (a list of the modules kept every bf16 layer to the end)
    names = [
        name for name, module in model.named_modules() if type(module) is torch.nn.Linear and not _kept(name, keep)
    ]
    for name in names:
        done.swaps.append(_swap(model, name, block, keep_originals))
    if not done.swaps:
        raise UnsupportedModelError(
            f"{option('weights', scheme)} found no torch.nn.Linear layer to quantize in this model.",
            f"Use {option('weights', 'model')}.",
        )
    _QUANTIZED[model] = done
    return done


def _swap(model: torch.nn.Module, name: str, block: int | None, keep_original: bool) -> tuple:
    """Replace the nn.Linear at `name` with its Fp8Linear: (parent, attribute, the original if kept, FP8 layer)."""
    parent_name, _, attribute = name.rpartition(".")
    parent = model.get_submodule(parent_name)
    original = getattr(parent, attribute)
    fp8 = Fp8Linear.from_linear(original, block)
    setattr(parent, attribute, fp8)
    return parent, attribute, original if keep_original else None, fp8


def ensure_weights(model: torch.nn.Module, weights: str) -> Quantization | None:
    """The model with the weights a request asks for: quantized now (returned), or already by an earlier
    quantize_model of the same scheme, or untouched for `model` (None both ways)."""
    check_weights(weights)
    if weights == "model":
        return None
    earlier = _QUANTIZED.get(model)
    if earlier is not None and earlier.scheme == weights and fp8_layers(model):
        return None
    return quantize_model(model, weights)
