import pytest
import torch

from accelerate_graph.common.errors import ModelNotFoundError, RecipeError, UnsupportedModelError
from accelerate_graph.models.loading import load_model
from accelerate_graph.models.recipes import builtin_recipe_names, find_recipe, load_recipe_file

CPU = torch.device("cpu")


def test_loads_a_saved_folder(tiny_model_dir):
    loaded = load_model(tiny_model_dir("llama"), CPU, torch.float32)
    assert loaded.kind == "folder" and not loaded.random_weights
    assert loaded.model.config.model_type == "llama"
    assert loaded.attn == "sdpa"


def test_loads_a_builtin_recipe_with_fixed_seed():
    a = load_model("tiny", CPU, torch.float32)
    b = load_model("tiny", CPU, torch.float32)
    assert a.kind == "recipe" and a.random_weights and "random weights" in a.label
    assert torch.equal(a.model.lm_head.weight, b.model.lm_head.weight)


def test_builtin_recipes_are_valid():
    names = builtin_recipe_names()
    assert {"tiny", "qwen2.5-0.5b", "llama-3.2-1b"} <= set(names)
    for name in names:
        recipe = find_recipe(name)
        assert recipe.name == name
        assert recipe.defaults.prompt_len < recipe.defaults.max_cache_len


def test_recipe_rejects_unknown_key_by_name(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nmodel_type: llama\nconfig: {}\nlayers: 3\n")
    with pytest.raises(RecipeError, match="unknown key 'layers'"):
        load_recipe_file(path)
    path.write_text("name: r\nmodel_type: llama\nconfig: {}\ndefaults: {cache: 3}\n")
    with pytest.raises(RecipeError, match="unknown key 'cache'"):
        load_recipe_file(path)


def test_recipe_rejects_wrong_types(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nmodel_type: llama\nconfig: []\n")
    with pytest.raises(RecipeError, match="'config' must be a dict"):
        load_recipe_file(path)


def test_missing_folder_and_folder_without_config(tmp_path):
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        load_model(str(tmp_path / "absent"), CPU, torch.float32)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        load_model(str(tmp_path / "empty"), CPU, torch.float32)


def test_unknown_hub_id_offline_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match="not a built-in recipe, a local folder"):
        load_model("someorg/no-such-model", CPU, torch.float32)


def test_encoder_decoder_is_refused(tmp_path):
    from transformers import AutoConfig

    AutoConfig.for_model("t5", d_model=32, num_layers=1, num_heads=2, d_ff=64).save_pretrained(tmp_path)
    with pytest.raises(UnsupportedModelError, match="encoder-decoder"):
        load_model(str(tmp_path), CPU, torch.float32)
