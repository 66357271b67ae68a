"""Write files so a reader never sees half of one: a temp file in the same folder, then rename.

Also what every output path is checked for before long work starts: that it can be written, and that
it does not hold something of another kind the user would lose (a plan, a recipe, a model file).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from accelerate_graph.common.errors import BadOptionError, WriteError

# Files a model folder is made of: never replaced by results. Matched by name or suffix.
MODEL_FILE_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx")
MODEL_FILE_NAMES = {
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "tokenizer.model", "vocab.json", "merges.txt", "preprocessor_config.json",
}  # fmt: skip
# core/plan.py's PLAN_FORMAT prefix; spelled out here so that common/ does not import core/
PLAN_MARK = "cugraph-accel-plan/"
SNIFF_BYTES = 4096
_pending: set[str] = set()  # temp files being written now (removed by the CLI's Ctrl-C handler)


def discard_pending_writes() -> None:
    """Remove the temp files of writes under way: the process is about to end without finishing them."""
    for tmp in list(_pending):
        try:
            os.unlink(tmp)
        except OSError:
            pass


@contextlib.contextmanager
def removed_if_interrupted(path: Path | str) -> Iterator[None]:
    """While the block runs, a Ctrl-C (the CLI's handler, discard_pending_writes) removes `path` too: a
    file that means something only while this process works on it, such as a lock file."""
    _pending.add(str(path))
    try:
        yield
    finally:
        _pending.discard(str(path))


def existing_kind(path: Path) -> str | None:
    """What the file at `path` holds, if it is something an output of another kind must not replace:
    "plan", "recipe" (any other YAML) or "model file"; None when absent or unremarkable."""
    if not path.is_file():
        return None
    if path.name in MODEL_FILE_NAMES or path.name.endswith(".index.json") or path.suffix in MODEL_FILE_SUFFIXES:
        return "model file"
    try:
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    if PLAN_MARK in head:
        return "plan"
    if path.suffix in (".yaml", ".yml"):
        return "recipe"
    return None


def _probe(folder: Path) -> str | None:
    """Why no file can be created in `folder` (None when one can): tried, not guessed from the mode
    bits, which say nothing for root, read-only mounts or /proc and /sys."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".cugraph-accel-probe.", dir=folder)
    except OSError as err:
        return f"{folder} is not writable ({err.strerror or type(err).__name__})"
    os.close(fd)
    os.unlink(tmp)
    return None


def check_writable(path: Path | str, what: str = "file", force: bool = False, replaces: str | None = None) -> None:
    """Fail before long work, not after it, when `path` cannot be written, or when it holds a plan, a
    recipe or a model file (other than the `replaces` kind this output is) and `force` is not set."""
    path = Path(path)
    parent = next((p for p in path.parents if p.exists()), Path("."))
    problem = None
    if path.is_dir():
        problem = "it is a folder"
    elif path.exists() and not path.is_file():
        problem = "it is not a regular file"
    elif not parent.is_dir():
        problem = f"{parent} is a file, not a folder"
    else:
        problem = _probe(parent)
    if problem:
        raise BadOptionError(f"cannot write the {what} to {path}: {problem}.", "Choose another path.")
    kind = existing_kind(path)
    if kind and kind != replaces and not force:
        article = "an" if kind[0] in "aeiou" else "a"
        raise BadOptionError(
            f"{path} holds {article} {kind}; writing the {what} there would destroy it.",
            "Choose another path, or pass {force=True} to replace it.",
        )


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _mode_for(path: Path) -> int:
    """The old file's permissions, or what open() would give a new file (0644 under umask 022), never
    mkstemp's private 0600."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~_umask()


def atomic_write(path: Path | str, write: Callable[[IO], None], binary: bool = False) -> None:
    """Replace `path` with what `write(handle)` writes, in one step, keeping its permissions; on any
    failure (Ctrl-C too) the old file stays and no temp file is left."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise WriteError(f"cannot write {path}: {err.strerror or err}.", "Choose another path.") from err
    _pending.add(tmp)
    try:
        os.fchmod(fd, _mode_for(path))
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise WriteError(f"cannot write {path}: {err.strerror or err}.", "Choose another path.") from err
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        _pending.discard(tmp)


def atomic_write_text(path: Path | str, text: str) -> None:
    atomic_write(path, lambda handle: handle.write(text))
