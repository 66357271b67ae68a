"""The debug switch: tracebacks in the CLI, and static-buffer address checks before every replay."""

from __future__ import annotations

from accelerate_graph import settings

DEBUG_ENV = settings.BY_NAME["debug"].env
_flag = False


def set_debug(enabled: bool) -> None:
    """--debug for this invocation only (the CLI may be called several times in one process)."""
    global _flag
    _flag = enabled


def debug_enabled() -> bool:
    """--debug, the debug setting of the settings in use, or the environment's (read even before a command
    resolves its settings, so that a failure to resolve them shows its traceback too)."""
    return _flag or settings.current().debug or settings.environment_flag("debug")
