"""generate never emits a token chosen from NaN/Inf logits: it stops with one clear line, after handing on
only the tokens before it, and finds them with no extra read of the device (the flag travels with the
tokens the loop reads anyway)."""

from __future__ import annotations

import shutil

import pytest
import torch
from test_equality_with_hf import PROMPTS, load
from typer.testing import CliRunner

from accelerate_graph.common.errors import NonFiniteError
from accelerate_graph.core.backends import EmulatedBackend
from accelerate_graph.core.capture import capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.core.host_reads import HostReadMode
from accelerate_graph.generate.loop import NativeLoop
from accelerate_graph.generate.sampling import Sampling
from cli.main import app


def _graphs_whose_replay_poisons(model, row: int, value: float):
    """Graphs that write `value` into one logit of `row` in every replay; the eager prefill is untouched."""
    session = DecodeSession(model, 4, 64)

    def poison(module, args, output):
        return output.index_put((torch.tensor([row]), torch.tensor([-1]), torch.tensor([3])), torch.tensor(value))

    handle = model.lm_head.register_forward_hook(poison)
    try:
        return capture_decode_graphs(session, EmulatedBackend(), (4,), contexts=())
    finally:
        handle.remove()


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("sampling", [Sampling(), Sampling(temperature=0.8, seed=1)])
def test_a_row_with_non_finite_logits_stops_generate_before_its_token(tiny_model_dir, value, sampling):
    graphs = _graphs_whose_replay_poisons(load(tiny_model_dir("llama")), 2, value)
    loop = NativeLoop(graphs, sampling, pad_id=0, check_every=4)
    streamed: dict[int, list[int]] = {}
    with pytest.raises(NonFiniteError, match=r"logits of prompt 3 for new token 2 hold NaN or Inf"):
        loop.generate(PROMPTS[:4], 12, on_tokens=lambda row, tokens: streamed.setdefault(row, []).extend(tokens))
    assert all(len(tokens) == 1 for tokens in streamed.values()), streamed  # the prefill's token only


def test_finite_logits_generate_as_before_with_no_extra_device_read(tiny_model_dir):
    model = load(tiny_model_dir("llama"))
    loop = NativeLoop(capture_decode_graphs(DecodeSession(model, 4, 64), EmulatedBackend(), (4,), contexts=()))
    loop.generate(PROMPTS[:4], 8)  # captures the choice graph
    reads: list[str] = []
    with HostReadMode(reads.append):
        result = loop.generate(PROMPTS[:4], 8)
    assert all(len(row.tokens) == 8 for row in result.rows)
    assert len(reads) <= 6, reads


def test_the_cli_says_one_line_and_exits_non_zero_on_nan_weights(tokenized_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    folder = tmp_path / "nan"
    shutil.copytree(tokenized_model_dir("llama"), folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight[0, 0] = float("nan")
    model.save_pretrained(folder)
    result = CliRunner().invoke(
        app, ["generate", str(folder), "--prompt", "w1 w2 w3", "--device", "cpu", "--max-new-tokens", "4"]
    )
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    assert "not finite" in result.output and "model.layers.0.mlp.down_proj.weight" in result.output, result.output


def test_a_masked_token_at_minus_inf_is_not_a_fault(tiny_model_dir):
    """-Inf alone masks a token (a padded vocabulary): generate goes on, and never picks it."""
    graphs = _graphs_whose_replay_poisons(load(tiny_model_dir("llama")), 2, float("-inf"))
    result = NativeLoop(graphs, Sampling(), pad_id=0, check_every=4).generate(PROMPTS[:4], 8)
    assert all(len(row.tokens) == 8 for row in result.rows)
    assert 3 not in result.rows[2].tokens[1:]  # the replay masked token 3 of row 2
