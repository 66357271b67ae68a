"""A snapshot copies only the rows and slots the steps after it will write, and restore puts them back exactly."""

from __future__ import annotations

import torch
from tiny_models import tiny_decoder

from accelerate_graph.core.decode_session import DecodeSession


def _state(session: DecodeSession) -> list[torch.Tensor]:
    return [t.clone() for layer in session.kv.layers for t in (layer.keys, layer.values, layer.cumulative_length)]


def test_window_snapshot_restores_what_steps_wrote_and_copies_nothing_else():
    session = DecodeSession(tiny_decoder("qwen2"), 4, 64)
    session.prefill(torch.randint(0, 256, (4, 6)))
    before = _state(session)
    snap = session.kv.snapshot(2, 6, 3)  # 3 steps of rows [:2] from slot 6
    layer = session.kv.layers[0]
    _, heads, _, dim = layer.keys.shape
    assert snap[0][0].shape == (2, heads, 3, dim)
    copied = sum(k.nbytes + v.nbytes for k, v, _ in snap)
    whole = sum(layer.keys.nbytes + layer.values.nbytes for layer in session.kv.layers)
    assert copied * 40 < whole  # 2 of 4 rows, 3 of 65 slots: 1/43 of the cache
    for i in range(3):
        session.load_inputs(2, torch.tensor([5 + i, 9]), torch.full((2,), 6 + i))
        with torch.no_grad():
            session.step_fn(2)()
    assert any(not torch.equal(a, b) for a, b in zip(before, _state(session)))  # the steps did write
    session.kv.restore(snap)
    assert all(torch.equal(a, b) for a, b in zip(before, _state(session)))
    assert session.kv.next_slot == 6


def test_whole_snapshot_still_available_and_window_clipped_to_storage():
    session = DecodeSession(tiny_decoder("qwen2"), 2, 16)
    session.prefill(torch.randint(0, 256, (2, 4)))
    assert session.kv.snapshot(2)[0][0].shape[2] == session.kv.storage_len
    assert session.kv.snapshot(2, 14, 10)[0][0].shape[2] == session.kv.storage_len - 14
