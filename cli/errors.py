"""One table from failures to the single line a user sees, and the exit code."""

from __future__ import annotations

import functools
import sys
import traceback
import warnings
from collections.abc import Callable

import typer

from accelerate_graph import settings
from accelerate_graph.common.debug import DEBUG_ENV, debug_enabled, set_debug  # noqa: F401 - re-exported for the CLI
from accelerate_graph.common.errors import (
    RUNTIME_EXIT,
    SETTING,
    CugraphAccelError,
    EngineWarning,
    first_line,
    option_value,
)

INTERRUPTED_EXIT = 130

# Options whose flag is not their keyword with dashes (errors name options by keyword: common/errors.py).
FLAGS = {"max_memory_mib": "--max-memory", "contexts": "--context-buckets", "assignments": "--set"}


def flag(name: str, value: str | None) -> str:
    """An option as the command line spells it: `--max-cache-len 512`, `--fuse`, `no --fuse` for False;
    a setting as `--set NAME=VALUE`."""
    if name.startswith(SETTING):
        parsed = "VALUE" if value is None else option_value(value)
        if isinstance(parsed, bool):
            parsed = "on" if parsed else "off"
        return f"--set {name.removeprefix(SETTING)}={parsed}"
    text = FLAGS.get(name, "--" + name.replace("_", "-"))
    if value is None:
        return text
    parsed = option_value(value)
    if isinstance(parsed, bool):
        return text if parsed else f"no {text}"
    if isinstance(parsed, (tuple, list)):
        return f"{text} {','.join(map(str, parsed))}"
    if isinstance(parsed, str) and not (parsed.isprintable() and parsed and " " not in parsed):
        return f"{text} {parsed!r}"  # quoted, escaped: a control character must not split the one error line
    return f"{text} {parsed}"


# Raw runtime failures we can explain better than their first line does.
KNOWN_RUNTIME = (
    ("out of memory", "the device ran out of memory. Lower the largest --buckets value or --max-cache-len."),
    ("can't allocate memory", "the machine ran out of memory. Lower the largest --buckets value or --max-cache-len."),
    (
        "device-side assert",
        "a device-side assert fired on the GPU; this CUDA context is unusable and the "
        "process must end. Re-run with --mode eager, and report the model.",
    ),
    (
        "illegal memory access",
        "an illegal memory access on the GPU; this CUDA context is unusable and the "
        "process must end. Re-run with --mode eager, and report the model.",
    ),
    (
        "operation not permitted when stream is capturing",
        "an operation in the decode step is not allowed inside a CUDA graph capture. Re-run with --mode eager.",
    ),
)


def describe(err: BaseException) -> tuple[str, int]:
    """(message, exit code) for any exception."""
    if isinstance(err, CugraphAccelError):
        return err.render(flag), err.exit_code
    text = str(err)
    for needle, explanation in KNOWN_RUNTIME:
        if needle in text.lower():
            return explanation, RUNTIME_EXIT
    first = first_line(err) if text else ""
    return (f"unexpected {type(err).__name__}: {first} (run with --debug for the traceback)", RUNTIME_EXIT)


def one_line_warnings(previous: Callable) -> Callable:
    """A `warnings.showwarning` that writes the engine's notices as one line, `warning: ...`, and hands the
    rest (and every one under --debug) to `previous`, which names the file and line that raised them."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, EngineWarning) and not debug_enabled():
            print(f"warning: {message}", file=sys.stderr if file is None else file)
        else:
            previous(message, category, filename, lineno, file, line)

    return show


def guarded(command: Callable) -> Callable:
    """Run a command; turn any failure into one stderr line and an exit code."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            with settings.scope(), warnings.catch_warnings():  # both as they were when the command returns
                warnings.showwarning = one_line_warnings(warnings.showwarning)
                return command(*args, **kwargs)
        except typer.Exit:
            raise
        except KeyboardInterrupt:
            print("interrupted: nothing was written.", file=sys.stderr)
            raise typer.Exit(INTERRUPTED_EXIT) from None
        except Exception as err:  # noqa: BLE001 - this is the one place every failure ends up
            if debug_enabled():
                traceback.print_exc()
            message, code = describe(err)
            print(f"error: {message}", file=sys.stderr)
            raise typer.Exit(code) from None

    return wrapper
