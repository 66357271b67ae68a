"""--tp 2 on two GPUs: NCCL all-reduces inside the CUDA graphs, replay equal to tensor-parallel eager,
and every process gone within 10 s of the work ending (destroy_process_group once hung at exit)."""

from __future__ import annotations

import pytest
import torch
import yaml
from tp_runs import cli, run

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs"),
]


def test_capture_verify_bench_at_tp2_on_two_gpus(tiny_model_dir, tmp_path):
    plan_path = tmp_path / "tp.plan.yaml"
    shape = ["--buckets", "1,8", "--max-cache-len", "256", "--prompt-len", "16", "--plan", str(plan_path)]
    captured = cli("capture", tiny_model_dir("llama"), "--tp", "2", "--dtype", "bf16", *shape)
    assert captured.code == 0, captured.stdout[-3000:]
    plan = yaml.safe_load(plan_path.read_text())
    assert plan["backend"] == "cuda-graph" and plan["tp"] == 2
    assert [r["device"] for r in plan["tp_layout"]] == ["cuda:0", "cuda:1"]
    assert captured.exit_after_last_line_s < 10, captured.exit_after_last_line_s
    verified = cli("verify", "--plan", str(plan_path))
    assert verified.code == 0 and "as close to the reference" in " ".join(verified.stdout.split()), verified.stdout[
        -3000:
    ]
    assert verified.exit_after_last_line_s < 10, verified.exit_after_last_line_s
    benched = cli("bench", "--plan", str(plan_path), "--compare", "eager,graph", "--steps", "10", "--warmup", "2")
    assert benched.code == 0, benched.stdout[-3000:]
    assert benched.exit_after_last_line_s < 10, benched.exit_after_last_line_s


def test_more_ranks_than_gpus_is_one_line(tiny_model_dir, tmp_path):
    many = str(torch.cuda.device_count() + 1)
    result = cli("capture", tiny_model_dir("llama"), "--tp", many, "--plan", str(tmp_path / "p.yaml"))
    assert result.code == 1, result.stdout[-3000:]
    errors = [line for line in result.stdout.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"--tp {many} needs {many} GPUs" in errors[0]


def test_one_shot_all_reduce_equals_nccl_eagerly_and_in_a_graph():
    """--allreduce oneshot's op on 2 GPUs: torch symmetric memory's one-shot kernel (P2P loads, no
    multicast) for decode-size messages, NCCL above the buffer; sums equal NCCL's exactly (2 ranks:
    one addition, the same in any order)."""
    import re
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run(["tests/scripts/tp_one_shot_gpu.py", str(port)])
    assert result.code == 0, result.stdout[-3000:]
    assert sorted(re.findall(r"rank \d [\w-]+", result.stdout)) == ["rank 0 one-shot-ok", "rank 1 one-shot-ok"], (
        result.stdout[-3000:]
    )
