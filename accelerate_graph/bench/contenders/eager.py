"""eager: the session's decode step without graphs, the baseline every step row is compared with."""

from __future__ import annotations

from accelerate_graph.bench.contenders.base import Contender, Tier, TimedStep


def eager_step(graphs, batch: int, rewind) -> TimedStep:
    return TimedStep("eager", graphs.eager)


EAGER = Contender("eager", Tier.OURS, color="tab:red", step=eager_step)
