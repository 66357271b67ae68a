"""The fused decode step's one-kernel attention mask (fused/causal_mask.py): HF's own `create_causal_mask`
bit for bit where it applies, HF's function itself everywhere else, and one op in the step instead of ~11."""

import inspect
import sys
import traceback

import pytest
import torch
from tiny_models import tiny_decoder
from transformers import DynamicCache, masking_utils

from accelerate_graph.compat import torch_internals
from accelerate_graph.core.backends import EmulatedBackend
from accelerate_graph.core.capture import capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.fused.causal_mask import CausalMaskStandIn
from accelerate_graph.fused.grouped_attention import use_grouped_attention
from accelerate_graph.fused.layers import FusedForward
from accelerate_graph.settings import DEFAULTS
from accelerate_graph.verify.against_eager import verify_graphs

HF = masking_utils.create_causal_mask
# 5.24 names the cache `cache`, 5.17 `past_key_values`: call HF's function the way its modeling files do
CACHE = "cache" if "cache" in inspect.signature(HF).parameters else "past_key_values"
MAX_SLOTS = 64


class Spy:
    """HF's create_causal_mask, counting its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return HF(*args, **kwargs)


def _session(model_type: str, dtype=torch.float32, rows: int = 3, **overrides) -> DecodeSession:
    model = tiny_decoder(model_type, **overrides).to(dtype)
    return DecodeSession(model, rows, MAX_SLOTS)


def _left_pad(session: DecodeSession, rows: int) -> None:
    """Rows 1 and 2 left-padded (2 and 5 slots), row 0 not."""
    session.attention_mask.fill_(1)
    for row, pad in ((1, 2), (2, 5)):
        if row < rows:
            session.attention_mask[row, :pad] = 0


def _mask_call(session: DecodeSession, batch: int, context: int, position: int, tokens: int = 1) -> dict:
    """The keyword arguments LlamaModel.forward passes create_causal_mask in a decode step of `batch` rows
    over a `context`-slot view whose write position is `position`."""
    session.kv.rewind(position)
    model = session.model
    embeds = torch.zeros(batch, tokens, model.config.hidden_size, dtype=model.dtype)
    positions = torch.arange(position, position + tokens).expand(batch, -1)
    return {
        "config": model.model.config,
        "inputs_embeds": embeds,
        "attention_mask": session.attention_mask[:batch, : session.kv.slots(context)],
        CACHE: session.kv.view(batch, context),
        "position_ids": positions,
    }


def _assert_same_mask(got, expected) -> None:
    assert isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor)
    assert (got.dtype, got.shape, got.stride()) == (expected.dtype, expected.shape, expected.stride())
    assert torch.equal(got, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
@pytest.mark.parametrize("context", [16, 64])
@pytest.mark.parametrize("batch", [1, 3])
def test_the_mask_is_hfs_bit_for_bit(model_type, dtype, context, batch):
    """Left padding in some rows, the query at the first, a middle and the last slot of the bucket, a long
    padding mask and a bool one."""
    session = _session(model_type, dtype)
    _left_pad(session, batch)
    stand_in = CausalMaskStandIn(Spy())
    for position in (0, context // 2 + 1, context - 1):
        call = _mask_call(session, batch, context, position)
        _assert_same_mask(stand_in(**call), HF(**call))
        as_bool = {**call, "attention_mask": call["attention_mask"].bool()}
        _assert_same_mask(stand_in(**as_bool), HF(**as_bool))
    assert stand_in.built == 6 and stand_in.hf.calls == 0


def test_a_padding_mask_longer_than_the_view_is_cut_like_hfs():
    session = _session("llama")
    _left_pad(session, 3)
    call = {**_mask_call(session, 3, 16, 9), "attention_mask": session.attention_mask[:3]}  # 65 slots
    stand_in = CausalMaskStandIn(Spy())
    _assert_same_mask(stand_in(**call), HF(**call))
    assert stand_in.built == 1


def test_where_hf_returns_none_so_does_the_stand_in():
    """A dynamic cache without padding (sdpa's is_causal path) and an attention without a mask function."""
    session = _session("llama")
    stand_in = CausalMaskStandIn(Spy())
    model = session.model
    embeds = torch.zeros(2, 1, model.config.hidden_size)
    dynamic = {
        "config": model.model.config,
        "inputs_embeds": embeds,
        "attention_mask": torch.ones(2, 1, dtype=torch.long),
    }
    dynamic[CACHE] = DynamicCache(config=model.config)
    assert HF(**dynamic) is None and stand_in(**dynamic) is None
    model.config._attn_implementation = "a_kernel_without_masks"
    call = _mask_call(session, 2, 16, 4)
    assert HF(**call) is None and stand_in(**call) is None
    assert stand_in.built == 0 and stand_in.hf.calls == 2


def _falls_back(session: DecodeSession, call: dict) -> None:
    stand_in = CausalMaskStandIn(Spy())
    got = stand_in(**call)
    assert stand_in.hf.calls == 1 and stand_in.built == 0
    expected = HF(**call)
    assert (got is None and expected is None) or torch.equal(got, expected)


def test_two_query_tokens_go_to_hfs_function():
    session = _session("llama")
    _falls_back(session, _mask_call(session, 2, 16, 4, tokens=2))


def test_sliding_window_layers_go_to_hfs_function():
    session = _session("qwen2", use_sliding_window=True, sliding_window=4, max_window_layers=1)
    assert "sliding_attention" in session.model.config.layer_types
    _falls_back(session, _mask_call(session, 2, 16, 9))


@pytest.mark.parametrize(
    "change",
    ["unknown keyword", "and_mask_function", "eager attention", "no padding mask", "positional", "dynamic cache"],
)
def test_anything_else_goes_to_hfs_function(change):
    session = _session("llama")
    call = _mask_call(session, 2, 16, 4)
    if change == "unknown keyword":  # one this transformers no longer takes: HF's own error
        stand_in = CausalMaskStandIn(Spy())
        with pytest.raises(TypeError):
            stand_in(**call, cache_position=torch.tensor([4]))
        assert stand_in.hf.calls == 1 and stand_in.built == 0
        return
    if change == "and_mask_function":
        call["and_mask_function"] = lambda b, h, q, kv: kv >= 0
    elif change == "eager attention":
        session.model.config._attn_implementation = "eager"
    elif change == "no padding mask":
        call["attention_mask"] = None
    elif change == "dynamic cache":
        call[CACHE] = DynamicCache(config=session.model.config)
    if change == "positional":
        stand_in = CausalMaskStandIn(Spy())
        stand_in(call.pop("config"), **call)
        assert stand_in.hf.calls == 1 and stand_in.built == 0
        return
    _falls_back(session, call)


# --- in the fused step ------------------------------------------------------------------------------------


def _one_step(session: DecodeSession, fused: FusedForward, prompt: torch.Tensor, batch: int, context: int):
    """From the same prefilled cache: one fused decode step's logits and the K/V it leaves."""
    session.prefill(prompt)
    tokens = torch.arange(batch) + 3
    session.load_inputs(batch, tokens, torch.full((batch,), prompt.shape[1]))
    with torch.no_grad():
        logits = session.step_fn(batch, context, fused)()
    cache = [(layer.keys.clone(), layer.values.clone()) for layer in session.kv.layers]
    return logits, cache, [p.clone() for p in session.kv.positions()]


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_the_fused_step_decodes_the_same_with_the_mask_kernel(model_type):
    torch._dynamo.reset()
    session = _session(model_type, rows=2)
    use_grouped_attention(session.model)
    session.attention_mask[1, :2] = 0  # a left-padded row
    prompt = torch.randint(0, 100, (2, 6))
    on = FusedForward(session.model, backend="aot_eager", positions=session.kv.storage_len)
    without = DEFAULTS.replace(mask_kernel=False)
    off = FusedForward(session.model, backend="aot_eager", positions=session.kv.storage_len, settings=without)
    assert "mask kernel" in on.layer_forward_kind() and off.causal_mask is None
    for batch, context in ((2, 16), (1, 64)):
        logits_on, cache_on, positions_on = _one_step(session, on, prompt, batch, context)
        logits_off, cache_off, positions_off = _one_step(session, off, prompt, batch, context)
        assert torch.equal(logits_on, logits_off)
        assert all(torch.equal(a, b) for a, b in zip(sum(cache_on, ()), sum(cache_off, ())))
        assert all(torch.equal(a, b) for a, b in zip(positions_on, positions_off))
    assert on.causal_mask.built == 2 and on.causal_mask.fell_back == 0
    assert masking_utils.create_causal_mask is HF  # left as it was
    assert sys.modules[type(session.model.model).__module__].create_causal_mask is HF


def test_a_fused_capture_with_the_mask_kernel_verifies():
    torch._dynamo.reset()
    assert DEFAULTS.mask_kernel  # on by default
    session = _session("qwen2", rows=2)
    use_grouped_attention(session.model)
    session.fused = FusedForward(session.model, backend="aot_eager", positions=session.kv.storage_len)
    graphs = capture_decode_graphs(session, EmulatedBackend(), (1, 2), contexts=(16, 32))
    rows = verify_graphs(graphs, steps=6, prompt_len=6)
    assert all(r.passed for r in rows), [r.detail for r in rows if not r.passed]
    assert session.fused.causal_mask.built >= 4 and session.fused.causal_mask.fell_back == 0


class _OpsBySource(torch_internals.DispatchMode):
    """The aten (and registered) ops of a step; `mask_ops`: those whose innermost caller in transformers
    or our package is the mask's code (HF's masking_utils.py or our causal_mask.py)."""

    LIBRARIES = ("/transformers/", "/accelerate_graph/")
    SOURCES = ("/transformers/masking_utils.py", "/accelerate_graph/fused/causal_mask.py")

    def __init__(self):
        super().__init__()
        self.mask_ops, self.all_ops = [], 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.all_ops += 1
        callers = [
            frame.filename for frame in traceback.extract_stack() if any(p in frame.filename for p in self.LIBRARIES)
        ]
        if callers and callers[-1].endswith(self.SOURCES):
            self.mask_ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _ops_of_a_step(mask_kernel: bool) -> _OpsBySource:
    torch._dynamo.reset()
    session = _session("llama", rows=1)
    use_grouped_attention(session.model)
    chosen = DEFAULTS.replace(mask_kernel=mask_kernel)
    session.fused = FusedForward(session.model, backend="aot_eager", positions=session.kv.storage_len, settings=chosen)
    step = session.capture_step(1, None)
    session.kv.rewind(8)
    with torch.no_grad():
        step()  # compiles outside the count
        session.kv.rewind(8)
        with _OpsBySource() as seen:
            step()
    return seen


def test_the_mask_costs_one_op_instead_of_hfs_eleven():
    hfs = _ops_of_a_step(mask_kernel=False)
    ours = _ops_of_a_step(mask_kernel=True)
    computing = [op for op in hfs.mask_ops if "unsqueeze" not in op]  # views launch nothing
    assert len(computing) >= 11, hfs.mask_ops
    assert ours.mask_ops == ["cugraph_accel.decode_causal_mask.default"]
    assert hfs.all_ops - ours.all_ops == len(hfs.mask_ops) - 1
