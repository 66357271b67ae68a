"""Leave almost no GPU memory, then capture: the failure must name the bucket and free what was held.
Run in a subprocess by tests/test_gpu_reliability.py."""

import sys

import torch
import typer

from accelerate_graph.core.backends import backend_for
from accelerate_graph.core.capture import capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.models.loading import load_model
from cli.errors import guarded


def fill_gpu_leaving(gpu: torch.device, spare: int) -> list[torch.Tensor]:
    """Allocate in chunks until about `spare` bytes are free (one huge allocation can fail outright)."""
    torch.cuda.empty_cache()
    chunks, size = [], 2**30
    while size >= 2**20:
        free, _ = torch.cuda.mem_get_info(gpu)
        if free - size < spare:
            size //= 2
            continue
        try:
            chunks.append(torch.empty(size, dtype=torch.uint8, device=gpu))
        except torch.OutOfMemoryError:
            size //= 2
    return chunks


@guarded
def main() -> None:
    gpu = torch.device("cuda:0")
    session = DecodeSession(load_model("qwen2.5-0.5b", gpu, torch.bfloat16).model, 32, 256)
    backend = backend_for(gpu)  # its streams need memory too: made first, as in any real run
    ballast = fill_gpu_leaving(gpu, 48 * 2**20)  # too little for bucket 32's graph pool (~114 MiB measured)
    capture_decode_graphs(session, backend, (1, 32))
    del ballast


if __name__ == "__main__":
    try:
        main()
    except typer.Exit as done:  # what the CLI would turn into the exit code
        sys.exit(done.exit_code)
