"""Real CUDA graphs: warm up on a side stream, capture into one memory pool shared by all buckets.

With eager islands the step becomes several graphs (segments): a segment ends right before an island,
is replayed at once so the island sees real inputs, and the island runs eagerly between captures.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence

import torch

from accelerate_graph.common.errors import CaptureError, EngineWarning, first_line, is_out_of_memory
from accelerate_graph.compat.cuda_driver import prefer_shared_memory
from accelerate_graph.core.backends.base import CaptureStats, Step
from accelerate_graph.core.backends.islands import IslandCall, island_hooks
from accelerate_graph.settings import Settings, current


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


# Every kernel node of a graph above batch 1 asks for the largest shared-memory split (carveout 100): a
# multiprocessor changes its split only once drained, which PDL's early launches cannot overlap (H200,
# Qwen2.5-0.5B at batch 16: 1.093 -> 0.842 ms a replay); batch 1 is faster with the driver's splits.
def carveout_for(setting: str, batch: int) -> int | None:
    """The carveout the kernel nodes of a graph of `batch` (0: not a decode step) ask for under the
    smem_carveout setting ("auto", "off" or a percent); None: the driver's choice."""
    if setting == "auto":
        return 100 if batch > 1 else None
    if setting == "off":
        return None
    return int(setting)


def graph_asking(carveout: int | None) -> torch.cuda.CUDAGraph:
    """A graph to capture into whose kernel nodes will ask for `carveout` (None: the driver's choice): kept
    (keep_graph), so that capture_end leaves it to instantiate_asking to instantiate."""
    return torch.cuda.CUDAGraph(keep_graph=carveout is not None)


def instantiate_asking(graph: torch.cuda.CUDAGraph, carveout: int | None) -> None:
    """After graph_asking's graph's capture_end: every kernel node asks for `carveout`, then the graph is
    instantiated (with None torch instantiated it at capture_end)."""
    if carveout is None:
        return
    try:
        prefer_shared_memory(graph.raw_cuda_graph(), carveout)
    except RuntimeError as err:  # a runtime before CUDA 12.4: slower under PDL, not wrong
        warnings.warn(
            f"graphs keep the driver's shared-memory split ({first_line(err)}); "
            "set the setting smem_carveout to off to skip asking.",
            EngineWarning,
            stacklevel=3,
        )
    graph.instantiate()


class _SegmentRecorder:
    def __init__(self, pool, carveout: int | None = None):
        self.pool = pool
        self.carveout = carveout
        self.segments: list[torch.cuda.CUDAGraph] = []
        self.islands: list[IslandCall] = []
        self._open: torch.cuda.CUDAGraph | None = None
        self._stream: torch.cuda.Stream | None = None  # where the open capture began

    def begin(self) -> None:
        self._open = graph_asking(self.carveout)
        self._stream = torch.cuda.current_stream()
        self._open.capture_begin(pool=self.pool)

    def end(self) -> None:
        self._open.capture_end()
        instantiate_asking(self._open, self.carveout)
        self.segments.append(self._open)
        self._open = None

    def enter_island(self, call: IslandCall) -> None:
        self.end()
        self.segments[-1].replay()  # the island computes on real inputs, not on stale memory
        self.islands.append(call)

    def exit_island(self, call: IslandCall) -> None:
        self.begin()

    def abort(self) -> None:
        """End a capture that failed midway, so the stream leaves capture mode. torch ends a capture only on
        the stream it began on: from any other, the process stays capturing and every later CUDA call fails."""
        if self._open is not None:
            try:
                with torch.cuda.stream(self._stream):
                    self._open.capture_end()
            except RuntimeError:
                pass
            self._open = None


# One capture stream per device for the whole process: on the H200 a graph captured on any stream but the
# first side stream that ran work replays slower under PDL (Qwen2.5-0.5B fused, batch 8: 0.886 -> 1.005 ms).
_CAPTURE_STREAMS: dict[torch.device, torch.cuda.Stream] = {}


def capture_stream(device: torch.device) -> torch.cuda.Stream:
    """The process's capture (and warm-up) stream on `device`, made on first use."""
    key = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
    if key not in _CAPTURE_STREAMS:
        _CAPTURE_STREAMS[key] = torch.cuda.Stream(key)
    return _CAPTURE_STREAMS[key]


def claim_capture_stream(device: torch.device) -> None:
    """Run a kernel on the capture stream now, so that it is the process's first side stream to run work
    (what replays fast, above). For processes where another stream would otherwise come first: a
    tensor-parallel rank, before NCCL's communicators run on their own streams."""
    stream = capture_stream(device)
    with torch.cuda.stream(stream):
        torch.zeros(1, device=device)
    stream.synchronize()


class CudaGraphBackend:
    """One pool for every graph: capture largest bucket first so smaller ones reuse its blocks."""

    name = "cuda-graph"

    def __init__(self, device: torch.device, settings: Settings | None = None):
        self.device = device
        self.carveout_setting = (settings or current()).smem_carveout
        self.pool = torch.cuda.graph_pool_handle()
        self.stream = capture_stream(device)

    def capture(
        self, step: Step, warmups: int = 2, islands: Sequence[torch.nn.Module] = (), batch: int = 0
    ) -> CudaGraph:
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
        recorder = _SegmentRecorder(self.pool, carveout_for(self.carveout_setting, batch))
        try:
            with torch.cuda.stream(self.stream), torch.no_grad():
                with island_hooks(islands, recorder.enter_island, recorder.exit_island):
                    recorder.begin()
                    output = step()
                    recorder.end()
        except RuntimeError as err:
            recorder.abort()
            # The failed graph released its pool; torch 2.11's pinned-host allocator asserts (use_count > 0)
            # when a later capture begins in a released pool, so later captures take a fresh one.
            self.pool = torch.cuda.graph_pool_handle()
            if is_out_of_memory(err):
                raise
            raise CaptureError(
                f"CUDA graph capture failed: {first_line(err)}",
                "Use {mode='piecewise'} or {mode='eager'}.",
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
