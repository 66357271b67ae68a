"""SlotEngine and per-row mode on the CPU emulation (float32): requests that join and leave at different
steps, and prompts of different lengths prefilled in one forward, each get HF generate()'s greedy tokens for
their prompt alone, plain and fused, and never see another request's cache."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from slot_script import engine_on_session, expected_tokens, hf_alone, load, plant_stale_values, run_script
from tiny_models import SMALL_DECODER, tiny_decoder
from transformers import AutoConfig, AutoModelForCausalLM

from accelerate_graph.common.errors import BadOptionError, ResourceError, UnsupportedModelError
from accelerate_graph.core.backends import EmulatedBackend
from accelerate_graph.core.capture import capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.pipeline import CaptureRequest, prepare
from accelerate_graph.serve.engine import SlotEngine
from accelerate_graph.verify.against_eager import verify_graphs
from accelerate_graph.verify.cases import Coverage


def prepared_engine(folder, chunk: int = 4, **request) -> SlotEngine:
    """The engine over pipeline.prepare's per-row graphs of a saved model (hazards, capture, quick check)."""
    prepared = prepare(
        CaptureRequest(
            model=folder, buckets=(1, 4), max_cache_len=64, contexts=(16,), device="cpu", dtype="float32",
            emulate=True, per_row=True, **request,
        )
    )  # fmt: skip
    return SlotEngine(prepared, chunk=chunk)


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "gpt2"])
def test_staggered_requests_each_equal_hf_generate_alone(tiny_model_dir, model_type):
    engine = prepared_engine(tiny_model_dir(model_type))
    run = run_script(engine)
    assert run.tokens == expected_tokens(engine.session.model)
    assert run.max_in_use == engine.max_rows and run.reused and run.largest_prefill == 2
    assert engine.graphs.eager_fallbacks == 0


def test_stale_values_in_free_rows_and_past_each_position_do_not_leak(tiny_model_dir):
    engine = prepared_engine(tiny_model_dir("llama"))
    plant_stale_values(engine)
    run = run_script(engine, plant=plant_stale_values)
    assert run.tokens == expected_tokens(engine.session.model)


def test_the_stale_values_would_show_if_a_row_attended_them(tiny_model_dir):
    """The planted values are not harmless: one slot past a row's position made visible changes its logits."""
    engine = prepared_engine(tiny_model_dir("llama"))
    row = engine.admit([5, 6, 7])
    (first,) = engine.prefill([row])
    plant_stale_values(engine)
    token = torch.tensor([int(first.argmax())])
    start = engine.session.kv.snapshot(1)
    honest = engine.decode([row], token)
    engine.session.kv.restore(start)
    engine._requests[row].position += 1  # the step now writes slot 4 and attends slot 3, planted
    leaked = engine.decode([row], token)
    assert (honest - leaked).abs().max() > 0.1  # float32 noise here is ~1e-6


def test_fused_staggered_requests_equal_hf_generate_alone(tiny_model_dir):
    model = load(tiny_model_dir("llama"))
    expected = expected_tokens(model)
    engine = engine_on_session(model, EmulatedBackend(), fused=True)
    assert engine.session.fused.programmed  # the layer program writes the cache through the per-row layer
    assert run_script(engine, plant=plant_stale_values).tokens == expected


def test_chunked_prefill_equals_one_chunk(tiny_model_dir):
    prompt = list(range(3, 40))
    one_graph_set = engine_on_session(load(tiny_model_dir("qwen2")), EmulatedBackend(), fused=False)
    results = []
    for chunk in (5, 256):  # two engines over the same graphs, one after the other
        engine = SlotEngine(
            SimpleNamespace(
                session=one_graph_set.session, graphs=one_graph_set.graphs, plan=SimpleNamespace(tp=1, mode="full")
            ),
            chunk=chunk,
        )
        row = engine.admit(prompt)
        chunks = 0
        while engine.next_chunk(row):
            (logits,) = engine.prefill([row])
            chunks += 1
        tokens = [int(logits.argmax())]
        for _ in range(6):
            tokens.append(int(engine.decode([row], torch.tensor(tokens[-1:])).argmax()))
        results.append((chunks, logits, tokens))
        engine.release(row)
    (chunks_small, logits_small, small), (chunks_one, logits_one, one) = results
    assert (chunks_small, chunks_one) == (8, 1)
    torch.testing.assert_close(logits_small, logits_one, rtol=1e-5, atol=1e-5)
    assert small == one == hf_alone(engine.session.model, prompt, 7)


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "prefill-graphs"])
def test_prompts_of_different_lengths_prefilled_together_each_equal_hf_alone(tiny_model_dir, graphs):
    """Prompts of 3, 11 and 6 tokens in one forward (left-padded to 11), asked out of row order; later two more
    whose rows are not consecutive (a release moved one below a decoding row): eagerly two forwards, one per run;
    with prefill graphs one replay each time (the 32-token shape of 4 rows). Stale values planted everywhere no
    request has written; each request's tokens are HF's for its prompt alone."""
    model = load(tiny_model_dir("llama"))
    engine = engine_on_session(model, EmulatedBackend(), fused=False, chunk=64, prefill_graphs=graphs)
    forwards = []
    row_forward = engine.session.row_forward
    engine.session.row_forward = lambda *args: forwards.append(args[2].tolist()) or row_forward(*args)
    prompts = {
        "a": [5, 6, 7],
        "b": list(range(20, 31)),
        "c": [40, 41, 42, 43, 44, 45],
        "d": [50],
        "e": [60, 61, 62, 63, 64],
    }
    rows, tokens = {}, {}

    def prefill(names):
        logits = engine.prefill([rows[n] for n in names])
        for name, token in zip(names, logits.argmax(-1).tolist()):
            tokens[name] = [token]

    def step(names, times):
        for _ in range(times):
            feed = torch.tensor([tokens[n][-1] for n in names])
            for name, token in zip(names, engine.decode([rows[n] for n in names], feed).argmax(-1).tolist()):
                tokens[name].append(token)

    def release(name):
        engine.release(rows.pop(name))
        plant_stale_values(engine)

    for name in "abc":
        rows[name] = engine.admit(prompts[name])
    plant_stale_values(engine)
    prefill(["b", "a", "c"])
    # one forward, rows in cache order; padding on the left, at slots past the prompt (on a GPU, a slot written
    # twice in one forward holds either write)
    assert graphs or forwards[0] == [
        [*range(3, 11), *range(3)],
        list(range(11)),
        [*range(6, 11), *range(6)],
    ]
    step(["a", "b", "c"], 3)
    release("a")  # "c" moves into row 0
    rows["d"], rows["e"] = engine.admit(prompts["d"]), engine.admit(prompts["e"])  # rows 2 and 3
    release("c")  # "e" moves into row 0: "d" and "e" hold rows 2 and 0, "b" row 1 between them
    prefill(["d", "e"])
    assert graphs or forwards[1:] == [[list(range(5))], [[*range(1, 5), 0]]]  # "e" in row 0, then "d" in row 2
    if graphs:  # no eager forward: two replays of the graph of 4 rows x 32 tokens
        assert not forwards and engine.prefill_graphs.replays == 2 and (4, 32) in engine.prefill_graphs.shapes
    step(["e", "b", "d"], 6)  # "b" reaches position 21: past the context bucket of 16
    assert tokens == {name: hf_alone(model, prompts[name], len(made)) for name, made in tokens.items()}


def test_the_engine_refuses_what_it_cannot_do(tiny_model_dir):
    engine = engine_on_session(load(tiny_model_dir("llama")), EmulatedBackend(), fused=False)
    with pytest.raises(BadOptionError, match="64 tokens leaves no room for a new token in a row of 64 cache slots"):
        engine.admit(list(range(64)))
    with pytest.raises(BadOptionError, match="the prompt is empty"):
        engine.admit([])
    with pytest.raises(BadOptionError, match="token id 256 is not in the model's vocabulary of 256"):
        engine.admit([1, 256])
    rows = [engine.admit([1, 2, 3]) for _ in range(4)]
    with pytest.raises(ResourceError, match="every one of the 4 rows holds a request"):
        engine.admit([1])
    with pytest.raises(BadOptionError, match="has not prefilled its whole prompt"):
        engine.decode(rows[:1], torch.tensor([1]))
    with pytest.raises(BadOptionError, match="a prefill of 2 rows of up to 3 prompt tokens runs 6 tokens, more than"):
        engine.prefill(rows[:2])  # the chunk is 4
    with pytest.raises(BadOptionError, match="Give at least one row, and each row once"):
        engine.prefill([rows[0], rows[0]])
    engine.prefill(rows[:1])
    with pytest.raises(BadOptionError, match=f"row {rows[0]} has prefilled its whole prompt"):
        engine.prefill(rows[:1])
    with pytest.raises(BadOptionError, match="Give each row once"):
        engine.decode([rows[0], rows[0]], torch.tensor([1, 1]))
    engine.release(rows[1])
    with pytest.raises(BadOptionError, match=f"row {rows[1]} holds no request"):
        engine.position(rows[1])
    full = engine.admit(list(range(1, 64)))  # 63 tokens: one decode step fits, then the row is full
    while engine.next_chunk(full):
        engine.prefill([full])
    engine.decode([full], torch.tensor([1]))
    assert engine.position(full) == 64
    with pytest.raises(ResourceError, match=f"row {full} is full: its next token would go to slot 64 of 64"):
        engine.decode([full], torch.tensor([1]))


def test_graphs_of_the_shared_mode_are_refused(tiny_model_dir):
    model = load(tiny_model_dir("llama"))
    session = DecodeSession(model, 2, 32)
    graphs = capture_decode_graphs(session, EmulatedBackend(), (2,), contexts=())
    shared = SimpleNamespace(session=session, graphs=graphs, plan=SimpleNamespace(tp=1, mode="full"))
    with pytest.raises(BadOptionError, match=r"per-row mode .* Prepare with per_row=True\."):
        SlotEngine(shared)


def test_an_eager_plan_runs_the_sessions_own_step(tiny_model_dir):
    engine = prepared_engine(tiny_model_dir("llama"), mode="eager")
    assert engine.graphs is None
    run = run_script(engine)
    assert run.tokens == expected_tokens(engine.session.model)


@pytest.mark.parametrize("model_type", ["mistral", "gemma2"])
def test_a_sliding_window_shorter_than_the_rows_applies_per_row(model_type):
    """A window of 6 while rows reach position 25: mistral takes one mask, gemma2 one per layer kind (its
    sliding and full layers alternate; eager attention, as HF runs it)."""
    torch.manual_seed(0)
    extra = {"head_dim": 16} if model_type == "gemma2" else {}
    config = AutoConfig.for_model(model_type, **SMALL_DECODER, sliding_window=6, **extra)
    attention = "eager" if model_type == "gemma2" else "sdpa"
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attention).eval()
    engine = engine_on_session(model, EmulatedBackend(), fused=False)
    assert engine.session.window == 6
    assert run_script(engine).tokens == expected_tokens(model)


def test_layers_of_another_kind_are_refused():
    model = tiny_decoder("llama")
    model.config.layer_types = ["full_attention", "chunked_attention"]
    with pytest.raises(UnsupportedModelError, match="also has layers of kind chunked_attention"):
        DecodeSession(model, 2, 32, per_row=True)


def test_verify_judges_rows_at_different_positions():
    """verify's ragged cases, in per-row mode: each row at its own position (its prompt from slot 0 of its row)."""
    session = DecodeSession(tiny_decoder("qwen2"), 4, 64, per_row=True)
    graphs = capture_decode_graphs(session, EmulatedBackend(), (1, 4), contexts=(16,))
    rows = verify_graphs(graphs, steps=4, prompt_len=6, coverage=Coverage(ragged=True))
    assert all(r.passed for r in rows), [r.detail for r in rows if not r.passed]
    assert any(len(set(r.padding.split("/"))) > 1 for r in rows)


def test_eager_attention_takes_an_additive_mask_and_decodes_the_same():
    model = tiny_decoder("llama")
    model.set_attn_implementation("eager")
    engine = engine_on_session(model, EmulatedBackend(), fused=False)
    assert engine.session.rows_mask(torch.tensor([[1]]), 4).dtype == torch.float32
    assert run_script(engine).tokens == expected_tokens(model)


def test_fp8_weights_serve_through_the_graphs_as_their_own_eager_steps(tiny_model_dir):
    """`serve --weights fp8`: the per-row graphs of an FP8 model (bf16 activations) give the same tokens as
    that model's own eager per-row steps (an eager plan), request for request."""

    def tokens(mode: str) -> dict[str, list[int]]:
        prepared = prepare(
            CaptureRequest(
                model=tiny_model_dir("llama"), buckets=(1, 4), max_cache_len=64, contexts=(16,), device="cpu",
                dtype="bfloat16", emulate=True, per_row=True, weights="fp8", mode=mode,
            )
        )  # fmt: skip
        assert any(type(m).__name__ == "Fp8Linear" for m in prepared.session.model.modules())
        return run_script(SlotEngine(prepared, chunk=4)).tokens

    assert tokens("auto") == tokens("eager")
