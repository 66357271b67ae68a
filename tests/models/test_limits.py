"""The model's own position limit holds the cache length, before anything is loaded onto the device."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM
from typer.testing import CliRunner

from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.models import loading
from accelerate_graph.models.limits import cache_length, position_limit
from accelerate_graph.pipeline import CaptureRequest, prepare
from cli.main import app

# Three families whose position table a longer cache would index past (learned, offset learned, sinusoidal).
SHORT_MODELS = {
    "gpt2": dict(n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=256, bos_token_id=0, eos_token_id=0),
    "opt": dict(
        hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=256,
        max_position_embeddings=256, word_embed_proj_dim=64, pad_token_id=1,
    ),
    "gptj": dict(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, vocab_size=256, n_positions=256),
}  # fmt: skip


@pytest.fixture(scope="module")
def short_model(tmp_path_factory):
    made = {}

    def get(model_type: str) -> str:
        if model_type not in made:
            torch.manual_seed(0)
            config = AutoConfig.for_model(model_type, **SHORT_MODELS[model_type])
            folder = tmp_path_factory.mktemp(f"short-{model_type}")
            AutoModelForCausalLM.from_config(config).save_pretrained(folder)
            made[model_type] = str(folder)
        return made[model_type]

    return get


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"max_position_embeddings": 4096}, (4096, "max_position_embeddings")),
        ({"n_positions": 256, "n_ctx": 1024}, (256, "n_positions")),
        ({"n_ctx": 2048}, (2048, "n_ctx")),
        ({"max_sequence_length": 2048}, (2048, "max_sequence_length")),
        ({"seq_length": 8192}, (8192, "seq_length")),
        ({}, (None, "")),
    ],
)
def test_position_limit_whatever_the_config_calls_it(values, expected):
    class Config:
        pass

    config = Config()
    config.__dict__.update(values)
    assert position_limit(config) == expected


def test_default_is_cut_to_the_limit_and_an_explicit_longer_cache_refused():
    config = AutoConfig.for_model("gpt2", n_positions=256)
    assert cache_length(None, 1024, config) == (256, cache_length(None, 1024, config)[1])
    assert "cache length 256, not the default 1024" in cache_length(None, 1024, config)[1]
    assert cache_length(128, 1024, config) == (128, None)
    with pytest.raises(
        BadOptionError, match=r"max_cache_len=512 is longer than the model's 256 positions \(n_positions"
    ):
        cache_length(512, 1024, config)


ON_GPU = pytest.param(
    "cuda",
    marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")],
)  # on a GPU an index past the table is a device-side assert, which poisons the process's CUDA context


@pytest.mark.parametrize("device", ["cpu", ON_GPU])
@pytest.mark.parametrize("model_type", sorted(SHORT_MODELS))
def test_short_model_captures_and_verifies_at_its_own_limit(short_model, model_type, device):
    """Today's failure: capture at the default 1024 slots succeeded, then verify hit `IndexError: index out
    of range in self`. Now the default cache is the model's 256 positions, said in one line, and verify passes."""
    from accelerate_graph.verify.against_eager import verify_graphs

    prepared = prepare(CaptureRequest(model=short_model(model_type), buckets=(1, 2), device=device))
    assert prepared.plan.max_cache_len == 256
    assert any("cache length 256, not the default 1024" in note for note in prepared.notes)
    rows = verify_graphs(prepared.graphs, steps=4, prompt_len=prepared.plan.prompt_len)
    assert rows and all(row.passed for row in rows), [row.detail for row in rows]
    # the slot next to the limit too: the last position the table has
    rows = verify_graphs(prepared.graphs, steps=4, prompt_len=252)
    assert all(row.passed for row in rows), [row.detail for row in rows]


def test_an_explicit_longer_cache_is_refused_before_the_weights_load(short_model, monkeypatch):
    def no_load(*args, **kwargs):
        raise AssertionError("the weights were loaded before the cache length was checked")

    monkeypatch.setattr(loading, "_load", no_load)
    with pytest.raises(BadOptionError, match="longer than the model's 256 positions"):
        prepare(CaptureRequest(model=short_model("opt"), max_cache_len=1024, device="cpu"))


def test_cli_refuses_with_one_line(short_model, tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "capture",
            short_model("gptj"),
            "--max-cache-len",
            "512",
            "--device",
            "cpu",
            "--plan",
            str(tmp_path / "p.yaml"),
        ],
    )
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--max-cache-len 512 is longer than the model's 256 positions" in errors[0], (
        result.output
    )
    assert "Traceback" not in result.output


def test_the_drop_in_holds_its_cache_to_the_positions_as_the_cli_does(short_model):
    """accelerate(): a longer cache asked for is refused naming the keyword (its replays would index past the
    position table); the default is cut to the positions, said once, and generate() then replays graphs."""
    from accelerate_graph.generate.dropin import accelerate

    model = loading.load_model(short_model("gpt2"), torch.device("cpu"), torch.float32, "sdpa", None).model
    with pytest.raises(BadOptionError) as refused:
        accelerate(model, buckets=(1,), max_cache_len=1024, emulate=True)
    assert str(refused.value) == (
        "max_cache_len=1024 is longer than the model's 256 positions (n_positions in its config). "
        "Use max_cache_len=256 or less."
    )
    ids = torch.tensor([[3, 4, 5]])
    expected = model.generate(input_ids=ids, max_new_tokens=6, do_sample=False, pad_token_id=0)
    with pytest.warns(UserWarning, match="cache length 256, not the default 1024"):
        handle = accelerate(model, buckets=(1,), contexts=(), emulate=True)
    with handle:
        assert handle.session.max_cache_len == 256 and len(handle.notes) == 1
        got = model.generate(input_ids=ids, max_new_tokens=6, do_sample=False, pad_token_id=0)
        assert torch.equal(got, expected) and handle.counts.graph_steps == 5
