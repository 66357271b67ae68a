"""One output object per command: rich tables and progress for people, JSON for machines."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from accelerate_graph.distributed.rank import is_main_rank


class Output:
    """Human mode: everything on stdout. JSON mode: only the JSON document on stdout, chatter on stderr."""

    def __init__(self, json_mode: bool = False):
        self.json_mode = json_mode
        self.quiet = not is_main_rank()  # under --tp only rank 0 speaks
        self.console = Console(stderr=json_mode, highlight=False, quiet=self.quiet)

    def line(self, text: str = "") -> None:
        self.console.print(text)

    def note(self, text: str) -> None:
        self.console.print(f"[yellow]note:[/yellow] {text}")

    def show(self, renderable) -> None:
        if not self.json_mode:
            self.console.print(renderable)

    def emit_json(self, data: dict) -> None:
        if self.json_mode and not self.quiet:
            sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")

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
