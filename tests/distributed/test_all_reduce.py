"""--allreduce: the choice, what every rank's environment holds, and the one-shot op under dynamo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from tp_runs import run

from accelerate_graph import settings
from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.distributed import all_reduce

PACKAGE = Path(__file__).resolve().parents[2] / "accelerate_graph"
KIND_ENV = settings.BY_NAME["allreduce"].env


def test_the_kind_comes_from_the_settings_and_is_checked():
    assert all_reduce.requested_kind() == "auto"  # the defaults, outside any settings.use
    oneshot = settings.DEFAULTS.replace(allreduce="oneshot")
    assert all_reduce.requested_kind(oneshot) == "oneshot"
    with settings.use(oneshot):
        assert all_reduce.requested_kind() == "oneshot"
    assert settings.resolve(environ={KIND_ENV: "nccl"}).allreduce == "nccl"
    with pytest.raises(BadOptionError, match=r"^The environment sets allreduce to 'ring', which is not auto, nccl or"):
        settings.resolve(environ={KIND_ENV: "ring"})


def test_auto_is_the_groups_own_collective_off_cuda():
    """No GPU: auto needs no buffer and no collective to decide (a CUDA device decides with every rank)."""
    try:
        assert all_reduce.set_up("auto", torch.device("cpu"), torch.float32) == "nccl"
        assert all_reduce.current_kind() == "nccl"
    finally:
        all_reduce.forget()


def test_every_rank_inherits_the_choice_and_runs_with_multicast_off(tmp_path):
    """Our launcher turns NVLink multicast off in every rank (NCCL, torch's symmetric memory, NVSHMEM),
    even where the caller's environment turned it on."""
    env = {KIND_ENV: "oneshot", "NCCL_NVLS_ENABLE": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "0"}
    result = run(["tests/scripts/tp_rank_env.py", str(tmp_path)], env=env)
    assert result.code == 0, result.stdout[-3000:]
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert seen == {KIND_ENV: "oneshot", **all_reduce.NO_MULTICAST_ENV, "resolved": "oneshot"}, seen


@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
        all_reduce.forget()


def test_the_one_shot_op_traces_whole_and_sums(one_rank_group):
    """Inductor (--fuse) sees our op as one opaque node: dynamo keeps it in one graph (no break), and
    AOT tracing runs its fake. Off CUDA it takes the group's own collective (one rank: the identity)."""
    assert all_reduce.set_up("oneshot", torch.device("cpu"), torch.float32) == "oneshot"
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def layer(x, w):
        return all_reduce.summed(x @ w) * 2

    x, w = torch.randn(3, 8), torch.randn(8, 8)
    out = torch.compile(layer, backend=backend, fullgraph=True)(x, w)
    assert torch.allclose(out, (x @ w) * 2)
    targets = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert any("cugraph_accel.tp_all_reduce" in t for t in targets), targets
    aot = torch.compile(layer, backend="aot_eager", fullgraph=True)(x, w)
    assert torch.allclose(aot, (x @ w) * 2)


def test_the_nccl_kind_sums_in_place(one_rank_group):
    assert all_reduce.set_up("nccl", torch.device("cpu"), torch.float32) == "nccl"
    x = torch.randn(4, 4)
    assert all_reduce.summed(x) is x


def test_no_multicast_op_is_ever_called():
    """NVLink multicast must stay off on the machines this runs on: no multimem op anywhere in the package."""
    uses = [str(p) for p in PACKAGE.rglob("*.py") if "multimem" in p.read_text(encoding="utf-8")]
    assert uses == []
