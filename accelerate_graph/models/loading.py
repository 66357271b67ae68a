"""Turn MODEL (a recipe, a local folder or a hub id) into a causal LM on the requested device."""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import torch
from transformers import CONFIG_MAPPING, AutoConfig, AutoModelForCausalLM

from accelerate_graph.common.devices import dtype_name
from accelerate_graph.common.errors import (
    BadOptionError,
    ModelFileError,
    ModelNotFoundError,
    RecipeError,
    ResourceError,
    UnsupportedModelError,
    first_line,
    is_out_of_memory,
)
from accelerate_graph.compat.transformers_internals import attention_softcap, causal_lm_class_names
from accelerate_graph.models.fingerprint import check_weight_files, hub_snapshot
from accelerate_graph.models.recipes import Recipe, find_recipe
from accelerate_graph.quant.fp8_checkpoint import (
    fp8_checkpoint,
    install_fp8_layers,
    quiet_load_report,
    without_quantization,
)
from accelerate_graph.quant.quantize import check_fp8_dtype

# Encoders whose "causal LM" head only works when configured as a decoder.
ENCODER_FAMILIES = {
    "bert", "bert-generation", "roberta", "roberta-prelayernorm", "xlm-roberta", "xlm-roberta-xl",
    "electra", "ernie", "camembert", "data2vec-text", "megatron-bert", "rembert", "roc_bert", "xmod",
    "big_bird",
}  # fmt: skip


@dataclass
class LoadedModel:
    model: torch.nn.Module
    reference: str  # what the user typed
    kind: str  # "recipe", "folder" or "hub"
    random_weights: bool
    device: torch.device
    dtype: torch.dtype
    attn: str  # the attention implementation actually in use
    recipe: Recipe | None = None
    revision: str | None = None
    notes: list[str] = field(default_factory=list)
    initialised: list[str] = field(default_factory=list)  # weights missing from the checkpoint, set at random

    @property
    def label(self) -> str:
        # a local folder's weights may be a fine-tune, a conversion or a test's: said by where they came from
        missing = f"{len(self.initialised)} weight(s) initialised at random"
        if self.random_weights:
            weights = "random weights"
        elif self.kind == "folder":
            weights = f"weights from {self.reference}" + (f", {missing}" if self.initialised else "")
        else:
            weights = f"partly trained: {missing}" if self.initialised else "trained weights"
        return f"{self.reference} ({self.kind}, {self.model.config.model_type}, {weights})"


def _looks_like_path(reference: str) -> bool:
    return reference.startswith(("/", "./", "../", "~")) or Path(reference).expanduser().exists()


def check_causal_lm(config, reference: str) -> None:
    model_type = getattr(config, "model_type", "?")
    if getattr(config, "is_encoder_decoder", False):
        raise UnsupportedModelError(
            f"{reference} is an encoder-decoder model ({model_type}); decode graphs need a decoder-only causal LM."
        )
    if model_type not in causal_lm_class_names():
        raise UnsupportedModelError(
            f"{reference} ({model_type}) is not a causal language model transformers can load with "
            "AutoModelForCausalLM."
        )
    if model_type in ENCODER_FAMILIES and not getattr(config, "is_decoder", False):
        raise UnsupportedModelError(f"{reference} ({model_type}) is an encoder, not a decoder-only causal LM.")


def _hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    from huggingface_hub import constants

    host = urlparse(constants.ENDPOINT).hostname or ""
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _with_attn_fallback(build, attn: str, notes: list[str], config):
    """Build with the requested attention; fall back to eager where the model has no sdpa, or where sdpa
    would compute another model: it ignores attention logit softcapping (Gemma-2), which eager applies."""
    softcap = attention_softcap(config)
    if attn == "sdpa" and softcap:
        notes.append(
            f"sdpa attention ignores this model's attention logit softcapping ({softcap:g}); "
            "using eager attention, which applies it."
        )
        attn = "eager"
    try:
        return build(attn), attn
    except (ValueError, ImportError) as err:
        if attn == "eager" or "attn" not in str(err).lower() and "attention" not in str(err).lower():
            raise
        notes.append(f"{attn} attention is not supported by this model; using eager attention.")
        return build("eager"), "eager"


def recipe_config(recipe: Recipe):
    """The transformers config a recipe describes (no weights)."""
    if recipe.model_type not in CONFIG_MAPPING:
        raise RecipeError(
            f"recipe {recipe.name}: unknown model_type {recipe.model_type!r}.",
            "Use a model type transformers knows, e.g. llama or qwen2.",
        )
    try:
        return AutoConfig.for_model(recipe.model_type, **recipe.config)
    except Exception as err:  # noqa: BLE001 - config classes raise many types on bad values
        raise RecipeError(f"recipe {recipe.name}: its config is invalid: {first_line(err, 200)}") from err


def _load_recipe(recipe: Recipe, device, dtype, attn, notes):
    config = recipe_config(recipe)
    check_causal_lm(config, recipe.name)
    torch.manual_seed(recipe.seed)

    def build(impl):
        with torch.device(device):
            return AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=impl)

    return _with_attn_fallback(build, attn, notes, config)


MISSING_SHOWN = 3  # missing weight names quoted in the note


def _missing_weights_note(source: str, missing: list[str]) -> str:
    shown = ", ".join(missing[:MISSING_SHOWN]) + (", ..." if len(missing) > MISSING_SHOWN else "")
    return (
        f"{len(missing)} weight(s) are missing from the checkpoint in {source} and were initialised at "
        f"random by transformers ({shown}): outputs are not the trained model's."
    )


def _load_pretrained(source: str, device, dtype, attn, notes, initialised: list[str] | None = None, **hub_kwargs):
    config = AutoConfig.from_pretrained(source, **hub_kwargs)
    check_causal_lm(config, source)
    fp8 = fp8_checkpoint(config, source)
    if fp8 is not None:  # loaded plain, then its FP8 layers put in (quant/fp8_checkpoint.py)
        check_fp8_dtype(dtype, f"{source} is an FP8 checkpoint")
        hub_kwargs["config"] = without_quantization(config)

    def build(impl):
        with quiet_load_report() if fp8 is not None else contextlib.nullcontext():
            model, info = AutoModelForCausalLM.from_pretrained(
                source, dtype=dtype, attn_implementation=impl, output_loading_info=True, **hub_kwargs
            )
        missing = sorted(info.get("missing_keys") or ())
        if missing and initialised is not None:
            initialised[:] = missing
        return model

    model, impl = _with_attn_fallback(build, attn, notes, config)
    if initialised:
        notes.append(_missing_weights_note(source, initialised))
    if fp8 is not None:
        folder = Path(source) if Path(source).is_dir() else hub_snapshot(source, hub_kwargs.get("revision"))
        count = install_fp8_layers(model, folder, fp8)
        notes.append(f"{count} linear layers in FP8 e4m3 from the checkpoint ({fp8.block}x{fp8.block} block scales)")
    return model.to(device), impl


def _is_safetensors_error(err: BaseException) -> bool:
    return type(err).__module__.split(".")[0] == "safetensors" or "safetensor" in type(err).__name__.lower()


def _load_folder(reference: str, device, dtype, attn, notes, initialised):
    folder = Path(reference).expanduser()
    if not folder.exists():
        raise ModelNotFoundError(f"model folder {reference} does not exist.", "Check the path.")
    if not folder.is_dir():
        raise ModelNotFoundError(
            f"{reference} is a file, not a model folder.", "Give the folder save_pretrained wrote."
        )
    if not (folder / "config.json").is_file():
        raise ModelNotFoundError(
            f"{reference} has no config.json, so it is not a Hugging Face model folder.",
            "Give the folder save_pretrained wrote.",
        )
    check_weight_files(folder)  # a truncated or corrupt file, named, before transformers maps it
    try:
        return _load_pretrained(str(folder), device, dtype, attn, notes, initialised)
    except OSError as err:
        raise ModelNotFoundError(f"cannot load the model in {reference}: {first_line(err)}") from err
    except Exception as err:
        if not _is_safetensors_error(err):
            raise
        raise ModelFileError(
            f"a weight file in {reference} cannot be read: {first_line(err)}.",
            "Copy or download the model again.",
        ) from err


def _load_hub(reference: str, revision, device, dtype, attn, notes, initialised):
    kwargs = {"revision": revision} if revision else {}
    if (snapshot := hub_snapshot(reference, revision)) is not None:
        check_weight_files(snapshot)
    try:  # the local HF cache first: no network round trips
        return _load_pretrained(reference, device, dtype, attn, notes, initialised, local_files_only=True, **kwargs)
    except OSError:
        pass
    if not _hub_reachable():
        raise ModelNotFoundError(
            f"model {reference!r} is not a built-in recipe, a local folder, or in the local Hugging Face cache, "
            "and the hub cannot be reached.",
            "Download it on a connected machine (or pass a local folder); built-in recipes: "
            "run `cugraph-accel recipes`.",
        )
    try:
        return _load_pretrained(reference, device, dtype, attn, notes, initialised, **kwargs)
    except OSError as err:
        raise ModelNotFoundError(f"model {reference!r} was not found on the hub: {first_line(err)}") from err


def load_model(
    reference: str,
    device: torch.device,
    dtype: torch.dtype,
    attn: str = "sdpa",
    revision: str | None = None,
) -> LoadedModel:
    """Resolve MODEL in this order: an existing path, a recipe (name or .yaml), a hub id."""
    if not reference.strip():
        raise BadOptionError("MODEL is empty.", "Give a recipe name, a model folder or a hub id.")
    try:
        return _load(reference, device, dtype, attn, revision)
    except RuntimeError as err:
        if not is_out_of_memory(err):
            raise
        raise ResourceError(
            f"out of memory loading {reference} in {dtype_name(dtype)} on {device}: its weights do not fit.",
            "Use a smaller {dtype} (bf16), another {device}, or a smaller model.",
        ) from err


def _load(reference: str, device: torch.device, dtype: torch.dtype, attn: str, revision: str | None) -> LoadedModel:
    notes: list[str] = []
    initialised: list[str] = []
    if _looks_like_path(reference) and not reference.endswith((".yaml", ".yml")):
        model, impl = _load_folder(reference, device, dtype, attn, notes, initialised)
        kind, recipe = "folder", None
    elif (recipe := find_recipe(reference)) is not None:
        model, impl = _load_recipe(recipe, device, dtype, attn, notes)
        kind = "recipe"
    else:
        model, impl = _load_hub(reference, revision, device, dtype, attn, notes, initialised)
        kind = "hub"
    return LoadedModel(
        model=model.eval(),
        reference=reference,
        kind=kind,
        random_weights=kind == "recipe",
        device=device,
        dtype=dtype,
        attn=impl,
        recipe=recipe,
        revision=revision,
        notes=notes,
        initialised=initialised,
    )
