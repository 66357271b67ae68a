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


def test_a_model_with_attention_softcapping_loads_with_eager_attention(tmp_path):
    """sdpa ignores Gemma-2's attention logit softcapping (it computes another model; transformers 5.17 loads
    it so, later versions refuse); eager applies it. Loaded with the default sdpa, such a model gets eager
    and a note saying why, and its logits are transformers' own eager forward's."""
    from transformers import AutoModelForCausalLM

    from accelerate_graph.zoo.configs import tiny_config

    config = tiny_config("gemma2")
    config.attn_logit_softcapping = 0.5  # small enough that every score is capped: sdpa would differ
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    loaded = load_model(str(tmp_path), torch.device("cpu"), torch.float32)
    assert loaded.attn == "eager"
    assert any("ignores this model's attention logit softcapping (0.5)" in note for note in loaded.notes)
    ids = torch.arange(12).reshape(2, 6)
    eager = AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded.model.eval()(ids).logits, eager(ids).logits)
    llama = load_model("tiny", torch.device("cpu"), torch.float32)
    assert llama.attn == "sdpa"  # nothing to cap: sdpa as asked
