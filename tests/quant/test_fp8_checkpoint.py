"""Hugging Face fine-grained FP8 checkpoints load through the real loading path (models/loading.py) as our
Fp8Linear layers holding the checkpoint's own tensors; the variants we do not run, and a float32 run, are
refused in one line."""

from __future__ import annotations

import json

import pytest
import torch
from fp8_checkpoints import QUANTIZATION_CONFIG, write_fp8_checkpoint
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from accelerate_graph.common.errors import BadOptionError, ModelFileError, UnsupportedModelError
from accelerate_graph.models.loading import load_model
from accelerate_graph.quant.fp8_linear import Fp8Linear
from accelerate_graph.quant.quantize import fp8_layers, quantize_model

CPU = torch.device("cpu")


def test_the_checkpoints_fp8_layers_load_as_ours_with_its_tensors(fp8_checkpoint_dir, trained_tiny):
    loaded = load_model(fp8_checkpoint_dir, CPU, torch.bfloat16)
    model = loaded.model
    layers = {name: m for name, m in model.named_modules() if isinstance(m, Fp8Linear)}
    assert len(layers) == 7 * model.config.num_hidden_layers and all(m.block == 128 for m in layers.values())
    assert type(model.lm_head) is torch.nn.Linear and not hasattr(model.config, "quantization_config")
    assert any("FP8 e4m3 from the checkpoint (128x128 block scales)" in note for note in loaded.notes)
    with safe_open(f"{fp8_checkpoint_dir}/model.safetensors", framework="pt") as stored:
        name = "model.layers.1.mlp.gate_proj"  # 352 x 128: a partial block row
        assert torch.equal(layers[name].weight.view(torch.uint8), stored.get_tensor(f"{name}.weight").view(torch.uint8))
        assert torch.equal(layers[name].scale, stored.get_tensor(f"{name}.weight_scale_inv"))
    # the same logits as the bf16 model quantized here in blocks: one format, both ways in
    ours = AutoModelForCausalLM.from_pretrained(trained_tiny, dtype=torch.bfloat16).eval()
    quantize_model(ours, "fp8-block")
    ids = torch.randint(0, 4096, (2, 7))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ours(ids).logits)


def test_an_fp8_checkpoint_in_float32_is_refused(fp8_checkpoint_dir):
    with pytest.raises(BadOptionError, match="is an FP8 checkpoint: FP8 weights multiply bf16"):
        load_model(fp8_checkpoint_dir, CPU, torch.float32)


def test_asking_to_quantize_an_fp8_checkpoint_again_is_refused(fp8_checkpoint_dir):
    model = load_model(fp8_checkpoint_dir, CPU, torch.bfloat16).model
    assert fp8_layers(model)
    with pytest.raises(BadOptionError, match="already holds FP8 layers"):
        quantize_model(model, "fp8")


@pytest.mark.parametrize(
    "change, words",
    [
        ({"activation_scheme": "static"}, "static activation scales"),
        ({"weight_block_size": [128, 64]}, "square blocks"),
        ({"scale_fmt": "ue8m0"}, "float32 scales"),
    ],
)
def test_variants_we_do_not_run_are_named(trained_tiny, tmp_path, change, words):
    folder = write_fp8_checkpoint(trained_tiny, tmp_path / "variant", {**QUANTIZATION_CONFIG, **change})
    with pytest.raises(UnsupportedModelError, match=words):
        load_model(str(folder), CPU, torch.bfloat16)


def test_a_config_that_declares_fp8_over_plain_weights_is_refused(trained_tiny, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(trained_tiny, dtype=torch.bfloat16)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "quantization_config": QUANTIZATION_CONFIG}))
    with pytest.raises(ModelFileError, match="no weight_scale_inv tensor"):
        load_model(str(tmp_path), CPU, torch.bfloat16)


def test_a_sharded_checkpoint_is_written_and_loads_with_every_scale(tmp_path):
    """Large models save in shards: each shard's Linear weights become FP8 with their scales beside them, and
    the index names the scales' shards; the folder appears only when whole."""
    from accelerate_graph.quant.fp8_export import write_fine_grained
    from accelerate_graph.zoo.configs import tiny_config

    torch.manual_seed(0)
    config = tiny_config("llama")
    config.hidden_size, config.intermediate_size = 256, 384  # full and partial 128 x 128 blocks
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    folder = write_fine_grained(model, tmp_path / "sharded", max_shard_size="400KB")
    assert not (tmp_path / "sharded.partial").exists()
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1  # shards
    scales = [key for key in index["weight_map"] if key.endswith(".weight_scale_inv")]
    assert len(scales) == 7 * config.num_hidden_layers
    loaded = load_model(str(folder), CPU, torch.bfloat16).model
    assert sum(isinstance(m, Fp8Linear) for m in loaded.modules()) == len(scales)
    with pytest.raises(FileExistsError):
        write_fine_grained(model, folder)


def test_the_export_command_writes_a_checkpoint_of_a_recipe_and_refuses_an_existing_folder(tmp_path, capsys):
    from accelerate_graph.quant.fp8_export import main

    assert main(["tiny", str(tmp_path / "tiny-fp8"), "--device", "cpu"]) == 0
    assert "Linear layers in FP8" in capsys.readouterr().out
    loaded = load_model(str(tmp_path / "tiny-fp8"), CPU, torch.bfloat16)
    assert fp8_layers(loaded.model)
    assert main(["tiny", str(tmp_path / "tiny-fp8")]) == 2
    assert capsys.readouterr().err.strip().endswith("exists; give a new folder.")
    assert main(["no-such-recipe-or-folder", str(tmp_path / "x")]) == 2


def test_the_export_command_says_in_one_line_when_nothing_can_be_stored(tmp_path, capsys, monkeypatch):
    from accelerate_graph.quant import fp8_export

    monkeypatch.setattr(fp8_export, "_quantized_linears", lambda model: [])
    assert fp8_export.main(["tiny", str(tmp_path / "tiny-fp8"), "--device", "cpu"]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "nothing to store in FP8" in errors[0]  # beside transformers' progress bar
    assert list(tmp_path.iterdir()) == []  # neither the folder nor its partial copy is left
