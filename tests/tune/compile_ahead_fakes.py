"""Stand-ins for CompileAhead's workers (importable by a spawned process): the "chain" is a folder and the bucket's
rows, and a job's "compile" writes a file there naming its rows, op, config and the settings it ran under."""

from __future__ import annotations

import time
from pathlib import Path


def make_chain(shapes, block, rows, device):
    return Path(shapes), rows


def compile_job(chain, op, cfg):
    from accelerate_graph import settings

    folder, rows = chain
    if op == "refused":  # a config the compiler refuses: the worker goes on with the next
        raise RuntimeError("out of resources")
    time.sleep(0.05)
    (folder / f"{rows}-{op}-{cfg.block_n}").write_text(settings.current().fp8_fold)
