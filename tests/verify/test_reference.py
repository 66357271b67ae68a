"""The layer-wise float32 reference: the same numbers as a float32 copy of the model, one module's
weights in float32 at a time, the bf16 weights untouched afterwards."""

import copy
import math
from contextlib import nullcontext

import pytest
import torch
from tiny_models import tiny_decoder, zoo_model

from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.core.static_cache import CacheSnapshot
from accelerate_graph.verify.reference import eager_step, float32_reference, reference_step

BF16 = torch.bfloat16


def _round_cache_writes_to_bf16(session: DecodeSession) -> None:
    """A float32 copy stores K/V in float32; the reference stores them in the shared bf16 cache. Round the
    copy's writes the same way, so the two differ only where the reference would be wrong."""
    for batch in range(1, session.max_batch + 1):
        for layer in session.kv.view(batch).layers:
            update = layer.update

            def rounded(keys, values, *args, _update=update, **kwargs):
                return _update(keys.to(BF16).float(), values.to(BF16).float(), *args, **kwargs)

            layer.update = rounded


def _steps(session, step, prompt, tokens):
    session.kv.reset()
    session.prefill(prompt)
    return torch.stack(
        [step(session, tokens[i], torch.full((2,), prompt.shape[1] + i)).float().clone() for i in range(len(tokens))]
    )


def _reference_and_float32_copy(model, float_copy):
    """(session, prompt, tokens, reference, truth): four steps after a 5-token prompt, by the layer-wise
    reference on `model`'s session and by its float32 copy (cache writes rounded to bf16 alike)."""
    session, float_session = DecodeSession(model, 2, 32), DecodeSession(float_copy, 2, 32)
    _round_cache_writes_to_bf16(float_session)
    prompt, tokens = torch.randint(0, 256, (2, 5)), torch.randint(0, 256, (4, 2))
    with float32_reference(session):
        reference = _steps(session, reference_step, prompt, tokens)
    return session, prompt, tokens, reference, _steps(float_session, eager_step, prompt, tokens)


def test_layerwise_reference_equals_a_float32_copy_of_the_model():
    model = tiny_decoder("llama").to(BF16)
    session, prompt, tokens, reference, truth = _reference_and_float32_copy(model, copy.deepcopy(model).float())
    eager = _steps(session, eager_step, prompt, tokens)
    assert reference.dtype == torch.float32
    torch.testing.assert_close(reference, truth, rtol=1e-5, atol=1e-5)
    assert (eager - truth).abs().max() > 100 * (reference - truth).abs().max()  # bf16 eager is far coarser
    assert all(p.dtype == BF16 for p in model.parameters())  # the model is bf16 again


def test_at_most_one_modules_weights_are_float32_at_any_time():
    model = tiny_decoder("llama").to(BF16)
    session = DecodeSession(model, 2, 32)
    seen = []

    def count_float32(module, args):
        seen.append(sum(p.numel() for p in model.parameters() if p.dtype == torch.float32))

    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    with float32_reference(session):
        handles = [m.register_forward_pre_hook(count_float32) for m in model.modules()]  # run after promotion
        reference_step(session, torch.tensor([1, 2]), torch.tensor([0, 0]))
        for handle in handles:
            handle.remove()
    assert seen and 0 < max(seen) <= largest


def test_a_float32_model_is_its_own_reference():
    model = tiny_decoder("llama")
    session = DecodeSession(model, 2, 32)
    with float32_reference(session):
        assert not model._forward_pre_hooks and not model.lm_head._forward_pre_hooks


def _key_lengths(monkeypatch):
    """The key lengths HF's sdpa sees inside the reference, recorded as it runs."""
    from accelerate_graph.verify import reference

    seen = []
    forward = reference.sdpa_attention_forward

    def spy(module, query, key, value, attention_mask, *args, **kwargs):
        seen.append((key.shape[-2], None if attention_mask is None else attention_mask.shape[-1]))
        return forward(module, query, key, value, attention_mask, *args, **kwargs)

    monkeypatch.setattr(reference, "sdpa_attention_forward", spy)
    return seen


def test_the_reference_reads_back_only_the_slots_a_step_can_attend_and_computes_the_same(monkeypatch):
    """Under HF's sdpa (and under our grouped attention, whose reference is sdpa) each step reads back the
    slots up to its position, mask cut alike, and the logits are those of the whole cache's (slots past
    the position are masked: exact zeros in the softmax); the model's attention is as before afterwards."""
    from accelerate_graph.compat.transformers_internals import attention_implementations
    from accelerate_graph.fused.grouped_attention import GROUPED, use_grouped_attention

    prompt, tokens = torch.randint(0, 256, (2, 5)), torch.randint(0, 256, (3, 2))
    for grouped in (False, True):
        model = tiny_decoder("llama").to(BF16)
        if grouped:
            use_grouped_attention(model)
        before = attention_implementations(model)
        session = DecodeSession(model, 2, 32)
        seen = _key_lengths(monkeypatch)
        with float32_reference(session):
            cut = _steps(session, reference_step, prompt, tokens)
        layers = model.config.num_hidden_layers
        prefill, steps = seen[:layers], seen[layers:]  # _steps prefills inside the reference: not cut
        assert prefill == [(32, 32)] * layers
        assert steps == [(5 + i + 1, 5 + i + 1) for i in range(3) for _ in range(layers)], seen
        assert attention_implementations(model) == before == {"": GROUPED if grouped else "sdpa"}
        with float32_reference(session):  # the same float32 step, without the cut: every slot read back
            whole = _steps(session, eager_step, prompt, tokens)
        torch.testing.assert_close(cut, whole, rtol=1e-6, atol=1e-6)


def test_a_model_on_another_attention_reads_back_the_whole_cache(monkeypatch):
    """HF's eager attention (say) does not cut its mask: the reference then reads every slot, as before."""
    model = tiny_decoder("llama").to(BF16)
    model.set_attn_implementation("eager")
    session = DecodeSession(model, 2, 32)
    seen = _key_lengths(monkeypatch)
    with float32_reference(session):
        reference_step(session, torch.tensor([1, 2]), torch.tensor([0, 0]))
    assert not seen  # sdpa never ran
    keys = []
    layer = session.kv.view(2).layers[0]
    with float32_reference(session):
        update = layer.update

        def recorded(*args, **kwargs):
            result = update(*args, **kwargs)
            keys.append(result[0].shape[-2])
            return result

        layer.update = recorded
        reference_step(session, torch.tensor([1, 2]), torch.tensor([0, 0]))
    assert keys == [32]


def test_the_cut_follows_the_write_slot_when_every_row_is_left_padded():
    """A left-padded row's position counts from its first real token, below the slot the step writes: with
    every row padded, a cut at the positions would drop the newest slots. The cut logits equal the whole
    cache's."""
    model = tiny_decoder("llama").to(BF16)
    session = DecodeSession(model, 2, 32)
    prompt, tokens, pads = torch.randint(0, 256, (2, 6)), torch.randint(0, 256, (3, 2)), torch.tensor([2, 3])

    def run(step):
        session.kv.reset()
        session.prefill(prompt, pads=pads)
        steps = [step(session, tokens[i], 6 - pads + i).float().clone() for i in range(len(tokens))]
        session.show_every_slot()
        return torch.stack(steps)

    with float32_reference(session):
        cut, whole = run(reference_step), run(eager_step)  # eager_step inside: float32, every slot read back
    torch.testing.assert_close(cut, whole, rtol=1e-6, atol=1e-6)


def test_a_softcapping_models_reference_is_its_eager_attention_under_grouped_attention():
    """Grouped attention stands in for eager in a model that softcaps attention logits (sdpa would drop the
    softcap); the reference switches it back to eager, not to sdpa: it is a float32 eager copy's step."""
    from transformers import AutoModelForCausalLM

    from accelerate_graph.compat.transformers_internals import attention_implementations
    from accelerate_graph.fused.grouped_attention import GROUPED, use_grouped_attention
    from accelerate_graph.zoo.configs import tiny_config

    config = tiny_config("gemma2")
    config.attn_logit_softcapping = 0.5  # every score capped: without the softcap the logits move
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").to(BF16).eval()
    float_copy = copy.deepcopy(model).float()
    use_grouped_attention(model)
    assert attention_implementations(model) == {"": GROUPED}
    *_, reference, truth = _reference_and_float32_copy(model, float_copy)
    torch.testing.assert_close(reference, truth, rtol=1e-5, atol=1e-5)
    assert attention_implementations(model) == {"": GROUPED}


def test_verifys_eager_run_reads_back_only_the_slots_in_use_in_bf16_and_stays_bf16(monkeypatch):
    """Verify's eager steps (`slots_in_use`, `step_in_use`) attend the slots up to the write slot, as the reference
    does, in the model's own dtype: the same greedy tokens as over the whole cache, bf16's rounding apart, and the
    model's attention as before afterwards. Bench and eval keep `eager_step` over the whole cache."""
    from accelerate_graph.compat.transformers_internals import attention_implementations
    from accelerate_graph.verify.reference import slots_in_use, step_in_use

    torch.manual_seed(0)
    prompt, tokens = torch.randint(0, 256, (2, 5)), torch.randint(0, 256, (3, 2))
    model = tiny_decoder("llama").to(BF16)
    session = DecodeSession(model, 2, 32)
    whole = _steps(session, eager_step, prompt, tokens)
    seen = _key_lengths(monkeypatch)
    with slots_in_use(session):
        cut = _steps(session, step_in_use, prompt, tokens)
    layers = model.config.num_hidden_layers
    assert seen[layers:] == [(5 + i + 1, 5 + i + 1) for i in range(3) for _ in range(layers)], seen
    assert cut.dtype == whole.dtype == torch.float32 and attention_implementations(model) == {"": "sdpa"}
    assert torch.equal(cut.argmax(-1), whole.argmax(-1)) and (cut - whole).abs().max() < 0.05
    layer = session.kv.view(2).layers[0]
    assert "update" not in vars(layer)  # the class's own update again


def test_verifys_prefill_attends_each_chunk_up_to_its_last_token(monkeypatch):
    """Verify's prefill (`prefill_in_use`): each chunk reads back the slots up to its last token, mask cut alike,
    and leaves the cache as the whole cache's prefill does, bf16's rounding apart."""
    from accelerate_graph.verify.reference import prefill_in_use

    torch.manual_seed(0)
    prompt = torch.randint(0, 256, (2, 20))
    model = tiny_decoder("llama").to(BF16)
    session = DecodeSession(model, 2, 32)
    session.kv.reset()
    whole = session.prefill(prompt, chunk=8).float()
    whole_keys = session.kv.view(2).layers[-1].keys[:, :, :20].float().clone()
    seen = _key_lengths(monkeypatch)
    session.kv.reset()
    cut = prefill_in_use(session, prompt, 8).float()
    layers = model.config.num_hidden_layers
    assert seen == [(slots, slots) for slots in (8, 16, 20) for _ in range(layers)], seen
    assert torch.equal(cut.argmax(-1), whole.argmax(-1)) and (cut - whole).abs().max() < 0.05
    keys = session.kv.view(2).layers[-1].keys[:, :, :20].float()
    assert (keys - whole_keys).abs().max() < 0.05 and session.kv.next_slot == 20


def _stepwise_and_in_one_forward(model, per_row=False, pads=None, prompt_len=6, steps=5):
    """(stepwise, reference_steps, eager, steps a forward): the float32 reference of `steps` teacher-forced steps
    after a left-padded prompt, step by step (reference_step) and by reference_steps after the session's probe,
    and bf16 eager's, each with the router logits it logged and the K/V it left in the cache; and how many steps a
    forward the probe allowed."""
    from accelerate_graph.verify.reference import probe_steps_a_forward, reference_steps, steps_a_forward
    from accelerate_graph.verify.routers import find_routers, recording

    session = DecodeSession(model, 2, 32, per_row=per_row)
    probe_steps_a_forward(session)
    torch.manual_seed(1)
    prompt, tokens = torch.randint(0, 256, (2, prompt_len)), torch.randint(0, 256, (steps, 2))
    pads = torch.zeros(2, dtype=torch.long) if pads is None else pads
    routers = find_routers(model)

    def run(whole: bool, reference: bool = True):
        session.kv.reset()
        session.prefill(prompt, pads=pads)
        # per-row mode puts a row's real tokens from slot 0 on: its next token at its own position
        first = prompt_len
        with recording(model, routers) as log, float32_reference(session) if reference else nullcontext():
            if whole:
                logits = reference_steps(session, tokens, first, pads)
                log.split_steps(2, math.ceil(steps / steps_a_forward(session)))
            else:
                step = reference_step if reference else eager_step
                logits = torch.stack([step(session, tokens[i], first + i - pads).float().clone() for i in range(steps)])
        session.show_every_slot()
        return logits, log, session.kv.snapshot(session.max_batch)

    return run(False), run(True), run(False, reference=False), steps_a_forward(session)


@pytest.mark.parametrize(
    "model_type, per_row, padded",
    [
        ("llama", False, False),
        ("llama", False, True),
        ("llama", True, True),
        ("mistral", False, True),
        ("gemma2", False, True),
        ("qwen2_moe", False, True),
        ("olmoe", True, False),
    ],
)
def test_the_reference_of_a_cases_steps_in_one_forward_is_the_stepwise_one(monkeypatch, model_type, per_row, padded):
    """What verify judges against: a case's steps as one float32 forward (the probe allows it on the dense ones)
    equal the reference step by step (float32's rounding, and a K/V rounded to bf16 the other way now and then) far
    within bf16 eager's distance, left-padded rows, per-row positions, sliding windows (the zoo's window is crossed)
    and routers included. On a tiny MoE the probe's verdict turns on whether float32's rounding, which differs
    from one CPU to another, breaks a router's near-tie: the forward is set here, as the probe would allow it."""
    from accelerate_graph.verify import reference

    moe = model_type in ("qwen2_moe", "olmoe")
    if moe:
        monkeypatch.setattr(reference, "steps_a_forward", lambda session: reference.STEPS_A_FORWARD)
    pads = torch.tensor([0, 3]) if padded else None
    (stepwise, stepwise_log, stepwise_kv), (whole, whole_log, whole_kv), (eager, eager_log, _), per_forward = (
        _stepwise_and_in_one_forward(zoo_model(model_type, BF16), per_row, pads)
    )
    assert per_forward > 1 or moe
    assert whole.shape == stepwise.shape
    distance, eager_distance = (whole - stepwise).abs().max().item(), (eager - stepwise).abs().max().item()
    if _rounded_the_other_way(whole_kv, stepwise_kv):
        assert distance <= _allowed_distance(eager_distance, flipped=True), (distance, eager_distance)
    else:
        assert distance < 1e-5 and eager_distance > 100 * distance, (distance, eager_distance)
    assert len(whole_log.logits) == len(stepwise_log.logits) == len(eager_log.logits)
    for ours, theirs in zip(whole_log.logits, stepwise_log.logits):
        assert len(ours) == len(theirs) > 0
        torch.testing.assert_close(torch.stack(ours), torch.stack(theirs), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("model_type", ["beam", "exaone4"])
def test_a_model_whose_forward_of_several_tokens_computes_otherwise_is_referenced_step_by_step(model_type):
    """Beam (from the first step) and EXAONE-4 (once its window is crossed) compute a forward of several tokens
    otherwise than their steps, by 1e-4 in a logit (bf16 eager: 4-7e-3): the probe finds it, and the reference
    runs one step a forward there, the stepwise reference exactly."""
    (stepwise, *_), (whole, *_), _, per_forward = _stepwise_and_in_one_forward(zoo_model(model_type, BF16), False, None)
    assert per_forward == 1
    assert torch.equal(whole, stepwise)


def _rounded_the_other_way(ours: CacheSnapshot, theirs: CacheSnapshot) -> int | None:
    """How many cached K/V elements two runs wrote one step of the cache's dtype apart (float32's rounding of a
    K/V lying near the middle of two bf16 values, which a forward of several tokens may break the other way), or
    None when any element differs by more, or more than one in a thousand of them differ: a wrong reference."""
    flips, elements = 0, 0
    for (*ours_kv, _), (*theirs_kv, _) in zip(ours, theirs, strict=True):
        for a, b in zip(ours_kv, theirs_kv):
            bits = {2: torch.int16, 4: torch.int32}[a.element_size()]  # adjacent floats of one sign: adjacent ints
            steps = (a.view(bits).long() - b.view(bits).long()).abs()
            if steps.max() > 1:
                return None
            flips, elements = flips + int((steps == 1).sum()), elements + a.numel()
    return flips if flips * 1000 <= elements else None


def _allowed_distance(eager_distance: float, flipped: bool) -> float:
    """How far reference_steps' logits may lie from the stepwise reference's: a hundredth of bf16 eager's
    distance, a tenth where a cached K/V was rounded to bf16 the other way (`flipped`: one such V moves a tiny
    model's logits by 3e-5, a hundredth of eager's being 2.9e-5)."""
    return (0.1 if flipped else 0.01) * eager_distance + 1e-6


def test_a_kv_rounded_the_other_way_is_told_from_a_wrong_one():
    """The allowance above is for one bf16 step in a few elements, never for K/V that differ more, or in many."""
    position = torch.tensor([9])
    cache = CacheSnapshot([(torch.randn(2, 4, 32, 8).to(BF16), torch.randn(2, 4, 32, 8).to(BF16), position)])

    def copy(scale=1.0):
        return CacheSnapshot([(keys.mul(scale), values.mul(scale), position) for keys, values, position in cache])

    flipped = copy()
    flipped[0][1].view(torch.int16)[1, 2, 9, 3] += 1
    assert _rounded_the_other_way(cache, copy()) == 0
    assert _rounded_the_other_way(flipped, cache) == 1
    flipped[0][1].view(torch.int16)[1, 2, 9, 3] += 1
    assert _rounded_the_other_way(flipped, cache) is None
    assert _rounded_the_other_way(copy(1.01), cache) is None


@pytest.mark.exhaustive
def test_every_zoo_models_reference_steps_are_its_stepwise_reference():
    """Over the zoo in bf16 (the CPU zoo runs float32, whose reference is the model itself): wherever a decode
    session can be made, reference_steps after the probe equals the stepwise reference within a hundredth of
    bf16 eager's distance from it (_allowed_distance)."""
    from accelerate_graph.common.errors import UnsupportedModelError
    from accelerate_graph.zoo.model_types import zoo_model_types

    checked, far = 0, []
    for model_type in zoo_model_types():
        try:
            model = zoo_model(model_type, BF16)
            (stepwise, _, stepwise_kv), (whole, _, whole_kv), (eager, *_), _ = _stepwise_and_in_one_forward(
                model, False, torch.tensor([0, 3])
            )
        except (UnsupportedModelError, ImportError, ValueError, IndexError):  # what the zoo reports as unsupported
            continue
        checked += 1
        distance, eager_distance = (whole - stepwise).abs().max().item(), (eager - stepwise).abs().max().item()
        if not distance <= _allowed_distance(eager_distance, bool(_rounded_the_other_way(whole_kv, stepwise_kv))):
            far.append((model_type, distance, eager_distance))
    assert checked > 100 and not far, (checked, far)


@pytest.mark.parametrize("per_row", [False, True])
def test_more_steps_than_a_forward_takes_go_in_several(monkeypatch, per_row):
    """Past STEPS_A_FORWARD steps the reference runs several forwards (the last one short), each from where the
    one before left the cache: the same logits, and router logits, as step by step (two a forward, set as the
    probe would allow it: on a tiny MoE its verdict turns on a router's near-tie, see above)."""
    from accelerate_graph.verify import reference

    monkeypatch.setattr(reference, "steps_a_forward", lambda session: 2)
    (stepwise, stepwise_log, _), (whole, whole_log, _), _, per_forward = _stepwise_and_in_one_forward(
        zoo_model("olmoe", BF16), per_row, torch.tensor([0, 3]), steps=5
    )
    assert per_forward == 2 and (whole - stepwise).abs().max() < 1e-5
    for ours, theirs in zip(whole_log.logits, stepwise_log.logits, strict=True):  # the routers' logits too
        torch.testing.assert_close(torch.stack(ours), torch.stack(theirs), rtol=1e-3, atol=1e-3)


def test_the_probe_says_how_the_reference_runs_and_why():
    """The probe's record, which verify and eval print: many steps a forward with the share of eager's distance
    measured; one a forward with the share that was too far (Beam) or the error a forward of several tokens raised."""
    from accelerate_graph.verify import reference

    agreeing = DecodeSession(zoo_model("llama", BF16), 2, 32)
    reference.probe_steps_a_forward(agreeing)
    probe = reference.steps_probe(agreeing)
    assert probe.steps == reference.STEPS_A_FORWARD and 0 <= probe.share < reference.STEPS_AGREE_WITHIN
    assert probe.line().startswith(f"float32 reference: {reference.STEPS_A_FORWARD} steps a forward (")
    assert probe.as_json()["share_of_eager"] == probe.share

    far = DecodeSession(zoo_model("beam", BF16), 2, 32)
    reference.probe_steps_a_forward(far)
    probe = reference.steps_probe(far)
    assert probe.steps == 1 and probe.share > reference.STEPS_AGREE_WITHIN
    assert probe.share > reference.NOISE_TIMES * probe.noise  # noise moves Beam's tiny steps far less
    assert probe.line().startswith(f"float32 reference: one step a forward ({probe.why}: ")
    assert "than 2% of eager's distance and 4x float32 noise's" in probe.why


def test_a_real_size_models_steps_far_from_themselves_under_noise_still_go_in_one_forward(monkeypatch):
    """At Qwen2.5-0.5B's width and depth a K/V rounded to bf16 the other way reaches every later layer, and the
    steps lie 1-2% of eager's distance from themselves under float32 noise alone: a forward of several tokens
    that far is no further than the noise, and is taken. Under a bar of 0.1% the noise is measured and decides."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from accelerate_graph.verify import reference

    monkeypatch.setattr(reference, "STEPS_AGREE_WITHIN", 0.001)
    config = Qwen2Config(
        hidden_size=896, num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864, vocab_size=4096,
        num_hidden_layers=24, max_position_embeddings=256, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=BF16, attn_implementation="sdpa").eval()
    session = DecodeSession(model, 2, 48)
    reference.probe_steps_a_forward(session)
    probe = reference.steps_probe(session)
    assert probe.share > reference.STEPS_AGREE_WITHIN and probe.noise > reference.STEPS_AGREE_WITHIN, probe
    assert probe.steps == reference.STEPS_A_FORWARD and "float32 noise alone" in probe.line()


def test_a_probe_that_raises_leaves_one_step_a_forward_and_names_the_error(monkeypatch):
    from accelerate_graph.verify import reference

    def cannot(*args, **kwargs):
        raise RuntimeError("a forward of several tokens is not supported here")

    monkeypatch.setattr(reference, "_one_forward", cannot)
    session = DecodeSession(zoo_model("llama", BF16), 2, 32)
    reference.probe_steps_a_forward(session)
    assert reference.steps_a_forward(session) == 1
    probe = reference.steps_probe(session)
    assert (
        probe.share is None
        and probe.noise is None
        and "raised RuntimeError: a forward of several tokens is not supported" in probe.why
    )
    assert session.kv.next_slot == 0  # the cache reset for the prefill that follows
