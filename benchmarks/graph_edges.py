"""The order bias's next question (docs/PERF.md, stop 26): does a graph captured after other work on a side
stream differ in structure from `capture --fuse`'s, or only in how it runs? Captures the fused step as
`timing_gap.py --before X` does, keeps each CUDA graph (`keep_graph=True`), and counts through the CUDA
runtime its nodes by type, its edges by type and port (programmatic edges are PDL's), and its kernel
nodes' priority and memory-sync domain. Run once per --before and compare the printed totals:

    PYTHONPATH=. python3 benchmarks/graph_edges.py qwen2.5-0.5b --before nothing
    PYTHONPATH=. python3 benchmarks/graph_edges.py qwen2.5-0.5b --before side-stream

Same totals: the graphs are the same and the difference is in their execution; different: the line says
which edges or attributes the slow one lost.
"""

from __future__ import annotations

import argparse
import ctypes
import json
from collections import Counter
from pathlib import Path

import torch

NODE_TYPES = {0: "kernel", 1: "memcpy", 2: "memset", 3: "host", 4: "graph", 5: "empty", 6: "wait-event"}
NODE_TYPES |= {7: "event-record", 8: "ext-signal", 9: "ext-wait", 10: "mem-alloc", 11: "mem-free"}
NODE_TYPES |= {12: "batch-mem-op", 13: "conditional"}
EDGE_TYPES = {0: "full", 1: "programmatic"}
PORTS = {0: "completion", 1: "programmatic", 2: "launch-completion"}
PRIORITY, MEM_SYNC_DOMAIN = 8, 10  # cudaLaunchAttributeID values


class EdgeData(ctypes.Structure):  # cudaGraphEdgeData (CUDA 12.3+)
    _fields_ = [("from_port", ctypes.c_ubyte), ("to_port", ctypes.c_ubyte), ("type", ctypes.c_ubyte)]
    _fields_ += [("reserved", ctypes.c_ubyte * 5)]


class AttributeValue(ctypes.Union):  # cudaLaunchAttributeValue: 64 bytes, the int members first
    _fields_ = [("as_int", ctypes.c_int), ("pad", ctypes.c_ubyte * 64)]


def cudart() -> ctypes.CDLL:
    """The CUDA runtime torch loaded (its path read from this process's maps)."""
    torch.cuda.init()
    for line in Path("/proc/self/maps").read_text().splitlines():
        if "libcudart.so" in line:
            return ctypes.CDLL(line.split()[-1])
    return ctypes.CDLL("libcudart.so")  # linked into torch's own libraries


def edges(rt, graph: int) -> list[tuple[int, int, EdgeData]]:
    """(from node, to node, edge data) of every edge."""
    get = getattr(rt, "cudaGraphGetEdges_v2", None) or rt.cudaGraphGetEdges  # CUDA 13 dropped the _v2 name
    count = ctypes.c_size_t(0)
    check(get(ctypes.c_void_p(graph), None, None, None, ctypes.byref(count)), "cudaGraphGetEdges")
    n = count.value
    sources, targets, data = (ctypes.c_void_p * n)(), (ctypes.c_void_p * n)(), (EdgeData * n)()
    check(get(ctypes.c_void_p(graph), sources, targets, data, ctypes.byref(count)), "cudaGraphGetEdges")
    return [(sources[i], targets[i], data[i]) for i in range(count.value)]


def nodes(rt, graph: int) -> list[int]:
    count = ctypes.c_size_t(0)
    check(rt.cudaGraphGetNodes(ctypes.c_void_p(graph), None, ctypes.byref(count)), "cudaGraphGetNodes")
    found = (ctypes.c_void_p * count.value)()
    check(rt.cudaGraphGetNodes(ctypes.c_void_p(graph), found, ctypes.byref(count)), "cudaGraphGetNodes")
    return [found[i] for i in range(count.value)]


def check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} returned CUDA error {status}")


def tally(rt, graph: int) -> Counter:
    """Counts of node types, edge types and ports, and kernel nodes' priority and sync domain."""
    counts: Counter = Counter()
    kind = ctypes.c_int(0)
    for node in nodes(rt, graph):
        check(rt.cudaGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind)), "cudaGraphNodeGetType")
        name = NODE_TYPES.get(kind.value, str(kind.value))
        counts[f"node {name}"] += 1
        if name == "kernel":
            for attribute, label in ((PRIORITY, "priority"), (MEM_SYNC_DOMAIN, "sync domain")):
                value = AttributeValue()
                status = rt.cudaGraphKernelNodeGetAttribute(ctypes.c_void_p(node), attribute, ctypes.byref(value))
                counts[f"kernel {label} {value.as_int if status == 0 else 'n/a'}"] += 1
    for _, _, data in edges(rt, graph):
        edge = EDGE_TYPES.get(data.type, str(data.type))
        counts[f"edge {edge} {PORTS.get(data.from_port, data.from_port)}->{data.to_port}"] += 1
    return counts


def kept_graphs() -> list[torch.cuda.CUDAGraph]:
    """Make every torch.cuda.CUDAGraph created from here on keep its cudaGraph_t; returns the list they join."""
    made: list[torch.cuda.CUDAGraph] = []
    base = torch.cuda.CUDAGraph

    class Kept(base):
        # torch's binding reads keep_graph in __init__ (pybind11), called with the caller's own arguments:
        # __new__ alone left it False (stop 29's device call)
        def __new__(cls, keep_graph: bool = True):
            graph = super().__new__(cls, True)
            made.append(graph)
            return graph

        def __init__(self, keep_graph: bool = True):
            super().__init__(True)

    torch.cuda.CUDAGraph = Kept
    return made


def main() -> None:
    from benchmarks.timing_gap import BEFORE, fused_graphs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="model[:cache], cache 1024 by default")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--before", default="nothing", choices=BEFORE)
    parser.add_argument("--json", type=Path, help="also write each graph's counts here")
    args = parser.parse_args()
    model, _, cache = args.model.partition(":")
    made = kept_graphs()
    fused_graphs(model, int(cache or 1024), [int(b) for b in args.batches.split(",")], args.prompt, args.before)
    rt, total, per_graph = cudart(), Counter(), []
    for graph in made:  # the --before stage's own graphs are among them (tiny-*: one kernel node each)
        counts = tally(rt, graph.raw_cuda_graph())
        per_graph.append(dict(counts))
        total += counts
    print(f"{model} before {args.before}: {len(made)} graphs")
    for key in sorted(total):
        print(f"  {total[key]:7d}  {key}")
    if args.json:
        args.json.write_text(json.dumps({"before": args.before, "total": dict(total), "graphs": per_graph}, indent=1))


if __name__ == "__main__":
    main()
