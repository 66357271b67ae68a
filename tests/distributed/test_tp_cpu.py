"""--tp 2 end to end on the CPU: two gloo ranks, the graph emulation, a tiny llama split in two."""

from __future__ import annotations

import re

import yaml
from tp_runs import cli

TEARDOWN_LIMIT_S = 10.0


def test_capture_then_verify_at_tp2(tmp_path):
    """The built-in `tiny` recipe: random weights, drawn on each rank and then rank 0's shared."""
    plan_path = tmp_path / "tp.plan.yaml"
    common = ["--plan", str(plan_path)]
    captured = cli(
        "capture", "tiny", "--tp", "2", "--buckets", "1,4", "--max-cache-len", "64",
        "--prompt-len", "8", "--context-buckets", "full", *common,
    )  # fmt: skip
    assert captured.code == 0, captured.stdout[-3000:]
    assert "tensor parallel over 2 ranks" in captured.stdout
    assert captured.stdout.count("plan written to") == 1  # rank 0 alone speaks
    plan = yaml.safe_load(plan_path.read_text())
    assert plan["tp"] == 2 and plan["backend"] == "emulated"
    assert [r["rank"] for r in plan["tp_layout"]] == [0, 1]
    assert all(r["attention_heads"] == 2 and r["kv_heads"] == 1 for r in plan["tp_layout"])
    assert captured.exit_after_last_line_s < TEARDOWN_LIMIT_S

    verified = cli("verify", *common)  # --tp comes from the plan
    assert verified.code == 0, verified.stdout[-3000:]
    assert "re-capturing from plan" in verified.stdout
    assert "tp 2 replay vs the unsplit model (bucket 4, 8 steps)" in verified.stdout
    flat = " ".join(verified.stdout.split())
    assert re.search(r"verified: \d+ runs replaying 2 of 2 graphs .* as close to the reference", flat), flat[-2000:]
    assert "fail" not in verified.stdout
    assert verified.exit_after_last_line_s < TEARDOWN_LIMIT_S, verified.exit_after_last_line_s


def test_bench_at_tp2_floors_the_bytes_one_rank_moves_with_the_one_shot_op(tmp_path):
    """The floor and the memory bound count one rank's weights: the split layers' half, the rest whole.
    Also the --allreduce oneshot path on gloo: our op recorded in the emulated graphs, replay checked."""
    import json

    import torch

    from accelerate_graph.bench.floor import weight_bytes as floor_weight_bytes
    from accelerate_graph.core.memory import weight_bytes as held_bytes
    from accelerate_graph.models.loading import load_model

    path = tmp_path / "bench.json"
    benched = cli(
        "bench", "tiny", "--tp", "2", "--allreduce", "oneshot", "--allow-cpu", "--steps", "5", "--warmup", "1",
        "--compare", "graph", "--buckets", "1", "--json", str(path),
    )  # fmt: skip
    assert benched.code == 0, benched.stdout[-3000:]
    assert "all-reduce oneshot" in benched.stdout
    assert "FutureWarning" not in benched.stdout, benched.stdout[-3000:]
    report = json.loads(path.read_text())
    floor, memory = report["contexts"][0]["floors"][0], report["contexts"][0]["memory"]

    whole = load_model("tiny", torch.device("cpu"), torch.float32, "sdpa", None).model  # what tp 1 holds
    halved = sum(m.weight.nbytes for n, m in whole.named_modules() if n.endswith(("_proj", "lm_head"))) // 2
    assert floor["bucket"] == 1 and floor["weight_bytes"] == floor_weight_bytes(whole, 1) - halved
    assert memory["bound_parts_bytes"]["weights"] == held_bytes(whole) - halved
    assert benched.exit_after_last_line_s < TEARDOWN_LIMIT_S


def test_generate_at_tp2_gives_tp1s_greedy_tokens(tmp_path):
    import json

    ids = ["--input-ids", "1,15,27", "--input-ids", "3,4,5", "--max-new-tokens", "8"]
    runs = {}
    for tp in ("1", "2"):
        path = tmp_path / f"tp{tp}.json"
        result = cli("generate", "tiny", "--tp", tp, *ids, "--json", str(path))
        assert result.code == 0, result.stdout[-3000:]
        assert result.stdout.count("new tokens in") == 1  # rank 0 alone speaks
        runs[tp] = [row["token_ids"] for row in json.loads(path.read_text())["outputs"]]
    assert runs["2"] == runs["1"] and all(len(row) == 8 for row in runs["1"])


def test_fused_capture_at_tp2_runs_the_layer_program_with_the_ranks_summed(tmp_path):
    """--fuse at --tp 2: the written-out layer program compiles (o_proj and down_proj called as modules,
    so tensor parallel's all-reduce hooks run inside it) and replays like the unsplit model."""
    plan_path = tmp_path / "tp-fused.plan.yaml"
    common = ["--plan", str(plan_path)]
    captured = cli(
        "capture", "tiny", "--tp", "2", "--fuse", "--buckets", "1,4", "--max-cache-len", "64",
        "--prompt-len", "8", "--context-buckets", "full", *common,
    )  # fmt: skip
    assert captured.code == 0, captured.stdout[-3000:]
    assert "(the layer program, merged, rotary table, final norm kernel, mask kernel;" in captured.stdout, (
        captured.stdout[-3000:]
    )
    verified = cli("verify", *common)
    assert verified.code == 0, verified.stdout[-3000:]
    flat = " ".join(verified.stdout.split())
    assert "tp 2 replay vs the unsplit model (bucket 4, 8 steps)" in flat and ": pass" in flat, flat[-2000:]
    assert re.search(r"verified: \d+ runs replaying 2 of 2 graphs", flat), flat[-2000:]
