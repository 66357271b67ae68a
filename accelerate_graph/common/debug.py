"""The debug switch: tracebacks in the CLI, and static-buffer address checks before every replay."""

from __future__ import annotations

import os

DEBUG_ENV = "CUGRAPH_ACCEL_DEBUG"
_flag = False


def set_debug(enabled: bool) -> None:
    """--debug for this invocation only (the CLI may be called several times in one process)."""
    global _flag
    _flag = enabled


def debug_enabled() -> bool:
    return _flag or os.environ.get(DEBUG_ENV, "") not in ("", "0")
