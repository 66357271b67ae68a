"""The `cugraph-accel` script: Ctrl-C handling first, then the (slower) imports, then the app.

Ctrl-C ends the process at once with exit 130 and one line, whenever it comes. Raising
KeyboardInterrupt is not enough: it can land inside a library's import, where a broad `except` swallows
it (the command then ran on as if nothing happened) or leaves a module half-imported (the next import
of it failed with a RecursionError). Nothing is left half-written: a file being written atomically
is still a temp file beside the old one, and the handler removes it.
"""

from __future__ import annotations

import os
import signal
import sys

from accelerate_graph.common.atomic_io import discard_pending_writes

INTERRUPTED_EXIT = 130


def _interrupted(signum, frame) -> None:
    discard_pending_writes()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os.write(2, b"\ninterrupted: no file was left half-written.\n")
    os._exit(INTERRUPTED_EXIT)


def main() -> None:
    signal.signal(signal.SIGINT, _interrupted)
    from .main import app

    app(prog_name="cugraph-accel")
