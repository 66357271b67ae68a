"""The pieces of --tp that need no second process: the split, its refusals, device counts, the plan."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch
from tiny_models import tiny_decoder
from tp_runs import ROOT

from accelerate_graph.common.errors import BadOptionError, DeviceError, UnsupportedModelError
from accelerate_graph.distributed import launch, rank
from accelerate_graph.distributed.sharding import shard_model


def test_split_keeps_slice_r_of_each_layer():
    full, half = tiny_decoder("llama"), tiny_decoder("llama")
    layout = shard_model(half, 1, 2, "tiny")
    q_full, q_half = full.model.layers[0].self_attn.q_proj, half.model.layers[0].self_attn.q_proj
    assert torch.equal(q_half.weight, q_full.weight[32:]) and q_half.out_features == 32
    down_full, down_half = full.model.layers[1].mlp.down_proj, half.model.layers[1].mlp.down_proj
    assert torch.equal(down_half.weight, down_full.weight[:, 64:]) and down_half.in_features == 64
    assert torch.equal(half.lm_head.weight, full.lm_head.weight[128:])  # vocabulary rows 128-255
    assert layout == {
        "rank": 1, "split_layers": 15, "lm_head": "split", "attention_heads": 2, "kv_heads": 1,
        "all_reduce": "nccl", "weight_bytes": sum(p.numel() * 4 for p in half.parameters()),
    }  # fmt: skip


def test_a_rank_holds_and_a_step_reads_only_its_share():
    """Each split weight is half its bytes on a rank, in memory (its storage: a row slice kept as a view
    would keep the whole weight) and in the floor; the embedding, norms and the like stay whole."""
    from accelerate_graph.bench.floor import weight_bytes as floor_weight_bytes
    from accelerate_graph.core.memory import weight_bytes as held_bytes

    full, half = tiny_decoder("llama"), tiny_decoder("llama")
    split = [m for n, m in full.named_modules() if n.endswith(("_proj", "lm_head"))]
    assert len(split) == 15
    halved = sum(m.weight.nbytes for m in split) // 2
    shard_model(half, 0, 2, "tiny")
    assert held_bytes(half) == held_bytes(full) - halved
    for batch in (1, 8):
        assert floor_weight_bytes(half, batch) == floor_weight_bytes(full, batch) - halved
    assert floor_weight_bytes(half, 1) < 0.6 * floor_weight_bytes(full, 1)


def test_a_head_tied_to_the_embedding_stays_whole():
    full, half = tiny_decoder("llama", tie_word_embeddings=True), tiny_decoder("llama", tie_word_embeddings=True)
    assert shard_model(half, 0, 2, "tiny")["lm_head"] == "whole"
    assert torch.equal(half.lm_head.weight, full.lm_head.weight)
    assert half.lm_head.weight.data_ptr() == half.model.embed_tokens.weight.data_ptr()


@pytest.mark.parametrize(
    ("overrides", "world", "needle"),
    [
        ({}, 3, "4 attention heads (num_attention_heads), which do not split evenly over 3 ranks"),
        ({}, 4, "2 KV heads (num_key_value_heads), which do not split evenly over 4 ranks"),
    ],
)
def test_heads_must_divide(overrides, world, needle):
    with pytest.raises(UnsupportedModelError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        shard_model(tiny_decoder("llama", **overrides), 0, world, "tiny")


def test_model_without_a_plan_is_refused():
    model = tiny_decoder("gpt2", n_embd=64, n_layer=1, n_head=4)
    with pytest.raises(UnsupportedModelError, match=r"tiny-gpt2 \(gpt2\) has no tensor-parallel plan.*tp=1"):
        shard_model(model, 0, 2, "tiny-gpt2")


def test_more_ranks_than_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    rank.check_world_fits(2, "cuda")
    rank.check_world_fits(5, "cpu")  # gloo: processes share the CPU
    with pytest.raises(DeviceError, match=r"tp=3 needs 3 GPUs, but 2 are visible\. Use tp=2 or fewer"):
        rank.check_world_fits(3, "cuda")


def test_tp_must_match_torchrun_world_size(monkeypatch):
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(BadOptionError, match=r"^tp=2 does not match this torchrun's WORLD_SIZE=1\. Use tp=1\.$"):
        rank.join(2, torch.device("cpu"))
    assert rank.current() is None


def test_verdict_prefers_our_first_error_over_its_echo():
    reports = [
        launch.RankReport(0, 1, "unexpected RuntimeError: Connection closed by peer", False, at=2.0),
        launch.RankReport(1, 1, "capturing bucket 2 failed", True, at=1.0),
    ]
    with pytest.raises(Exception, match="^rank 1: capturing bucket 2 failed$"):
        launch._verdict(reports, None)
    assert (
        launch._verdict([launch.RankReport(0, 1), launch.RankReport(1, 1)], (0, 1)) == 1
    )  # verify's own table said it
    assert launch._verdict([launch.RankReport(0, 0), launch.RankReport(1, 0)], None) == 0


def test_emulation_replays_collectives():
    port = str(23000 + __import__("os").getpid() % 20000)
    result = subprocess.run(
        [sys.executable, "tests/scripts/tp_collective_replay.py", port],
        cwd=ROOT, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(re.findall(r"rank \d replay-\w+", result.stdout)) == ["rank 0 replay-ok", "rank 1 replay-ok"]


def test_max_memory_is_refused_before_any_rendezvous():
    from accelerate_graph.pipeline import CaptureRequest, prepare

    with pytest.raises(BadOptionError, match="max_memory_mib with tp is not supported"):
        prepare(CaptureRequest(model="tiny", device="cpu", tp=2, max_memory_mib=64.0))
    assert rank.current() is None


def test_finding_live_cuda_graphs_does_not_touch_deprecated_module_objects():
    """isinstance() over gc.get_objects() read torch.distributed.reduce_op's attributes, which warns
    (FutureWarning on every --tp run's teardown); the scan by type finds the same objects silently."""
    import warnings

    import torch.distributed as dist

    from accelerate_graph.distributed.teardown import live_instances

    class Graph:  # stands for torch.cuda.CUDAGraph, which a CPU build cannot make
        pass

    class Subclass(Graph):
        pass

    made = [Graph(), Subclass()]
    assert dist.reduce_op is not None  # alive, and tracked by the collector
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = live_instances(Graph)
    assert sorted(map(id, found)) == sorted(map(id, made))
