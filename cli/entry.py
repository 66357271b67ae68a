"""The `cugraph-accel` script: Ctrl-C handling first, then the (slower) imports, then the app.

Ctrl-C ends the process at once with exit 130 and one line, whenever it comes. Raising
KeyboardInterrupt is not enough: it can land inside a library's import, where a broad `except` swallows
it (the command then ran on as if nothing happened) or leaves a module half-imported (the next import
of it failed with a RecursionError). Nothing is left half-written: a file being written atomically
is still a temp file beside the old one, and the handler removes it.

This module imports nothing beyond what the interpreter has loaded at start-up, so the handler is in
place within a millisecond of our first line; only the interpreter's own start-up (site, .pth files)
comes before it, and a Ctrl-C there is Python's to report.
"""

from __future__ import annotations

import os
import signal
import sys
import time

# When our first line ran (unix time): `generate` reports the interpreter's own start-up before it.
STARTED_UNIX: float | None = None

INTERRUPTED_EXIT = 130
ATOMIC_IO = "accelerate_graph.common.atomic_io"


def _interrupted(signum, frame) -> None:
    atomic_io = sys.modules.get(ATOMIC_IO)  # not imported yet: nothing is being written
    if atomic_io is not None:
        atomic_io.discard_pending_writes()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os.write(2, b"\ninterrupted: no file was left half-written.\n")
    os._exit(INTERRUPTED_EXIT)


def install_interrupt_handler() -> None:
    signal.signal(signal.SIGINT, _interrupted)


def main() -> None:
    global STARTED_UNIX
    STARTED_UNIX = time.time()
    install_interrupt_handler()
    from .main import app

    app(prog_name="cugraph-accel")
