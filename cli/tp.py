"""--tp N: run a command's body on N ranks (accelerate_graph.distributed) and report one line.

Every command imports this module before it knows whether --tp is above 1: torch, the plan reader
and the distributed launcher are imported only where a function needs them (a plain `generate`
reaches its first token without them).
"""

from __future__ import annotations

import functools
import inspect
import os
import traceback
from collections.abc import Callable
from pathlib import Path

import click
import typer

from accelerate_graph.common.errors import PlanError

from .common import settings_assignments
from .errors import debug_enabled, describe
from .options import DEFAULT_PLAN_PATH


def classify(err: BaseException) -> tuple[int, str | None]:
    """A rank's failure as (exit code, one line); None when the command already said it."""
    if isinstance(err, typer.Exit | click.exceptions.Exit):
        return err.exit_code, None
    if debug_enabled():
        traceback.print_exc()
    message, code = describe(err)
    return code, message


def _unguarded(command: Callable, **kwargs) -> None:
    command.__wrapped__(**kwargs)  # the rank reports its failure itself; the launcher prints it once


def spread(command: Callable, arguments: dict, tp: int, device: str) -> bool:
    """False: run the body here. Otherwise run `command` on `tp` ranks and end this process with the
    run's exit code (a failure as one line): the ranks are gone, nothing of ours is left to finalize,
    and the interpreter's own finalization of torch alone can take seconds."""
    if tp <= 1:
        return False
    from accelerate_graph import settings
    from accelerate_graph.common.devices import resolve_device
    from accelerate_graph.distributed.launch import run_on_ranks
    from accelerate_graph.distributed.rank import check_world_fits, in_rank
    from accelerate_graph.distributed.teardown import end_process
    from accelerate_graph.pipeline import check_weights_split

    if in_rank():
        return False
    check_world_fits(tp, resolve_device(device).type)
    check_weights_split(arguments.get("weights"), tp)  # before any rank starts
    # the ranks resolve their settings as this process would: --set given here reaches them in the environment
    assignments = settings_assignments(arguments.get("assignments"), arguments.get("allreduce"))
    os.environ.update(settings.to_environment(settings.resolve(assignments), names=assignments))
    # `arguments` is the command's locals(): keep its parameters, not names it imported before calling us
    parameters = inspect.signature(command.__wrapped__).parameters
    arguments = {name: value for name, value in arguments.items() if name in parameters}
    code = run_on_ranks(tp, functools.partial(_unguarded, command), arguments, classify)
    end_process(code)
    return True  # not reached


def plan_tp(tp: int | None, model: str | None, plan: Path | None) -> int:
    """--tp as given; else the plan's (verify and bench re-capture what the plan describes)."""
    if tp is not None:
        return tp
    if model is not None and plan is None:
        return 1
    from accelerate_graph.core.plan import read_plan

    try:
        return read_plan(plan or DEFAULT_PLAN_PATH).tp
    except PlanError:
        return 1  # the command itself says what is wrong with the plan


def plan_device(model: str | None, plan: Path | None) -> str:
    """The device a re-capture runs on: MODEL's auto, else the plan's."""
    if model is not None and plan is None:
        return "auto"
    from accelerate_graph.core.plan import read_plan

    return read_plan(plan or DEFAULT_PLAN_PATH).device
