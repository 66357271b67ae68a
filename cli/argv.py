"""Command-line words checked before typer parses them.

- `--debug` may stand anywhere on the line (every error line suggests it), so the group takes it out
  before the subcommand sees it.
- No option swallows the next flag: `--json --allow-cpu` is refused with one line instead of writing
  to a file named `--allow-cpu`. `--json PATH` takes a path on every command (`-`: standard output),
  so `capture --json out.txt tiny` writes out.txt and captures tiny.
- `--plan -` is refused: a plan is a file that verify and bench read again, never a stream.
"""

from __future__ import annotations

import sys

import typer
from typer.core import TyperCommand, TyperGroup

from accelerate_graph.common.debug import set_debug
from accelerate_graph.common.errors import USAGE_EXIT

DEBUG_FLAG = "--debug"
JSON_OPTION = "--json"
PLAN_OPTION = "--plan"
STREAM = "-"


def strip_debug(args: list[str]) -> tuple[list[str], bool]:
    """`args` without any `--debug` before a `--` separator, and whether there was one."""
    end = args.index("--") if "--" in args else len(args)
    kept = [word for word in args[:end] if word != DEBUG_FLAG]
    return kept + args[end:], len(kept) != end


def _refuse(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(USAGE_EXIT)


def _value_options(command) -> set[str]:
    """Option names that take a value (not flags). Duck-typed: typer vendors its own click in some
    releases, so `isinstance(param, click.Option)` would be false there."""
    names: set[str] = set()
    for param in command.params:
        if getattr(param, "param_type_name", "") == "option" and not param.is_flag and not getattr(param, "count", 0):
            names.update(name for name in param.opts if name.startswith("--"))
    return names


def _wanted(option: str) -> str:
    return "a PATH, or - for standard output" if option == JSON_OPTION else "its value"


def _check_plan_value(value: str) -> None:
    if value == STREAM:
        _refuse(
            f"{PLAN_OPTION} - names no file: a plan is a file that verify and bench read again. "
            f"Give {PLAN_OPTION} a file path, e.g. {PLAN_OPTION} my.plan.yaml."
        )


def check_option_values(value_options: set[str], args: list[str]) -> list[str]:
    """`args`, checked: each value-taking option is followed by a value (not another option, not the
    end of the line), and `--plan` is no `-`. Refused with one line otherwise."""
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            break
        i += 1
        name, equals, value = word.partition("=")
        if equals and name == PLAN_OPTION and name in value_options:
            _check_plan_value(value)
        if word not in value_options:
            continue
        if i == len(args):
            _refuse(f"{word} needs a value, but it is the last word. Give {word} {_wanted(word)}.")
        following = args[i]
        if following.startswith("--"):
            _refuse(f"{word} needs a value, but the next word is the option {following}. Give {word} {_wanted(word)}.")
        if word == PLAN_OPTION:
            _check_plan_value(following)
        i += 1  # the value is the option's, whatever it looks like
    return args


class CheckedCommand(TyperCommand):
    def parse_args(self, ctx, args: list[str]) -> list[str]:
        return super().parse_args(ctx, check_option_values(_value_options(self), args))


class DebugAnywhereGroup(TyperGroup):
    def parse_args(self, ctx, args: list[str]) -> list[str]:
        args, debug = strip_debug(list(args))
        set_debug(debug)
        return super().parse_args(ctx, args)
