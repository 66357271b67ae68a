"""benchmarks/graph_edges.py --functions: each kernel node's function read through a (here fake) driver."""

import ctypes

from benchmarks.graph_edges import KernelNodeParams, changed_rows, describe_function, function_rows


class FakeRuntime:
    """Two nodes: 11 a kernel, 12 a memset."""

    def cudaGraphGetNodes(self, graph, found, count):
        if found is None:
            count._obj.value = 2
        else:
            found[0], found[1] = 11, 12
        return 0

    def cudaGraphNodeGetType(self, node, kind):
        kind._obj.value = 0 if node.value == 11 else 2
        return 0


class FakeDriver:
    """A function (handle 5) whose attribute N reads N * 10 and a library kernel (handle 7) reading N."""

    def __init__(self, func: int = 5):
        self.func = func

    def cuCtxGetDevice(self, device):
        device._obj.value = 0
        return 0

    def cuGraphKernelNodeGetParams_v2(self, node, params):
        params._obj.func, params._obj.kern = (self.func, 0) if self.func else (0, 7)
        params._obj.grid[:] = [56, 2, 1]
        params._obj.block[:] = [128, 1, 1]
        params._obj.shared_mem_bytes = 4096
        return 0

    def cuFuncGetAttribute(self, value, attribute, func):
        value._obj.value = attribute * 10
        return 0

    def cuKernelGetAttribute(self, value, attribute, kern, device):
        value._obj.value = attribute
        return 0 if attribute != 9 else 1  # the carveout unreadable: '?'

    def cuFuncGetName(self, name, func):
        name._obj.value = b"skinny_kernel"
        return 0

    def cuKernelGetName(self, name, kern):
        name._obj.value = b"nvjet_sm90"
        return 0


def test_a_kernel_node_reads_as_its_function_and_its_launch():
    rows = function_rows(FakeRuntime(), FakeDriver(), graph=1)
    assert rows == [  # the memset node is not a kernel
        "skinny_kernel regs=40 static_smem=10 local=30 max_dynamic_smem=80 carveout=90 "
        "smem=4096 grid=(56, 2, 1) block=(128, 1, 1)"
    ]


def test_a_node_without_a_function_reads_through_its_library_kernel():
    params = KernelNodeParams()
    FakeDriver(func=0).cuGraphKernelNodeGetParams_v2(None, ctypes.byref(params))
    line = describe_function(FakeDriver(func=0), params, device=0)
    assert line.startswith("nvjet_sm90 regs=4 static_smem=1 local=3 max_dynamic_smem=8 carveout=? smem=4096")


def test_changes_since_capture_are_named_by_node():
    assert changed_rows(["a", "b", "c"], ["a", "b2", "c"]) == [(1, "b", "b2")]
    assert changed_rows(["a"], ["a"]) == []
    assert changed_rows(["a"], ["a", "b"]) == [(-1, "1 kernel nodes", "2 kernel nodes")]
