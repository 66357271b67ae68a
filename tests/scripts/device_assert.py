"""Drive a replay past the end of the static cache (a device-side assert on the GPU) through the CLI's
error handling: run in a subprocess by tests/test_gpu_reliability.py, since the CUDA context dies."""

import sys

import torch
import typer

from accelerate_graph.core.backends import backend_for
from accelerate_graph.core.capture import capture_decode_graphs
from accelerate_graph.core.decode_session import DecodeSession
from accelerate_graph.models.loading import load_model
from cli.errors import guarded


@guarded
def main() -> None:
    gpu = torch.device("cuda:0")
    session = DecodeSession(load_model("tiny", gpu, torch.float32).model, 2, 16)
    graphs = capture_decode_graphs(session, backend_for(gpu), (2,))
    for position in session.kv.positions():  # the device's write slot one past the last, behind the
        position.fill_(16)  # host's back (which would refuse a full cache before replaying)
    graphs.run(torch.tensor([1, 2], device=gpu), torch.tensor([16, 16], device=gpu))
    torch.cuda.synchronize()


if __name__ == "__main__":
    try:
        main()
    except typer.Exit as done:  # what the CLI would turn into the exit code
        sys.exit(done.exit_code)
