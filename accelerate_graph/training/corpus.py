"""The training text: the Python standard library's own sources, which every machine with Python has.

Files are taken in the order of their path's SHA-256 (not alphabetical, so a size cap does not keep only the
early packages); a file is held out when its path's hash says so, so the held-out split is whole files.
"""

from __future__ import annotations

import hashlib
import platform
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from accelerate_graph.common.errors import BadOptionError

HELD_OUT_ONE_IN = 20  # about 5% of the files are held out
SKIPPED_PARTS = {"site-packages", "dist-packages", "__pycache__", "idlelib", "lib2to3"}
TEST_PARTS = {"test", "tests", "idle_test"}


@dataclass(frozen=True)
class Corpus:
    train: tuple[str, ...]  # one text per file
    held_out: tuple[str, ...]
    train_files: tuple[str, ...]  # paths relative to the standard library's folder
    held_out_files: tuple[str, ...]
    sha256: str  # of every (path, text) pair taken, in order
    python: str

    @property
    def train_bytes(self) -> int:
        return sum(len(text.encode()) for text in self.train)

    @property
    def held_out_bytes(self) -> int:
        return sum(len(text.encode()) for text in self.held_out)

    def describe(self) -> dict:
        return {
            "source": "Python standard library sources",
            "python": self.python,
            "sha256": self.sha256,
            "train_files": len(self.train_files),
            "train_bytes": self.train_bytes,
            "held_out_files": len(self.held_out_files),
            "held_out_bytes": self.held_out_bytes,
        }


def stdlib_folder() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _path_hash(relative: str) -> int:
    return int.from_bytes(hashlib.sha256(relative.encode()).digest()[:8], "big")


def source_files(root: Path, include_tests: bool) -> list[str]:
    """The .py files under `root` (relative, POSIX), in the order of their path's hash."""
    skipped = SKIPPED_PARTS if include_tests else SKIPPED_PARTS | TEST_PARTS
    found = [
        path.relative_to(root).as_posix()
        for path in root.rglob("*.py")
        if path.is_file() and not skipped.intersection(path.relative_to(root).parts)
    ]
    return sorted(found, key=lambda relative: (_path_hash(relative), relative))


def load_corpus(max_bytes: int, include_tests: bool = False, root: Path | None = None) -> Corpus:
    """Up to `max_bytes` of training text and about a twentieth of that held out, by whole files."""
    root = root or stdlib_folder()
    if max_bytes <= 0:
        raise BadOptionError(f"the corpus size must be positive, not {max_bytes}.")
    held_out_cap = max(max_bytes // HELD_OUT_ONE_IN, 1)
    train: list[tuple[str, str]] = []
    held_out: list[tuple[str, str]] = []
    sizes = {"train": 0, "held_out": 0}
    digest = hashlib.sha256()
    for relative in source_files(root, include_tests):
        split, cap = ("held_out", held_out_cap) if _path_hash(relative) % HELD_OUT_ONE_IN == 0 else ("train", max_bytes)
        if sizes[split] >= cap:
            if sizes["train"] >= max_bytes and sizes["held_out"] >= held_out_cap:
                break
            continue
        try:
            text = (root / relative).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # a few files are Latin-1 or unreadable: left out by name, the same on every run
        (held_out if split == "held_out" else train).append((relative, text))
        sizes[split] += len(text.encode())
        digest.update(relative.encode() + b"\0" + text.encode() + b"\0")
    if not train or not held_out:
        raise BadOptionError(
            f"the standard library under {root} has too little source text for a corpus "
            f"({len(train)} training and {len(held_out)} held-out files).",
            "Use a Python installation with its standard library sources.",
        )
    return Corpus(
        train=tuple(text for _, text in train),
        held_out=tuple(text for _, text in held_out),
        train_files=tuple(name for name, _ in train),
        held_out_files=tuple(name for name, _ in held_out),
        sha256=digest.hexdigest(),
        python=platform.python_version(),
    )
