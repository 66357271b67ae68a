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


def test_the_compilation_ahead_is_counted_in_the_first_graphs_setup(monkeypatch):
    session = DecodeSession(tiny_decoder("llama"), 4, 32)
    asked = []

    def ahead(session_, backend, buckets, contexts):
        asked.append((tuple(buckets), tuple(contexts)))
        return 5.0

    monkeypatch.setattr(capture, "compile_kernels_ahead", ahead)
    seen = []
    graphs = capture.capture_decode_graphs(session, EmulatedBackend(), (1, 2), seen.append, contexts=(16,))
    assert asked == [((1, 2), (32, 16))]  # every graph's (bucket, context), before any capture
    first, *rest = seen
    assert (first.bucket, first.context) == (2, 32) and first.seconds >= 5.0
    assert all(c.seconds < 5.0 for c in rest)  # once, not per graph
    assert graphs.bucket_seconds(2) >= 5.0 > graphs.bucket_seconds(1)


def test_nothing_is_compiled_ahead_without_fused_layers_or_a_cuda_backend():
    session = DecodeSession(tiny_decoder("llama"), 4, 32)
    assert session.fused is None
    assert capture.compile_kernels_ahead(session, EmulatedBackend(), (1, 2), (32,)) == 0.0
