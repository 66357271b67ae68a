"""The typer app: registers the commands and the global switches."""

from __future__ import annotations

from typing import Annotated

import typer

from accelerate_graph import __version__

from .bench_cmd import bench
from .capture_cmd import capture
from .errors import DEBUG_ENV, set_debug
from .generate_cmd import generate
from .recipes_cmd import recipes
from .verify_cmd import verify
from .zoo_cmd import zoo

app = typer.Typer(
    help="Verified CUDA graphs for the decode step of Hugging Face causal LMs.",
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
    debug: Annotated[bool, typer.Option("--debug", help=f"Show tracebacks (or set {DEBUG_ENV}=1).")] = False,
) -> None:
    """Detect, capture, verify and benchmark decode-step CUDA graphs."""
    set_debug(debug)


app.command()(capture)
app.command()(verify)
app.command()(bench)
app.command()(generate)
app.command()(recipes)
app.command()(zoo)
