"""Writes a trained model's folder in one move: model, tokenizer, generation config, training.json, the
unigram counts and a held-out text sample (what tests re-measure the claim on without the corpus)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from accelerate_graph.common.atomic_io import atomic_write_text

REPORT = "training.json"
UNIGRAM = "unigram_counts.json"
HELD_OUT_SAMPLE = "held_out_sample.txt"


def write_folder(out: Path, model, tokenizer, report: dict, counts: torch.Tensor, sample: str) -> None:
    """Everything is written into a sibling temporary folder, then renamed over `out`."""
    out = out.expanduser().resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    staging.chmod(0o777 & ~umask)  # mkdtemp makes it private; the folder is the user's result
    try:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.bos_token_id = tokenizer.bos_token_id
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        atomic_write_text(staging / UNIGRAM, json.dumps(counts.tolist()) + "\n")
        atomic_write_text(staging / HELD_OUT_SAMPLE, sample)
        atomic_write_text(staging / REPORT, json.dumps(report, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def read_report(folder: Path) -> dict:
    return json.loads((Path(folder) / REPORT).read_text())
