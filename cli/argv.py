"""Command-line words checked before typer parses them.

- `--debug` may stand anywhere on the line (every error line suggests it), so the group takes it out
  before the subcommand sees it.
- No option swallows the next flag: `--json --allow-cpu` is refused with one line instead of writing
  to a file named `--allow-cpu`. The old `--json` flag of capture and verify (no path) still works for
  one release, as `--json -`, with a deprecation line; there, until then, a PATH ends in .json (so
  that `capture --json tiny` keeps its old meaning: MODEL tiny, JSON on standard output).
"""

from __future__ import annotations

import sys

import typer
from typer.core import TyperCommand, TyperGroup

from accelerate_graph.common.debug import set_debug
from accelerate_graph.common.errors import USAGE_EXIT

DEBUG_FLAG = "--debug"
JSON_OPTION = "--json"
# commands whose --json was a flag before it took a PATH (deprecated spelling, one release)
LEGACY_JSON_FLAG = {"capture", "verify"}
JSON_FLAG_DEPRECATED = (
    "note: `--json` without a PATH is deprecated and will be refused in the next release; "
    "reading it as `--json -` (standard output)."
)


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


def _legacy_json_flag(following: str | None) -> bool:
    """Whether a capture/verify `--json` is the old flag: nothing after it, another option, or a word
    that is no JSON path (`capture --json tiny` meant MODEL tiny). This release a PATH there ends in
    .json, or is `-`."""
    return following is None or following.startswith("--") or (following != "-" and not following.endswith(".json"))


def check_option_values(command_name: str, value_options: set[str], args: list[str]) -> list[str]:
    """`args` with each value-taking option followed by a value; the legacy bare `--json` becomes
    `--json -`; an option followed by another option is refused."""
    checked: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            return checked + args[i:]
        checked.append(word)
        i += 1
        if word not in value_options:
            continue
        following = args[i] if i < len(args) else None
        if word == JSON_OPTION and command_name in LEGACY_JSON_FLAG and _legacy_json_flag(following):
            print(JSON_FLAG_DEPRECATED, file=sys.stderr)
            checked.append("-")
        elif following is not None and following.startswith("--"):
            wanted = "a PATH, or - for standard output" if word == JSON_OPTION else "its value"
            _refuse(f"{word} needs a value, but the next word is the option {following}. Give {word} {wanted}.")
    return checked


class CheckedCommand(TyperCommand):
    def parse_args(self, ctx, args: list[str]) -> list[str]:
        return super().parse_args(ctx, check_option_values(self.name or "", _value_options(self), args))


class DebugAnywhereGroup(TyperGroup):
    def parse_args(self, ctx, args: list[str]) -> list[str]:
        args, debug = strip_debug(list(args))
        set_debug(debug)
        return super().parse_args(ctx, args)
