"""What the kernels' GPU tests capture: a CUDA graph of one step."""

import torch


def captured(step):
    """A CUDA graph of `step()` (warmed up on a side stream first) and the output it replays into."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()  # warm up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    return graph, out
