"""A staggered run of requests through a SlotEngine, and HF's greedy tokens for each prompt alone: what the
engine tests on the CPU emulation and on the GPU compare."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import torch

from accelerate_graph import settings
from accelerate_graph.core.backends import EmulatedBackend
from accelerate_graph.core.capture import capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.fused.grouped_attention import use_grouped_attention
from accelerate_graph.fused.layers import FusedForward
from accelerate_graph.models.loading import load_model
from accelerate_graph.serve.engine import SlotEngine

# name -> (prompt, the turn it joins at, how many tokens it takes before it leaves). Four rows: "a" leaves
# while the others decode, and "d", still prefilling, moves into its row; "c" moves into the row of the
# request released mid-prefill; "e" and "f" join last, together, one with an id a finished request held, and
# go in in one prefill forward, "f" left-padded to the length of "e".
REQUESTS = {
    "a": ([5, 6, 7, 8, 9, 10, 11], 0, 9),
    "b": ([12, 13], 2, 20),
    "c": ([14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24], 3, 14),
    "d": ([30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43], 7, 10),
    "e": ([40, 41], 20, 12),
    "f": ([44], 20, 7),
}
ABANDONED = ([50, 51, 52, 53, 54, 55, 56, 57, 58], 2)  # (prompt, turn): released mid-prefill the turn after


def load(folder):
    """A saved model, float32 on the CPU, through the real loading path."""
    return load_model(folder, torch.device("cpu"), torch.float32, "sdpa", None).model


def hf_alone(model, prompt: list[int], new: int) -> list[int]:
    """HF generate()'s greedy tokens for `prompt` alone."""
    ids = torch.tensor([prompt], device=next(model.parameters()).device)
    out = model.generate(input_ids=ids, max_new_tokens=new, do_sample=False, pad_token_id=0, eos_token_id=None)
    return out[0, len(prompt) :].tolist()


def expected_tokens(model) -> dict[str, list[int]]:
    return {name: hf_alone(model, prompt, new) for name, (prompt, _, new) in REQUESTS.items()}


@dataclass
class ScriptRun:
    tokens: dict[str, list[int]] = field(default_factory=dict)
    max_in_use: int = 0  # the most rows held at once
    reused: bool = False  # a request got an id a finished one had held
    decode_steps: int = 0
    largest_prefill: int = 0  # the most requests one prefill forward took


def run_script(engine: SlotEngine, plant=None) -> ScriptRun:
    """Every request of REQUESTS through `engine`: each turn, the joiners are admitted, the prefilling requests
    run their next chunk, together where one forward holds them (in order of joining), every decoding request
    one step (in reverse order of joining, so the step's rows are not the engine's order), then the finished
    ones leave. `plant(engine)` runs after each release."""
    run = ScriptRun()
    rows: dict[str, int] = {}
    prefilling: list[str] = []
    decoding: list[str] = []
    released_ids: set[int] = set()
    abandoned = None
    turn = 0
    while len(run.tokens) < len(REQUESTS) or prefilling or decoding:
        for name, (prompt, joins, _) in REQUESTS.items():
            if joins == turn:
                rows[name] = engine.admit(prompt)
                run.reused |= rows[name] in released_ids
                run.tokens[name] = []
                prefilling.append(name)
        if turn == ABANDONED[1]:
            abandoned = engine.admit(ABANDONED[0])
            engine.prefill([abandoned])
            assert engine.next_chunk(abandoned) > 0
        run.max_in_use = max(run.max_in_use, engine.max_rows - engine.free_rows())
        for group in engine.prefill_groups([rows[n] for n in prefilling]):
            logits = engine.prefill(group)
            assert logits.shape == (len(group), engine.vocab_size)
            run.largest_prefill = max(run.largest_prefill, len(group))
            for row, token in zip(group, logits.argmax(-1).tolist()):
                name = next(n for n in prefilling if rows[n] == row)
                if engine.next_chunk(row) == 0:
                    run.tokens[name].append(token)
                    prefilling.remove(name)
                    decoding.append(name)
        if turn == ABANDONED[1] + 1:  # mid-prefill, and not the last row in use: a row moves into its place
            engine.release(abandoned)
            released_ids.add(abandoned)
            if plant is not None:
                plant(engine)
        stepping = [n for n in reversed(decoding) if len(run.tokens[n]) < REQUESTS[n][2]]
        if stepping:
            feed = torch.tensor([run.tokens[n][-1] for n in stepping], device=engine.session.device)
            logits = engine.decode([rows[n] for n in stepping], feed)
            assert logits.shape == (len(stepping), engine.vocab_size)
            run.decode_steps += 1
            for name, row in zip(stepping, logits.argmax(-1).tolist()):
                run.tokens[name].append(row)
                assert engine.position(rows[name]) == len(REQUESTS[name][0]) + len(run.tokens[name]) - 1
        for name in [n for n in decoding if len(run.tokens[n]) >= REQUESTS[n][2]]:
            decoding.remove(name)
            engine.release(rows[name])
            released_ids.add(rows[name])
            if plant is not None:
                plant(engine)
        turn += 1
    assert engine.free_rows() == engine.max_rows
    return run


def plant_stale_values(engine: SlotEngine) -> None:
    """Large values in every cache row no request holds and in every held row past its position: a step
    that attended any of them would move its row's logits far off."""
    in_use = engine.max_rows - engine.free_rows()
    for layer in engine.session.kv.layers:
        layer.keys[in_use:] = 50.0
        layer.values[in_use:] = -50.0
    positions = [engine._requests[ident].position for ident in engine._order]
    for physical, position in enumerate(positions):
        for layer in engine.session.kv.layers:
            layer.keys[physical, :, position:] = 50.0
            layer.values[physical, :, position:] = -50.0


def engine_on_session(
    model, backend, fused: bool, chunk: int = 4, buckets=(1, 4), contexts=(16,), prefill_graphs: bool = True
) -> SlotEngine:
    """A SlotEngine over a per-row session of 4 rows x 64 slots whose graphs `backend` captures, through the
    fused forward when `fused` (inductor where the device is CUDA, aot_eager on the CPU). The script's
    positions reach 25: its steps cross the context bucket of 16. First prompt parts replay prefill graphs
    where `prefill_graphs` and the chunk holds their smallest width (32 tokens)."""
    session = DecodeSession(model, 4, 64, per_row=True)
    if fused:
        use_grouped_attention(model)
        compiler = "inductor" if session.device.type == "cuda" else "aot_eager"
        session.fused = FusedForward(model, backend=compiler, positions=session.kv.storage_len)
    graphs = capture_decode_graphs(session, backend or EmulatedBackend(), buckets, contexts=contexts)
    prepared = SimpleNamespace(session=session, graphs=graphs, plan=SimpleNamespace(tp=1, mode="full"))
    return SlotEngine(prepared, chunk=chunk, settings=settings.current().replace(prefill_graphs=prefill_graphs))
