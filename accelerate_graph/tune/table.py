"""The user's tuning table: what `tune` chose merged into the file, never losing an entry, written atomically."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from accelerate_graph.common.atomic_io import atomic_write_text, check_writable
from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.fused.kernels import configs
from accelerate_graph.fused.kernels.configs import SkinnyConfig

WRITTEN_BY = "cugraph-accel tune"


def table_text(entries: dict[str, SkinnyConfig], device: str, swept_with: dict[str, str]) -> str:
    """The JSON a table holds: the device it is for, the versions it was swept with (as information: a table
    keeps serving after an upgrade), and its entries by key."""
    body = {
        "device": device,
        "swept_with": dict(sorted(swept_with.items())),
        "written_by": WRITTEN_BY,
        "entries": {key: dataclasses.asdict(cfg) for key, cfg in sorted(entries.items())},
    }
    return json.dumps(body, indent=1) + "\n"


def table_device(path: Path) -> str | None:
    """The device a readable table at `path` names (None when absent or unreadable)."""
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("device")
    except (OSError, ValueError, AttributeError):
        return None


def check_target(path: Path, device: str, force: bool) -> None:
    """Before any sweep: `path` can be written, and what it holds now can be merged into (a table of this device
    that reads), unless `force` replaces it."""
    check_writable(path, "tuning table", force)
    if force or not path.exists():
        return
    configs.read_table(path)  # configs.TableError when it does not read
    found = table_device(path)
    if found != device:
        raise BadOptionError(
            f"{path} is a tuning table for {found or 'an unnamed device'}, not for {device}.",
            "Choose another {out}, or pass {force=True} to replace it.",
        )


def merge_into(
    path: Path, chosen: dict[str, SkinnyConfig], device: str, swept_with: dict[str, str], force: bool = False
) -> tuple[int, int]:
    """`chosen` merged into the table at `path` (its other entries kept; with `force` a table that cannot be
    merged into is replaced), written atomically. Returns (entries added, entries changed)."""
    kept: dict[str, SkinnyConfig] = {}
    if path.exists():
        try:
            check_target(path, device, force=False)
            kept = configs.read_table(path)
        except (BadOptionError, configs.TableError):
            if not force:
                raise
    added = sum(key not in kept for key in chosen)
    changed = sum(key in kept and kept[key] != cfg for key, cfg in chosen.items())
    atomic_write_text(path, table_text({**kept, **chosen}, device, swept_with))
    return added, changed
