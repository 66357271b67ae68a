"""An exclusive lock on an output path, so that two commands writing it cannot both think they won.

The lock is `flock` on `<path>.lock`, which holds the holder's pid. A second taker fails at once with one
line naming that pid rather than waiting: after the wait it would find the winner's output and be refused
(or, with --force, silently replace it), so waiting only delays the same answer. The kernel drops the
lock when the holder's process ends, however it ends; the CLI's Ctrl-C handler removes the file too, and
one left behind by a killed holder locks nothing and is reused.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from accelerate_graph.common.atomic_io import removed_if_interrupted
from accelerate_graph.common.errors import WriteError

LOCK_SUFFIX = ".lock"


def lock_path(path: Path | str) -> Path:
    path = Path(path)
    return path.with_name(path.name + LOCK_SUFFIX)


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


def _open_locked(lock: Path, what: str, hint: str) -> int:
    """An fd holding the lock on `lock` (the file at that path now, not one a releasing holder unlinked)."""
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise WriteError(
                f"another process (pid {holder}) is writing the {what}; {lock} is its lock.", hint
            ) from None
        except OSError:
            os.close(fd)
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the holder removed the file between our open and our lock: take the new one


@contextlib.contextmanager
def exclusive_lock(path: Path | str, what: str, hint: str) -> Iterator[None]:
    """Hold `<path>.lock` for the block; WriteError (`what` and `hint` in its line) if another holds it.
    The lock file is removed on the way out, while still held, so a waiting opener retries on a new one."""
    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = _open_locked(lock, what, hint)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        with removed_if_interrupted(lock):
            yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)
