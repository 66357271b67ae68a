"""Two ranks started by our launcher write what they see of the allreduce setting (in the environment,
and resolved) and of NVLink multicast's switches. Run by tests/distributed/test_all_reduce.py: argv = output folder."""

import json
import os
from pathlib import Path

import typer

from accelerate_graph import settings
from accelerate_graph.distributed.all_reduce import NO_MULTICAST_ENV
from accelerate_graph.distributed.launch import run_on_ranks
from cli.errors import guarded
from cli.tp import classify


def rank_body(folder: str) -> None:
    seen = {name: os.environ.get(name) for name in [settings.BY_NAME["allreduce"].env, *NO_MULTICAST_ENV]}
    seen["resolved"] = settings.resolve().allreduce
    Path(folder, f"rank{os.environ['RANK']}.json").write_text(json.dumps(seen))


@guarded
def main(folder: str) -> None:
    raise typer.Exit(run_on_ranks(2, rank_body, {"folder": folder}, classify))


if __name__ == "__main__":
    typer.run(main)
