"""One output object per command: rich tables and progress for people, JSON for machines.

`--json PATH` writes the JSON document to PATH (atomically) and keeps the tables on standard output;
`--json -` prints only the JSON document on standard output and sends the chatter to standard error.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from accelerate_graph.settings import TP_WORKER_ENV

STDOUT = "-"
# Without a terminal (a log file, a pipe) rich would squeeze tables into 80 columns and cut numbers
# to `0.0e+…`: a fixed, wide width keeps every number whole.
PLAIN_WIDTH = 200


def _console(stderr: bool, quiet: bool) -> Console:
    console = Console(stderr=stderr, highlight=False, quiet=quiet)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, highlight=False, width=PLAIN_WIDTH, quiet=quiet)
    return console


def _main_rank() -> bool:
    """Under --tp only rank 0 speaks. Without importing torch (the CLI starts without it): a rank knows
    its place from the environment its launcher (ours or torchrun, through ours) set."""
    ranks = sys.modules.get("accelerate_graph.distributed.rank")
    if ranks is not None:
        return ranks.is_main_rank()
    return os.environ.get(TP_WORKER_ENV) != "1" or os.environ.get("RANK", "0") == "0"


def json_text(data: dict) -> str:
    return json.dumps(data, indent=2, default=str) + "\n"


class Output:
    """Human output on stdout, unless the JSON document goes there (`--json -`)."""

    def __init__(self, json_path: str | Path | None = None):
        self.json_path = None if json_path is None else str(json_path)
        self.json_mode = self.json_path == STDOUT
        self.quiet = not _main_rank()  # under --tp only rank 0 speaks (and writes the JSON document)
        self.console = _console(stderr=self.json_mode, quiet=self.quiet)

    def check_json_writable(self, force: bool) -> None:
        """Before any work: a --json PATH that holds a file is replaced only with --force (check_writable)."""
        from accelerate_graph.common.atomic_io import check_writable

        if self.json_path not in (None, STDOUT):
            check_writable(self.json_path, "JSON results", force)

    def line(self, text: str = "") -> None:
        self.console.print(text)

    def note(self, text: str) -> None:
        self.console.print(f"[yellow]note:[/yellow] {text}")

    def show(self, renderable) -> None:
        if not self.json_mode:
            self.console.print(renderable)

    def emit_json(self, data: dict) -> None:
        """The command's JSON document, where --json said (nothing without --json)."""
        if self.json_path is None or self.quiet:
            return
        if self.json_mode:
            sys.stdout.write(json_text(data))
            sys.stdout.flush()
            return
        from accelerate_graph.common.atomic_io import atomic_write_text

        atomic_write_text(self.json_path, json_text(data))
        self.line(f"written: {self.json_path}")

    @contextmanager
    def progress(self) -> Iterator[Progress]:
        columns = (
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=self.console, transient=True) as progress:
            yield progress
