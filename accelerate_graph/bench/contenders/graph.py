"""graph: replays of the plan's captured graphs of HF's decode step."""

from __future__ import annotations

from collections.abc import Callable

from accelerate_graph.bench.contenders.base import Contender, SetupColumn, SetUpStep, Tier, TimedStep

MIB = 1024 * 1024


def replay_step(name: str) -> SetUpStep:
    """The step of a contender that replays captured graphs (graph, fused)."""

    def set_up(graphs, batch: int, rewind: Callable[[], None]) -> TimedStep:
        def call(tokens, positions):
            # the graph's own output, like eager's and compile's: a copy out is the caller's choice, not the step's
            return graphs.run(tokens, positions, copy=False)

        return TimedStep(name, call, graphs.bucket_seconds(batch), graphs.bucket_memory(batch))

    return set_up


GRAPH = Contender(
    "graph",
    Tier.OURS,
    color="tab:green",
    step=replay_step("graph"),
    replays_graphs=True,
    needs_graphs=True,
    columns=(
        SetupColumn("capture\nms", lambda row: f"{row.setup_seconds * 1000:.1f}"),
        SetupColumn("graph\nMiB", lambda row: f"{row.memory_bytes / MIB:.1f}"),
    ),
)
