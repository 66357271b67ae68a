"""Two ranks run the real `capture` body; rank 1 fails inside its first capture while rank 0 is in
the same capture, waiting for rank 1 in the step's all-reduces. Run by tests/distributed/test_tp_failures.py:
argv = model folder, plan path, pid folder. Exit code and stderr are what the test reads."""

import os
from pathlib import Path

import torch
import typer

from accelerate_graph.distributed.launch import run_on_ranks
from cli.capture_cmd import capture
from cli.errors import guarded
from cli.tp import classify


def rank_body(model: str, plan: str, pids: str) -> None:
    Path(pids, f"{os.getpid()}.pid").write_text("")  # the test checks that every rank process is gone
    if os.environ["RANK"] == "1":
        from accelerate_graph.core.backends.emulated import EmulatedBackend

        real = EmulatedBackend.capture

        def failing(self, step, warmups=2, islands=(), batch=0):
            with torch.no_grad():
                step()  # one step with its all-reduces: rank 0 is now inside the same capture
            raise RuntimeError("injected failure on rank 1 during capture")

        EmulatedBackend.capture = failing
        assert real is not None
    capture.__wrapped__(
        model=model, buckets="1,2", max_cache_len=32, prompt_len=4, contexts="full", plan=Path(plan), tp=2
    )


@guarded
def main(model: str, plan: str, pids: str) -> None:
    code = run_on_ranks(2, rank_body, {"model": model, "plan": plan, "pids": pids}, classify)
    raise typer.Exit(code)


if __name__ == "__main__":
    typer.run(main)
