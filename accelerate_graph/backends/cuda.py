"""Real CUDA graphs: warm up on a side stream, capture into one memory pool shared by all buckets."""

from __future__ import annotations

import time

import torch

from .base import CaptureStats, Step


class CudaGraph:
    def __init__(self, graph: torch.cuda.CUDAGraph, output: torch.Tensor, stats: CaptureStats):
        self._graph = graph
        self.output = output
        self.stats = stats

    def replay(self) -> torch.Tensor:
        self._graph.replay()
        return self.output


class CudaGraphBackend:
    """One pool for every graph: capture largest bucket first so smaller ones reuse its blocks."""

    name = "cuda-graph"

    def __init__(self, device: torch.device):
        self.device = device
        self.pool = torch.cuda.graph_pool_handle()
        self._side_stream = torch.cuda.Stream(device)

    def capture(self, step: Step, warmups: int = 2) -> CudaGraph:
        start = time.perf_counter()
        # Warm-ups on a side stream initialise lazy state (cuBLAS handles, autotuned kernels)
        # outside the capture, as torch.cuda.graph's own docs recommend.
        self._side_stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._side_stream), torch.no_grad():
            for _ in range(warmups):
                step()
        torch.cuda.current_stream(self.device).wait_stream(self._side_stream)
        torch.cuda.synchronize(self.device)
        # torch.cuda.graph empties the allocator's cache on entry; do it first so the difference
        # below is the pool's growth alone
        torch.cuda.empty_cache()
        reserved_before = torch.cuda.memory_reserved(self.device)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph, pool=self.pool):
            output = step()
        torch.cuda.synchronize(self.device)
        held = torch.cuda.memory_reserved(self.device) - reserved_before
        stats = CaptureStats(seconds=time.perf_counter() - start, memory_bytes=max(held, 0))
        return CudaGraph(graph, output, stats)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)
