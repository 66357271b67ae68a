"""Who the model is: a fingerprint recorded in the plan at capture, checked at verify and bench.

A plan re-captures from MODEL; if the folder behind MODEL was replaced (another architecture, other
weights), verify would prove graphs of a model the plan never saw. The fingerprint is cheap to take
from the files alone, before any loading: the config's checksum, and for each weight file its size and
a checksum of its first and last MiB. Modification times are left out: copying a folder changes them
without changing a byte. Also here: the safetensors sanity check that names a truncated file.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

from accelerate_graph.common.errors import ModelFileError, PlanError

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
EDGE_BYTES = 1 << 20  # checksummed at each end of a weight file


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _weight_checksum(path: Path) -> str:
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as handle:
        digest.update(handle.read(EDGE_BYTES))
        if size > 2 * EDGE_BYTES:
            handle.seek(size - EDGE_BYTES)
            digest.update(handle.read(EDGE_BYTES))
    return f"{size} bytes, sha256 {digest.hexdigest()[:16]} (first and last MiB)"


def weight_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES)


def check_safetensors(path: Path) -> None:
    """Refuse a truncated or corrupt safetensors file by name, before transformers maps it (which
    fails with an anonymous error, or worse, reads past the end)."""
    size = path.stat().st_size

    def corrupt(why: str) -> ModelFileError:
        return ModelFileError(f"model file {path} is {why}.", "Copy or download it again (it may have been cut short).")

    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise corrupt(f"truncated ({size} bytes, less than a safetensors header)")
        (header_len,) = struct.unpack("<Q", head)
        if 8 + header_len > size:
            raise corrupt(f"truncated: its header says {header_len} bytes, the file has {size}")
        try:
            header = json.loads(handle.read(header_len))
        except (ValueError, UnicodeDecodeError):
            raise corrupt("corrupt: its header is not valid safetensors JSON") from None
    if not isinstance(header, dict):
        raise corrupt("corrupt: its header is not valid safetensors JSON")
    ends = [
        entry["data_offsets"][1]
        for name, entry in header.items()
        if name != "__metadata__" and isinstance(entry, dict) and len(entry.get("data_offsets", ())) == 2
    ]
    needed = 8 + header_len + max(ends, default=0)
    if needed > size:
        raise corrupt(f"truncated: its tensors need {needed} bytes, the file has {size}")


def check_weight_files(folder: Path) -> None:
    for path in weight_files(folder):
        if path.suffix == ".safetensors":
            check_safetensors(path)


def folder_fingerprint(folder: Path) -> dict:
    config = folder / "config.json"
    return {
        "config": _sha(config.read_bytes()) if config.is_file() else "",
        "weights": {p.name: _weight_checksum(p) for p in weight_files(folder)},
    }


def _recipe_fingerprint(reference: str) -> dict:
    from accelerate_graph.models.recipes import find_recipe

    recipe = find_recipe(reference)
    if recipe is None:
        return {}
    shape = {"model_type": recipe.model_type, "config": recipe.config, "seed": recipe.seed}
    return {"config": _sha(json.dumps(shape, sort_keys=True, default=str).encode()), "weights": "random, seeded"}


def hub_snapshot(reference: str, revision: str | None) -> Path | None:
    """The local cache folder of a hub model (its name is the commit), or None if not cached."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(reference, "config.json", revision=revision)
    except Exception:  # noqa: BLE001 - a malformed repo id is simply not cached
        return None
    return Path(found).parent if isinstance(found, str) else None


def model_fingerprint(reference: str, kind: str, revision: str | None = None) -> dict:
    """The fingerprint of MODEL as it is on disk now ({} when there is nothing to fingerprint)."""
    if kind == "recipe":
        return _recipe_fingerprint(reference)
    folder = Path(reference).expanduser() if kind == "folder" else hub_snapshot(reference, revision)
    if folder is None or not folder.is_dir():
        return {}
    found = folder_fingerprint(folder)
    if kind == "hub":
        found["revision"] = folder.name
    return found


def fingerprint_differences(then: dict, now: dict) -> list[str]:
    """What changed between two fingerprints, in words."""
    changes = []
    if then.get("revision") != now.get("revision"):
        changes.append(f"hub revision {then.get('revision')} is now {now.get('revision')}")
    if then.get("config") != now.get("config"):
        changes.append("its config changed")
    old, new = then.get("weights", {}), now.get("weights", {})
    if isinstance(old, dict) and isinstance(new, dict):
        for name in sorted(set(old) | set(new)):
            if name not in new:
                changes.append(f"{name} is gone")
            elif name not in old:
                changes.append(f"{name} is new")
            elif old[name] != new[name]:
                changes.append(f"{name} changed ({old[name].split(',')[0]} then, {new[name].split(',')[0]} now)")
    elif old != new:
        changes.append("its weights changed")
    return changes


def check_plan_model(plan, plan_path: Path | str) -> None:
    """The model behind a plan must still be the one it was captured from (plans without a
    fingerprint, written before it existed, are not checked)."""
    if not plan.fingerprint:
        return
    now = model_fingerprint(plan.model, plan.model_kind, plan.revision)
    if not now:
        return  # a hub model no longer in the local cache: loading it says what is wrong
    changes = fingerprint_differences(plan.fingerprint, now)
    if changes:
        raise PlanError(
            f"the model {plan.model} is not the one plan {plan_path} was captured from: {'; '.join(changes)}.",
            "Re-run `cugraph-accel capture` for this model.",
        )
