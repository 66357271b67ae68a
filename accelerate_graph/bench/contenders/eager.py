"""eager: the session's decode step without graphs, the baseline every step row is compared with."""

from __future__ import annotations

import functools

from accelerate_graph.bench.contenders.base import Contender, Tier, TimedStep


def set_up_eager(graphs, batch: int, rewind) -> TimedStep:
    from accelerate_graph.verify.reference import eager_step  # heavy: see base.py's docstring

    return TimedStep("eager", functools.partial(eager_step, graphs.session))


EAGER = Contender("eager", Tier.OURS, color="tab:red", step=set_up_eager)
