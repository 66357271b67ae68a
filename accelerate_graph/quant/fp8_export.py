"""Write a Hugging Face fine-grained FP8 checkpoint (the format Qwen3-FP8 and DeepSeek publish) from a model:
each Linear of the decoder as float8_e4m3fn `weight` with a float32 `weight_scale_inv` per 128 x 128 block,
the LM head as it was, and a `quantization_config` in config.json that says so. It makes the checkpoints users
download, offline, from any model this tool loads, to prove that path at any size:

    python -m accelerate_graph.quant.fp8_export MODEL OUT   # MODEL: a recipe, a folder or a hub id
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from accelerate_graph.quant.fp8_checkpoint import INDEX, SCALE_SUFFIX, weight_files
from accelerate_graph.quant.fp8_format import BLOCK, quantize

QUANTIZATION_CONFIG = {
    "quant_method": "fp8",
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "weight_block_size": [BLOCK, BLOCK],
    "modules_to_not_convert": ["lm_head"],
}


def _quantized_linears(model: torch.nn.Module) -> dict[str, torch.nn.Linear]:
    """The stored weight names of the Linear layers the checkpoint keeps in FP8: every one but the LM head."""
    return {
        f"{name}.weight": module
        for name, module in model.named_modules()
        if type(module) is torch.nn.Linear and name != "lm_head"
    }


def _quantize_files(folder: Path, linears: dict[str, torch.nn.Linear]) -> int:
    """Rewrite each weight file of `folder` with its Linear weights in FP8 and their scales beside them;
    the sharded index, where there is one, names the scales' files. Returns how many weights it quantized."""
    index_path = folder / INDEX
    index = json.loads(index_path.read_text(encoding="utf-8")) if index_path.is_file() else None
    done = 0
    for path in weight_files(folder):
        with safe_open(str(path), framework="pt") as stored:
            tensors = {key: stored.get_tensor(key) for key in stored.keys()}  # noqa: SIM118 - not a dict
        keys = [key for key in tensors if key in linears]
        for key in keys:
            weight, scale = quantize(linears[key].weight.detach(), BLOCK)
            scale_key = key.removesuffix(".weight") + SCALE_SUFFIX
            tensors[key], tensors[scale_key] = weight.cpu(), scale.cpu()
            if index is not None:
                index["weight_map"][scale_key] = path.name
        if keys:
            save_file(tensors, str(path), metadata={"format": "pt"})
            done += len(keys)
    if index is not None:
        index_path.write_text(json.dumps(index, indent=2), encoding="utf-8")
    return done


def write_fine_grained(
    model: torch.nn.Module,
    folder: Path,
    tokenizer_from: Path | None = None,
    config: dict | None = None,
    max_shard_size: str | int = "5GB",
) -> Path:
    """`model` saved in `folder` (which must not exist) as a fine-grained FP8 checkpoint, written beside it
    first and moved into place at the end; `tokenizer_from`: a folder whose tokenizer files go along;
    `config`: another quantization_config (the default is the one published checkpoints carry)."""
    folder = Path(folder)
    if folder.exists():
        raise FileExistsError(f"{folder} exists; give a new folder")
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial, max_shard_size=max_shard_size)
    if not _quantize_files(partial, _quantized_linears(model)):
        shutil.rmtree(partial)
        raise ValueError("the saved checkpoint names none of the model's Linear weights: nothing to store in FP8")
    for extra in Path(tokenizer_from).glob("tokenizer*") if tokenizer_from is not None else ():
        shutil.copy(extra, partial / extra.name)
    config_path = partial / "config.json"
    saved = json.loads(config_path.read_text(encoding="utf-8"))
    saved["quantization_config"] = config or QUANTIZATION_CONFIG
    config_path.write_text(json.dumps(saved, indent=2), encoding="utf-8")
    partial.rename(folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    from accelerate_graph.common.errors import CugraphAccelError
    from accelerate_graph.models.loading import load_model

    parser = argparse.ArgumentParser(prog="python -m accelerate_graph.quant.fp8_export", description=__doc__)
    parser.add_argument("model", help="a recipe, a model folder or a hub id (loaded in bf16)")
    parser.add_argument("out", type=Path, help="the folder to write (must not exist)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    if args.out.exists():
        print(f"error: {args.out} exists; give a new folder.", file=sys.stderr)
        return 2
    try:
        loaded = load_model(args.model, torch.device(args.device), torch.bfloat16)
    except CugraphAccelError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    source = Path(args.model)
    try:
        write_fine_grained(loaded.model, args.out, tokenizer_from=source if source.is_dir() else None)
    except (ValueError, OSError) as err:  # no Linear weight to store, a full disk, a folder made meanwhile
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}: {len(_quantized_linears(loaded.model))} Linear layers in FP8 ({BLOCK} x {BLOCK} blocks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
