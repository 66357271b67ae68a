"""CUDA runtime and driver calls that torch does not wrap, made through ctypes: walking a captured graph's
kernel nodes, reading their functions' attributes, setting each node's shared-memory carveout. Checked on
the H200 with torch 2.11's CUDA 13.0 build (the node carveout needs CUDA 12.4 or later).

Each struct mirrors a C struct of the CUDA headers (named in its comment); tests/compat/test_cuda_driver.py
runs the calls against a fake runtime and checks the layouts.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

NODE_TYPES = {0: "kernel", 1: "memcpy", 2: "memset", 3: "host", 4: "graph", 5: "empty", 6: "wait-event"}
NODE_TYPES |= {7: "event-record", 8: "ext-signal", 9: "ext-wait", 10: "mem-alloc", 11: "mem-free"}
NODE_TYPES |= {12: "batch-mem-op", 13: "conditional"}
# CUfunction_attribute values
FUNCTION_ATTRIBUTES = {"regs": 4, "static_smem": 1, "local": 3, "max_dynamic_smem": 8, "carveout": 9}


class KernelNodeParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2 (v1 is its prefix)
    _fields_ = [("func", ctypes.c_void_p), ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3)]
    _fields_ += [("shared_mem_bytes", ctypes.c_uint), ("kernel_params", ctypes.c_void_p)]
    _fields_ += [("extra", ctypes.c_void_p), ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


def check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} returned CUDA error {status}")


@functools.cache
def cudart() -> ctypes.CDLL:
    """The CUDA runtime torch loaded (its path read from this process's maps)."""
    torch.cuda.init()
    for line in Path("/proc/self/maps").read_text().splitlines():
        if "libcudart.so" in line:
            return ctypes.CDLL(line.split()[-1])
    return ctypes.CDLL("libcudart.so")  # linked into torch's own libraries


@functools.cache
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


def graph_nodes(rt, graph: int) -> list[int]:
    count = ctypes.c_size_t(0)
    check(rt.cudaGraphGetNodes(ctypes.c_void_p(graph), None, ctypes.byref(count)), "cudaGraphGetNodes")
    found = (ctypes.c_void_p * count.value)()
    check(rt.cudaGraphGetNodes(ctypes.c_void_p(graph), found, ctypes.byref(count)), "cudaGraphGetNodes")
    return [found[i] for i in range(count.value)]


def typed_nodes(rt, graph: int) -> list[tuple[int, str]]:
    """(node, its type's name in NODE_TYPES, else the number) for every node of `graph`, in node order."""
    kind, found = ctypes.c_int(0), []
    for node in graph_nodes(rt, graph):
        check(rt.cudaGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind)), "cudaGraphNodeGetType")
        found.append((node, NODE_TYPES.get(kind.value, str(kind.value))))
    return found


def kernel_nodes(rt, graph: int) -> list[int]:
    return [node for node, name in typed_nodes(rt, graph) if name == "kernel"]


def kernel_node_params(rt, cu, graph: int) -> list[KernelNodeParams | int]:
    """Each kernel node's launch parameters, in node order; a CUDA error number where they can't be read."""
    get_params, found = node_params_getter(cu), []
    for node in kernel_nodes(rt, graph):
        params = KernelNodeParams()
        status = get_params(ctypes.c_void_p(node), ctypes.byref(params))
        found.append(params if status == 0 else status)
    return found


def current_device(cu) -> int:
    device = ctypes.c_int(0)
    cu.cuCtxGetDevice(ctypes.byref(device))  # stays 0 where no context is current
    return device.value


def function_attribute(cu, params: KernelNodeParams, attribute: int, device: int) -> int | None:
    """A CUfunction_attribute of the node's function (through its CUkernel where the node holds no
    CUfunction); None where the driver refuses."""
    value = ctypes.c_int(-1)
    if params.func:
        status = cu.cuFuncGetAttribute(ctypes.byref(value), attribute, ctypes.c_void_p(params.func))
    else:
        status = cu.cuKernelGetAttribute(ctypes.byref(value), attribute, ctypes.c_void_p(params.kern), device)
    return value.value if status == 0 else None


class LaunchAttributeValue(ctypes.Union):  # cudaLaunchAttributeValue: 64 bytes, the int members first
    _fields_ = [("as_int", ctypes.c_int), ("pad", ctypes.c_ubyte * 64)]


NODE_CARVEOUT = 14  # cudaLaunchAttributePreferredSharedMemoryCarveout (CUDA 12.4+): a kernel node's own


def prefer_shared_memory(graph: int, percent: int, rt=None) -> int:
    """Ask every kernel node of `graph` for the shared-memory carveout `percent` (0: most L1, 100: most
    shared memory) through the node's own launch attribute, before the graph is instantiated: other graphs
    launching the same functions keep theirs. Returns how many nodes were set. `rt`: the runtime (tests
    pass a fake)."""
    rt, value = rt or cudart(), LaunchAttributeValue(as_int=percent)
    nodes = kernel_nodes(rt, graph)
    for node in nodes:
        status = rt.cudaGraphKernelNodeSetAttribute(ctypes.c_void_p(node), NODE_CARVEOUT, ctypes.byref(value))
        check(status, "cudaGraphKernelNodeSetAttribute(preferred shared memory carveout)")
    return len(nodes)


def node_carveouts(graph: int, rt=None) -> list[int | None]:
    """Each kernel node's carveout attribute as the runtime reads it back (None where it refuses)."""
    rt, found = rt or cudart(), []
    for node in kernel_nodes(rt, graph):
        value = LaunchAttributeValue()
        status = rt.cudaGraphKernelNodeGetAttribute(ctypes.c_void_p(node), NODE_CARVEOUT, ctypes.byref(value))
        found.append(value.as_int if status == 0 else None)
    return found
