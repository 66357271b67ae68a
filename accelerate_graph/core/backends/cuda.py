"""Real CUDA graphs: warm up on a side stream, capture into one memory pool shared by all buckets.

With eager islands the step becomes several graphs (segments): a segment ends right before an island,
is replayed at once so the island sees real inputs, and the island runs eagerly between captures.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from accelerate_graph.common.errors import CaptureError, first_line, is_out_of_memory
from accelerate_graph.core.backends.base import CaptureStats, Step
from accelerate_graph.core.backends.islands import IslandCall, island_hooks


class CudaGraph:
    """Segments replayed in order with the islands between them (one segment when there is none)."""

    def __init__(
        self, segments: list[torch.cuda.CUDAGraph], islands: list[IslandCall], output: torch.Tensor, stats: CaptureStats
    ):
        self._segments = segments
        self._islands = islands
        self.output = output
        self.stats = stats

    def replay(self) -> torch.Tensor:
        for index, segment in enumerate(self._segments):
            segment.replay()
            if index < len(self._islands):
                self._islands[index].run()
        return self.output


class _SegmentRecorder:
    def __init__(self, pool):
        self.pool = pool
        self.segments: list[torch.cuda.CUDAGraph] = []
        self.islands: list[IslandCall] = []
        self._open: torch.cuda.CUDAGraph | None = None

    def begin(self) -> None:
        self._open = torch.cuda.CUDAGraph()
        self._open.capture_begin(pool=self.pool)

    def end(self) -> None:
        self._open.capture_end()
        self.segments.append(self._open)
        self._open = None

    def enter_island(self, call: IslandCall) -> None:
        self.end()
        self.segments[-1].replay()  # the island computes on real inputs, not on stale memory
        self.islands.append(call)

    def exit_island(self, call: IslandCall) -> None:
        self.begin()

    def abort(self) -> None:
        """End a capture that failed midway, so the stream leaves capture mode."""
        if self._open is not None:
            try:
                self._open.capture_end()
            except RuntimeError:
                pass
            self._open = None


# One capture stream per device for the whole process. On the H200 a graph captured on any stream but the
# first side stream that ran work in the process replays slower under PDL: same kernels, less overlap
# (Qwen2.5-0.5B's fused step 0.625 -> 0.641 ms at batch 1, 0.886 -> 1.005 at batch 8; no difference with
# PDL off). So bench's fused graphs, captured after the plan's by a second backend, ran slower than
# `capture --fuse`'s; sharing the stream removed it (0.622 / 0.888; docs/PERF.md, stop 26).
_CAPTURE_STREAMS: dict[torch.device, torch.cuda.Stream] = {}


def capture_stream(device: torch.device) -> torch.cuda.Stream:
    """The process's capture (and warm-up) stream on `device`, made on first use."""
    key = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
    if key not in _CAPTURE_STREAMS:
        _CAPTURE_STREAMS[key] = torch.cuda.Stream(key)
    return _CAPTURE_STREAMS[key]


def claim_capture_stream(device: torch.device) -> None:
    """Run a kernel on the capture stream now, so that it is the process's first side stream to run work
    (which stop 26's cases say is what replays fast). For processes where another stream would otherwise
    come first: a tensor-parallel rank, before NCCL's communicators run on their own streams. Prepared
    with stop 26's evidence from one GPU; not yet measured under --tp."""
    stream = capture_stream(device)
    with torch.cuda.stream(stream):
        torch.zeros(1, device=device)
    stream.synchronize()


class CudaGraphBackend:
    """One pool for every graph: capture largest bucket first so smaller ones reuse its blocks."""

    name = "cuda-graph"

    def __init__(self, device: torch.device):
        self.device = device
        self.pool = torch.cuda.graph_pool_handle()
        self.stream = capture_stream(device)

    def capture(self, step: Step, warmups: int = 2, islands: Sequence[torch.nn.Module] = ()) -> CudaGraph:
        start = time.perf_counter()
        # Warm-ups on a side stream initialise lazy state (cuBLAS handles, autotuned kernels)
        # outside the capture, as torch.cuda.graph's own docs recommend.
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream), torch.no_grad():
            for _ in range(warmups):
                step()
        torch.cuda.current_stream(self.device).wait_stream(self.stream)
        torch.cuda.synchronize(self.device)
        # Capture frees the allocator's cache first, so the difference below is the pool's growth alone.
        torch.cuda.empty_cache()
        reserved_before = torch.cuda.memory_reserved(self.device)
        recorder = _SegmentRecorder(self.pool)
        try:
            with torch.cuda.stream(self.stream), torch.no_grad():
                with island_hooks(islands, recorder.enter_island, recorder.exit_island):
                    recorder.begin()
                    output = step()
                    recorder.end()
        except RuntimeError as err:
            recorder.abort()
            if is_out_of_memory(err):
                raise
            raise CaptureError(
                f"CUDA graph capture failed: {first_line(err)}",
                "Run `cugraph-accel capture --mode piecewise` or `--mode eager`.",
            ) from err
        torch.cuda.current_stream(self.device).wait_stream(self.stream)
        torch.cuda.synchronize(self.device)
        held = torch.cuda.memory_reserved(self.device) - reserved_before
        stats = CaptureStats(seconds=time.perf_counter() - start, memory_bytes=max(held, 0))
        return CudaGraph(recorder.segments, recorder.islands, output, stats)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def release(self) -> None:
        """Give memory of graphs that were dropped back to the device; best effort, since it also
        runs after a failed capture, when the device may refuse to synchronize."""
        try:
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
        except RuntimeError:
            pass
