"""Write files so a reader never sees half of one: a temp file in the same folder, then rename."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from accelerate_graph.common.errors import BadOptionError


def check_writable(path: Path | str, what: str = "file") -> None:
    """Fail before long work, not after it, when `path` cannot be written."""
    path = Path(path)
    parent = next((p for p in path.parents if p.exists()), Path("."))
    problem = None
    if path.is_dir():
        problem = "it is a folder"
    elif not parent.is_dir():
        problem = f"{parent} is a file, not a folder"
    elif not os.access(parent, os.W_OK):
        problem = f"{parent} is not writable"
    if problem:
        raise BadOptionError(f"cannot write the {what} to {path}: {problem}.", "Choose another path.")


def atomic_write(path: Path | str, write: Callable[[IO], None], binary: bool = False) -> None:
    """Replace `path` with what `write(handle)` writes, in one step; on any failure (Ctrl-C too) the old
    file stays and no temp file is left."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path | str, text: str) -> None:
    atomic_write(path, lambda handle: handle.write(text))
