"""The typer app: registers the commands and the global switches.

Nothing here (or in the command modules) imports torch or transformers at import time: commands import
their heavy modules when they run, so `--version` and `--help` answer at once.
"""

from __future__ import annotations

from typing import Annotated

import typer

from accelerate_graph import __version__

from .argv import CheckedCommand, DebugAnywhereGroup
from .bench_cmd import bench
from .capture_cmd import capture
from .errors import DEBUG_ENV
from .eval_cmd import eval_command
from .generate_cmd import generate
from .recipes_cmd import recipes
from .serve_cmd import serve
from .settings_cmd import settings
from .tune_cmd import tune
from .verify_cmd import verify
from .zoo_cmd import zoo

HELP = """Verified CUDA graphs for the decode step of Hugging Face causal LMs.

Examples:

  cugraph-accel capture && cugraph-accel verify           # the built-in tiny model

  cugraph-accel capture qwen2.5-0.5b --buckets 1,8,16,32

  cugraph-accel bench --json results.json                 # --json - prints the JSON instead

  cugraph-accel recipes

  cugraph-accel settings                                  # the engine's settings; --set NAME=VALUE changes one
"""

app = typer.Typer(
    cls=DebugAnywhereGroup,
    help=HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        print(f"cugraph-accel {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    debug: Annotated[
        bool,
        typer.Option("--debug", help=f"Show tracebacks, anywhere on the command line (or set {DEBUG_ENV}=1)."),
    ] = False,
) -> None:
    """Detect, capture, verify and benchmark decode-step CUDA graphs."""
    # --debug was taken out of the command line (wherever it stood) by DebugAnywhereGroup


for command in (capture, verify, bench, generate, serve, recipes, settings, tune, zoo):
    app.command(cls=CheckedCommand)(command)
app.command(name="eval", cls=CheckedCommand)(eval_command)  # `eval` would shadow the builtin as a function name
