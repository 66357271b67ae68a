"""The order bias's next question (docs/PERF.md, stop 26): does a graph captured after other work on a side
stream differ in structure from `capture --fuse`'s, or only in how it runs? Captures the fused step as
`timing_gap.py --before X` does, keeps each CUDA graph (`keep_graph=True`), and counts through the CUDA
runtime its nodes by type, its edges by type and port (programmatic edges are PDL's), and its kernel
nodes' priority and memory-sync domain. Run once per --before and compare the printed totals:

    PYTHONPATH=. python3 benchmarks/graph_edges.py qwen2.5-0.5b --before nothing
    PYTHONPATH=. python3 benchmarks/graph_edges.py qwen2.5-0.5b --before side-stream

Same totals: the graphs are the same and the difference is in their execution; different: the line says
which edges or attributes the slow one lost.

--functions (stop 29's batch-1 bias: Qwen's 16-row graph loses PDL's overlap once a batch-1 graph is compiled
and captured after it, with the same nodes and edges): each kernel node's function read through the driver
(its name, registers, static and largest dynamic shared memory, shared-memory carveout, and the launch's
shared memory, grid and block) right after its graph's capture and again at the end; prints the nodes
whose function changed in between, and the tally of every function row (diff it across processes):

    PYTHONPATH=. CUGRAPH_ACCEL_SKINNY_BATCHES=1 python3 benchmarks/graph_edges.py qwen2.5-0.5b --batches 1,8,16,32 --functions
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


# CUfunction_attribute values read for each kernel node's function
FUNCTION_ATTRIBUTES = {"regs": 4, "static_smem": 1, "local": 3, "max_dynamic_smem": 8, "carveout": 9}


class KernelNodeParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2 (v1 is its prefix)
    _fields_ = [("func", ctypes.c_void_p), ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3)]
    _fields_ += [("shared_mem_bytes", ctypes.c_uint), ("kernel_params", ctypes.c_void_p)]
    _fields_ += [("extra", ctypes.c_void_p), ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


def driver() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


def node_params_getter(cu):
    """cuGraphKernelNodeGetParams of the v2 struct (CUDA 12 exports it as _v2; a later one may not)."""
    for name in ("cuGraphKernelNodeGetParams_v2", "cuGraphKernelNodeGetParams"):
        try:
            return getattr(cu, name)
        except AttributeError:
            continue
    raise RuntimeError("the CUDA driver has no cuGraphKernelNodeGetParams")


def function_rows(rt, cu, graph: int) -> list[str]:
    """One line per kernel node of `graph`, in node order: what its function asks of a multiprocessor and
    how the node launches it (describe_function)."""
    device = ctypes.c_int(0)
    cu.cuCtxGetDevice(ctypes.byref(device))  # stays 0 where no context is current
    get_params, kind, rows = node_params_getter(cu), ctypes.c_int(0), []
    for node in nodes(rt, graph):
        check(rt.cudaGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind)), "cudaGraphNodeGetType")
        if NODE_TYPES.get(kind.value) != "kernel":
            continue
        params = KernelNodeParams()
        status = get_params(ctypes.c_void_p(node), ctypes.byref(params))
        rows.append(describe_function(cu, params, device.value) if status == 0 else f"? (params: error {status})")
    return rows


def describe_function(cu, params: KernelNodeParams, device: int) -> str:
    """`name regs=.. static_smem=.. local=.. max_dynamic_smem=.. carveout=.. smem=.. grid=.. block=..`: the
    function's attributes (through its CUkernel where the node holds no CUfunction), then the launch's."""
    fields = []
    for label, attribute in FUNCTION_ATTRIBUTES.items():
        value = ctypes.c_int(-1)
        if params.func:
            status = cu.cuFuncGetAttribute(ctypes.byref(value), attribute, ctypes.c_void_p(params.func))
        else:
            status = cu.cuKernelGetAttribute(ctypes.byref(value), attribute, ctypes.c_void_p(params.kern), device)
        fields.append(f"{label}={value.value if status == 0 else '?'}")
    name = ctypes.c_char_p()
    if params.func:
        status = cu.cuFuncGetName(ctypes.byref(name), ctypes.c_void_p(params.func))
    else:
        status = cu.cuKernelGetName(ctypes.byref(name), ctypes.c_void_p(params.kern))
    label = name.value.decode(errors="replace")[:60] if status == 0 and name.value else "?"
    launch = f"smem={params.shared_mem_bytes} grid={tuple(params.grid)} block={tuple(params.block)}"
    return f"{label} {' '.join(fields)} {launch}"


def changed_rows(before: list[str], now: list[str]) -> list[tuple[int, str, str]]:
    """(node index, at capture, now) for every kernel node whose line differs; a node count that changed
    is one row at index -1."""
    if len(before) != len(now):
        return [(-1, f"{len(before)} kernel nodes", f"{len(now)} kernel nodes")]
    return [(i, a, b) for i, (a, b) in enumerate(zip(before, now)) if a != b]


def kept_graphs(on_capture=None) -> list[torch.cuda.CUDAGraph]:
    """Make every torch.cuda.CUDAGraph created from here on keep its cudaGraph_t (and call `on_capture` with
    it when its capture ends); returns the list they join."""
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

        def capture_end(self):
            super().capture_end()
            if on_capture is not None:
                on_capture(self)

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
    parser.add_argument("--functions", action="store_true", help="each kernel node's function, at capture and after")
    args = parser.parse_args()
    model, _, cache = args.model.partition(":")
    rt = cudart()
    cu = driver() if args.functions else None
    at_capture: dict[int, list[str]] = {}

    def read_at_capture(graph) -> None:
        at_capture[id(graph)] = function_rows(rt, cu, graph.raw_cuda_graph())

    made = kept_graphs(read_at_capture if args.functions else None)
    fused_graphs(model, int(cache or 1024), [int(b) for b in args.batches.split(",")], args.prompt, args.before)
    total, per_graph = Counter(), []
    for graph in made:  # the --before stage's own graphs are among them (tiny-*: one kernel node each)
        counts = tally(rt, graph.raw_cuda_graph())
        per_graph.append(dict(counts))
        total += counts
    print(f"{model} before {args.before}: {len(made)} graphs")
    for key in sorted(total):
        print(f"  {total[key]:7d}  {key}")
    report = {"before": args.before, "total": dict(total), "graphs": per_graph}
    if args.functions:
        report["functions"] = report_functions(rt, cu, made, at_capture)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


def report_functions(rt, cu, made: list, at_capture: dict[int, list[str]]) -> list[dict]:
    """Each graph's kernel-node functions now, against the read at its capture: prints the changes and the
    tally of every function line over all graphs."""
    every, found = Counter(), []
    for index, graph in enumerate(made):
        now, read = function_rows(rt, cu, graph.raw_cuda_graph()), at_capture.get(id(graph))
        changes = changed_rows(read if read is not None else now, now)
        every.update(now)
        found.append({"at_capture": read, "now": now, "changed": changes})
        print(f"graph {index}: {len(now)} kernel nodes, {len(changes)} changed since its capture")
        for node, before, after in changes[:6]:
            print(f"    node {node}: {before}\n          now {after}")
    print("kernel-node functions over every graph (count, line):")
    for line, count in sorted(every.items()):
        print(f"  {count:6d}  {line}")
    return found


if __name__ == "__main__":
    main()
