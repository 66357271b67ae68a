"""The structure of the fused step's CUDA graphs, read back through the CUDA runtime: nodes by type, edges by
type and port (programmatic edges are PDL's), and the kernel nodes' priority, memory-sync domain and
shared-memory carveout. The graphs are captured as `timing_gap.py --before X` captures them (each kept with
`keep_graph=True`): run once per --before and compare the printed totals. Same totals: the graphs are the
same and a difference in time is in their execution; different: the lines say which edges or attributes
one lost.

    PYTHONPATH=. python3 benchmarks/graph_edges.py qwen2.5-0.5b --before nothing
    PYTHONPATH=. python3 benchmarks/graph_edges.py qwen2.5-0.5b --before side-stream

--functions: each kernel node's function read through the driver (its name, registers, static and largest
dynamic shared memory, shared-memory carveout, and the launch's shared memory, grid and block) right after
its graph's capture and again at the end; prints the nodes whose function changed in between (a later
compile or capture can change what an instantiated graph's functions ask), and the tally of every function
row to diff across processes:

    PYTHONPATH=. python3 benchmarks/graph_edges.py qwen2.5-0.5b --batches 1,8,16,32 --functions --set skinny_batches=on
"""

from __future__ import annotations

import argparse
import ctypes
import json
from collections import Counter
from pathlib import Path

import torch

from accelerate_graph import settings
from accelerate_graph.common.atomic_io import atomic_write_text
from accelerate_graph.compat.cuda_driver import (
    FUNCTION_ATTRIBUTES,
    NODE_CARVEOUT,
    KernelNodeParams,
    LaunchAttributeValue,
    check,
    cudart,
    current_device,
    driver,
    function_attribute,
    kernel_node_params,
    typed_nodes,
)

EDGE_TYPES = {0: "full", 1: "programmatic"}
PORTS = {0: "completion", 1: "programmatic", 2: "launch-completion"}
PRIORITY, MEM_SYNC_DOMAIN = 8, 10  # cudaLaunchAttributeID values (NODE_CARVEOUT is 14)


class EdgeData(ctypes.Structure):  # cudaGraphEdgeData (CUDA 12.3+)
    _fields_ = [("from_port", ctypes.c_ubyte), ("to_port", ctypes.c_ubyte), ("type", ctypes.c_ubyte)]
    _fields_ += [("reserved", ctypes.c_ubyte * 5)]


def edges(rt, graph: int) -> list[tuple[int, int, EdgeData]]:
    """(from node, to node, edge data) of every edge."""
    get = getattr(rt, "cudaGraphGetEdges_v2", None) or rt.cudaGraphGetEdges  # CUDA 13 dropped the _v2 name
    count = ctypes.c_size_t(0)
    check(get(ctypes.c_void_p(graph), None, None, None, ctypes.byref(count)), "cudaGraphGetEdges")
    n = count.value
    sources, targets, data = (ctypes.c_void_p * n)(), (ctypes.c_void_p * n)(), (EdgeData * n)()
    check(get(ctypes.c_void_p(graph), sources, targets, data, ctypes.byref(count)), "cudaGraphGetEdges")
    return [(sources[i], targets[i], data[i]) for i in range(count.value)]


def tally(rt, graph: int) -> Counter:
    """Counts of node types, edge types and ports, and kernel nodes' priority and sync domain."""
    counts: Counter = Counter()
    for node, name in typed_nodes(rt, graph):
        counts[f"node {name}"] += 1
        if name == "kernel":
            for attribute, label in (
                (PRIORITY, "priority"),
                (MEM_SYNC_DOMAIN, "sync domain"),
                (NODE_CARVEOUT, "carveout"),
            ):
                value = LaunchAttributeValue()
                status = rt.cudaGraphKernelNodeGetAttribute(ctypes.c_void_p(node), attribute, ctypes.byref(value))
                counts[f"kernel {label} {value.as_int if status == 0 else 'n/a'}"] += 1
    for _, _, data in edges(rt, graph):
        edge = EDGE_TYPES.get(data.type, str(data.type))
        counts[f"edge {edge} {PORTS.get(data.from_port, data.from_port)}->{data.to_port}"] += 1
    return counts


def function_rows(rt, cu, graph: int) -> list[str]:
    """One line per kernel node of `graph`, in node order: what its function asks of a multiprocessor and
    how the node launches it (describe_function)."""
    device = current_device(cu)
    return [
        f"? (params: error {params})" if isinstance(params, int) else describe_function(cu, params, device)
        for params in kernel_node_params(rt, cu, graph)
    ]


def describe_function(cu, params: KernelNodeParams, device: int) -> str:
    """`name regs=.. static_smem=.. local=.. max_dynamic_smem=.. carveout=.. smem=.. grid=.. block=..`: the
    function's attributes (through its CUkernel where the node holds no CUfunction), then the launch's."""
    fields = []
    for label, attribute in FUNCTION_ATTRIBUTES.items():
        value = function_attribute(cu, params, attribute, device)
        fields.append(f"{label}={'?' if value is None else value}")
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
        # __new__ alone leaves it False
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
    from benchmarks.profile_step import batch_sizes, settings_given
    from benchmarks.timing_gap import BEFORE, fused_graphs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="model[:cache], cache 1024 by default")
    parser.add_argument("--batches", type=batch_sizes, default="1,8")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--before", default="nothing", choices=BEFORE)
    parser.add_argument("--json", type=Path, help="also write each graph's counts here")
    parser.add_argument("--functions", action="store_true", help="each kernel node's function, at capture and after")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a setting of the capture")
    args = parser.parse_args()
    model, _, cache = args.model.partition(":")
    rt = cudart()
    cu = driver() if args.functions else None
    at_capture: dict[int, list[str]] = {}

    def read_at_capture(graph) -> None:
        at_capture[id(graph)] = function_rows(rt, cu, graph.raw_cuda_graph())

    made = kept_graphs(read_at_capture if args.functions else None)
    with settings.use(settings_given(parser, args.set)):
        fused_graphs(model, int(cache or 1024), list(args.batches), args.prompt, args.before)
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
        atomic_write_text(args.json, json.dumps(report, indent=1))


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
