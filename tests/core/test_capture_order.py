"""The order in which capture_decode_graphs captures the batch buckets (core.capture.capture_order)."""

from tiny_models import tiny_decoder

from accelerate_graph.core import capture
from accelerate_graph.core.backends import EmulatedBackend
from accelerate_graph.core.decode_session import DecodeSession


def test_buckets_are_captured_largest_first():
    assert capture.capture_order((1, 8, 32, 16)) == [32, 16, 8, 1]


def test_the_captures_follow_the_order_and_every_graph_replays():
    seen = []
    session = DecodeSession(tiny_decoder("llama"), 4, 32)
    graphs = capture.capture_decode_graphs(session, EmulatedBackend(), (1, 2, 4), on_captured=seen.append)
    assert [c.bucket for c in seen] == [4, 2, 1]
    assert [c.bucket for c in graphs.captures()] == [4, 2, 1]  # what `capture`'s table lists
    for batch in (1, 2, 4):
        graphs.graph_now(batch)  # each captured and dispatchable


def test_the_capture_table_names_the_order_its_rows_are_in():
    from cli.tables import capture_table

    session = DecodeSession(tiny_decoder("llama"), 4, 32)
    graphs = capture.capture_decode_graphs(session, EmulatedBackend(), (1, 2, 4), contexts=(16,))
    table = capture_table(graphs.captures())
    assert table.title == "captured decode graphs (largest bucket first, one shared pool)"
    assert list(table.columns[0].cells)[:-1] == ["4", "4", "2", "2", "1", "1"]
