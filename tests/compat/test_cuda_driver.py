"""compat/cuda_driver.py against a fake CUDA runtime: which nodes get the carveout, with which value, and a
refusal named by its call."""

import ctypes

import pytest

from accelerate_graph.compat.cuda_driver import (
    NODE_CARVEOUT,
    KernelNodeParams,
    LaunchAttributeValue,
    kernel_nodes,
    node_carveouts,
    prefer_shared_memory,
    typed_nodes,
)


class FakeRuntime:
    """Nodes 11 and 13 are kernels, 12 a memset; attributes live in a dict per (node, attribute)."""

    def __init__(self, refuse: int = 0):
        self.attributes: dict[tuple[int, int], int] = {}
        self.refuse = refuse

    def cudaGraphGetNodes(self, graph, found, count):
        if found is None:
            count._obj.value = 3
        else:
            found[0], found[1], found[2] = 11, 12, 13
        return 0

    def cudaGraphNodeGetType(self, node, kind):
        kind._obj.value = 2 if node.value == 12 else 0
        return 0

    def cudaGraphKernelNodeSetAttribute(self, node, attribute, value):
        if self.refuse:
            return self.refuse
        self.attributes[node.value, attribute] = value._obj.as_int
        return 0

    def cudaGraphKernelNodeGetAttribute(self, node, attribute, value):
        if (node.value, attribute) not in self.attributes:
            return 1
        value._obj.as_int = self.attributes[node.value, attribute]
        return 0


def test_every_kernel_node_and_no_other_asks_for_the_carveout():
    rt = FakeRuntime()
    assert typed_nodes(rt, graph=1) == [(11, "kernel"), (12, "memset"), (13, "kernel")]
    assert kernel_nodes(rt, graph=1) == [11, 13]
    assert prefer_shared_memory(1, 100, rt=rt) == 2
    assert rt.attributes == {(11, NODE_CARVEOUT): 100, (13, NODE_CARVEOUT): 100}
    assert node_carveouts(1, rt=rt) == [100, 100]


def test_a_node_the_runtime_refuses_reads_as_none_and_a_refused_set_names_the_call():
    rt = FakeRuntime()
    assert node_carveouts(1, rt=rt) == [None, None]
    with pytest.raises(
        RuntimeError,
        match=r"cudaGraphKernelNodeSetAttribute\(preferred shared memory carveout\) "
        r"returned CUDA error 801",
    ):
        prefer_shared_memory(1, 100, rt=FakeRuntime(refuse=801))


def test_the_structs_have_the_headers_layouts():
    # cudaLaunchAttributeValue is a 64-byte union; CUDA_KERNEL_NODE_PARAMS_v2: func, grid, block, shared
    # memory, kernelParams, extra, kern, ctx
    assert ctypes.sizeof(LaunchAttributeValue) == 64
    assert KernelNodeParams.kern.offset == 56 and ctypes.sizeof(KernelNodeParams) == 72
