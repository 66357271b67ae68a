"""The order in which capture_decode_graphs captures the batch buckets (core.capture.capture_order)."""

from tiny_models import tiny_decoder

from accelerate_graph.core import capture
from accelerate_graph.core.backends import EmulatedBackend
from accelerate_graph.core.decode_session import DecodeSession


def test_buckets_are_captured_largest_first_by_default():
    assert capture.capture_order((1, 8, 32, 16)) == [32, 16, 8, 1]


def test_the_switch_puts_batch_1_first_and_keeps_the_rest_largest_first(monkeypatch):
    monkeypatch.setattr(capture, "BATCH_1_FIRST", True)
    assert capture.capture_order((1, 8, 32, 16)) == [1, 32, 16, 8]
    assert capture.capture_order((4, 2)) == [4, 2]  # no batch 1: nothing moves


def test_the_captures_follow_the_order_and_every_graph_replays(monkeypatch):
    monkeypatch.setattr(capture, "BATCH_1_FIRST", True)
    seen = []
    session = DecodeSession(tiny_decoder("llama"), 4, 32)
    graphs = capture.capture_decode_graphs(session, EmulatedBackend(), (1, 2, 4), on_captured=seen.append)
    assert [c.bucket for c in seen] == [1, 4, 2]
    assert [c.bucket for c in graphs.captures()] == [1, 4, 2]  # what `capture`'s table lists
    for batch in (1, 2, 4):
        graphs.graph_now(batch)  # each captured and dispatchable


def test_the_capture_table_names_the_order_its_rows_are_in(monkeypatch):
    from cli.tables import capture_table

    def title(first: bool, buckets=(1, 2, 4)):
        monkeypatch.setattr(capture, "BATCH_1_FIRST", first)
        session = DecodeSession(tiny_decoder("llama"), max(buckets), 32)
        graphs = capture.capture_decode_graphs(session, EmulatedBackend(), buckets, contexts=(16,))
        return capture_table(graphs.captures()).title

    assert title(False) == "captured decode graphs (largest bucket first, one shared pool)"
    assert title(True) == "captured decode graphs (batch 1 first, then largest, one shared pool)"
    assert "largest bucket first" in title(True, buckets=(1,))  # batch 1 alone, two contexts: nothing moved
