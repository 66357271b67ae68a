"""Leave almost no GPU memory, then capture: the failure must name the bucket and free what was held.
Run in a subprocess by tests/test_gpu_reliability.py."""

import sys

import torch
import typer

from accelerate_graph.backends import backend_for
from accelerate_graph.capture import capture_decode_graphs
from accelerate_graph.decode_session import DecodeSession
from accelerate_graph.loading import load_model
from cli.errors import guarded


@guarded
def main() -> None:
    gpu = torch.device("cuda:0")
    session = DecodeSession(load_model("qwen2.5-0.5b", gpu, torch.bfloat16).model, 32, 256)
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info(gpu)
    # leave ~48 MiB: too little for bucket 32's graph pool (~114 MiB measured)
    ballast = torch.empty(free - 48 * 2**20, dtype=torch.uint8, device=gpu)  # noqa: F841 - holds the memory
    capture_decode_graphs(session, backend_for(gpu), (1, 32))


if __name__ == "__main__":
    try:
        main()
    except typer.Exit as done:  # what the CLI would turn into the exit code
        sys.exit(done.exit_code)
