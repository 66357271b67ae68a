"""Greedy output of the native loop and of the drop-in equals HF generate() token for token (float32, CPU
emulation), with prompts of different lengths in one batch, over several architectures."""

from __future__ import annotations

import pytest
import torch

from accelerate_graph.core.backends import EmulatedBackend
from accelerate_graph.core.capture import capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.generate.dropin import accelerate
from accelerate_graph.generate.loop import NativeLoop
from accelerate_graph.models.loading import load_model
from accelerate_graph.settings import DEFAULTS

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17], [18], [19, 20, 21]]  # 5 rows: two chunks of 4
NEW = 24
ARCHITECTURES = ["llama", "qwen2", "gpt2"]


def load(folder):
    return load_model(folder, torch.device("cpu"), torch.float32, "sdpa", None).model


def left_padded(prompts, pad=0):
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def hf_greedy(model, prompts, new=NEW, eos=None):
    ids, mask = left_padded(prompts)
    out = model.generate(
        input_ids=ids, attention_mask=mask, max_new_tokens=new, do_sample=False, pad_token_id=0, eos_token_id=eos
    )
    return out[:, ids.shape[1] :].tolist()


@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_native_loop_equals_hf_generate_across_chunks_and_context_buckets(tiny_model_dir, model_type):
    model = load(tiny_model_dir(model_type))
    session = DecodeSession(model, 4, 64)
    # context buckets 16/32/64: the 24 new tokens after a 7-token prompt cross two boundaries
    graphs = capture_decode_graphs(session, EmulatedBackend(), (1, 2, 4), contexts=(16, 32))
    result = NativeLoop(graphs, pad_id=0).generate(PROMPTS, NEW)
    assert graphs.eager_fallbacks == 0
    expected = hf_greedy(model, PROMPTS[:4]) + hf_greedy(model, PROMPTS[4:])
    assert [row.tokens for row in result.rows] == expected
    assert len(result.step_ms) == 2 * (NEW - 1)  # two chunks, every step after the prefill


def test_native_loop_stops_rows_at_eos_like_hf(tiny_model_dir):
    model = load(tiny_model_dir("llama"))
    session = DecodeSession(model, 4, 64)
    graphs = capture_decode_graphs(session, EmulatedBackend(), (4,), contexts=())
    free_run = NativeLoop(graphs, pad_id=0).generate(PROMPTS[:4], NEW)
    eos = free_run.rows[1].tokens[3]  # a token row 2 makes early: with it as EOS that row stops there
    stopped = NativeLoop(graphs, eos_ids=[eos], pad_id=0, check_every=4).generate(PROMPTS[:4], NEW)
    expected = hf_greedy(model, PROMPTS[:4], eos=eos)
    for row, hf_row in zip(stopped.rows, expected):
        cut = hf_row.index(eos) + 1 if eos in hf_row else len(hf_row)
        assert row.tokens == hf_row[:cut]
    assert stopped.rows[1].tokens[-1] == eos and len(stopped.rows[1].tokens) <= 4


@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_drop_in_generate_equals_hf_and_undo_restores(tiny_model_dir, model_type):
    model = load(tiny_model_dir(model_type))
    prompts = PROMPTS[:3]
    expected = hf_greedy(model, prompts)
    with accelerate(model, buckets=(1, 4), max_cache_len=64, contexts=(16,), emulate=True) as handle:
        assert hf_greedy(model, prompts) == expected
        assert handle.counts.graph_steps == NEW - 1 and handle.counts.eager_on_cache == 1
        # a batch above the cache's rows is left to HF, counted
        assert hf_greedy(model, PROMPTS) == hf_greedy(_plain(model), PROMPTS)
        assert handle.counts.eager_calls == {"batch 5 above the cache's 4 rows": 1}
    assert not {"forward", "generate", "prepare_inputs_for_generation"} & set(model.__dict__)
    assert hf_greedy(model, prompts) == expected


def _plain(model):
    """The same model without our patches: HF's own methods, bound to it."""

    class Plain:
        def generate(self, **kwargs):
            return type(model).generate(model, **kwargs)

    return Plain()


def test_drop_in_keeps_streamers_and_logits_processors(tiny_model_dir):
    from transformers import LogitsProcessor, LogitsProcessorList

    class Ban(LogitsProcessor):
        def __init__(self):
            self.calls = 0

        def __call__(self, input_ids, scores):
            self.calls += 1
            scores[:, 7] = -float("inf")
            return scores

    class Collect:
        def __init__(self):
            self.chunks = []

        def put(self, value):
            self.chunks.append(value.tolist())

        def end(self):
            self.chunks.append("end")

    model = load(tiny_model_dir("qwen2"))
    ids = torch.tensor([[7, 7, 7]])
    kwargs = dict(input_ids=ids, max_new_tokens=10, do_sample=False, pad_token_id=0)
    ban, streamer = Ban(), Collect()
    expected = model.generate(**kwargs, logits_processor=LogitsProcessorList([Ban()]))
    with accelerate(model, buckets=(1,), max_cache_len=32, contexts=(), emulate=True) as handle:
        got = model.generate(**kwargs, logits_processor=LogitsProcessorList([ban]), streamer=streamer)
    assert torch.equal(got, expected) and 7 not in got[0, 3:].tolist()
    assert ban.calls == 10 and handle.counts.graph_steps == 9
    assert streamer.chunks[-1] == "end" and len(streamer.chunks) == 12  # prompt, 10 tokens, end


def test_accelerate_is_exposed_without_importing_torch_eagerly():
    import subprocess
    import sys

    code = "import sys, accelerate_graph; assert callable(accelerate_graph.accelerate); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_drop_in_with_fuse_equals_hf_and_undo_restores_the_attention(tiny_model_dir):
    """accelerate(fuse=True): the layers compiled by inductor (its CPU code here), grouped decode
    attention, replayed inside HF generate(), under the settings given; undo switches the attention back
    to sdpa."""
    torch._dynamo.reset()
    model = load(tiny_model_dir("qwen2"))
    prompts = PROMPTS[:3]
    expected = hf_greedy(model, prompts)
    chosen = DEFAULTS.replace(mask_kernel=False, rotary_table=False)
    with accelerate(
        model, buckets=(4,), max_cache_len=64, contexts=(), fuse=True, emulate=True, settings=chosen
    ) as handle:
        fused = handle.session.fused
        assert fused is not None and model.config._attn_implementation == "cugraph_grouped"
        assert handle.settings is fused.settings is chosen and fused.causal_mask is None and not fused.rotary
        assert hf_greedy(model, prompts) == expected
        assert handle.counts.graph_steps == NEW - 1
    assert model.config._attn_implementation == "sdpa"
    assert hf_greedy(model, prompts) == expected


def test_drop_in_says_when_sdpa_ignores_the_models_attention_softcap(tiny_model_dir):
    """A model whose config softcaps attention logits, given with sdpa attention (transformers 5.17 loads
    Gemma-2 so): a warning says sdpa ignores the softcap and how to load the model as configured."""
    model = load(tiny_model_dir("llama"))
    model.config.attn_logit_softcapping = 30.0  # what sdpa would ignore, as in Gemma-2
    with pytest.warns(UserWarning, match=r"softcaps attention logits \(30\), which its sdpa attention ignores"):
        with accelerate(model, buckets=(1,), max_cache_len=32, contexts=(), emulate=True) as handle:
            assert any("attn_implementation='eager'" in note for note in handle.notes)
    model.config.attn_logit_softcapping = None
    with accelerate(model, buckets=(1,), max_cache_len=32, contexts=(), emulate=True) as handle:
        assert not any("softcap" in note for note in handle.notes)
