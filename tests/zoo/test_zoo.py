"""The zoo on the CPU: a representative subset of model types through emulated capture and verify.

The subset covers what the full matrix is for: GQA (llama, qwen2), tied embeddings (gpt2, gemma), a
sliding window crossed by prompt + steps (mistral), MoE with and without one (mixtral, qwen2_moe), a
host-sync hazard that needs graph segments (mpt; falcon's host data up to transformers 5.24), ALiBi
(bloom), partial rotary (phi) and opt. The
full matrix is slow: CUGRAPH_ACCEL_FULL_ZOO=1 runs it here, benchmarks/zoo_gpu.sh runs it on the GPU.
"""

from __future__ import annotations

import json
import os

import pytest
from tiny_models import FALCON_INDEXES_WITH_LISTS
from typer.testing import CliRunner

from accelerate_graph.zoo.configs import tiny_config
from accelerate_graph.zoo.model_types import skipped_model_types, zoo_model_types
from accelerate_graph.zoo.report import (
    counts_line,
    hazard_disagreements,
    read_results,
    write_json,
    write_zoo_markdown,
)
from accelerate_graph.zoo.run import STATUSES, ZooResult, run_isolated, run_zoo
from cli.main import app

SUBSET = ["llama", "qwen2", "gpt2", "mistral", "mixtral", "qwen2_moe", "falcon", "mpt", "opt", "bloom", "phi", "gemma"]
GRAPHED = ("full", "piecewise")
# bloom's eager attention mask builds torch.tensor(0.0) inside the step on transformers 5.17 (a host-to-device
# copy on a GPU) at the model root: auto refuses graphs there; 5.24 builds it differently and graphs it whole.
NOT_GRAPHED = {"bloom": ("eager", "no-static-cache")}
PROMPT_AND_STEPS = 6 + 8  # what run_zoo_entry decodes by default
FEATURES = {
    "llama": "gqa",
    "gpt2": "tied",
    "mistral": "sliding-window",
    "mixtral": "moe",
    "qwen2_moe": "moe",
    "bloom": "alibi",
    "phi": "partial-rotary",
    "gemma": "tied",
}
# one worker runs the module: the subset fixture is the module's time, paid once rather than per worker
pytestmark = pytest.mark.xdist_group("zoo-subset")
ENVIRONMENT = {"device": "cpu", "backend": "emulated graphs", "torch": "t", "transformers": "x", "python": "p"}


@pytest.fixture(scope="module")
def subset() -> dict[str, ZooResult]:
    """The subset, in process, once for the module (about 30 s on two cores)."""
    return {r.model_type: r for r in run_zoo(SUBSET, "cpu")}


@pytest.mark.parametrize("model_type", SUBSET)
def test_subset_verifies_under_auto(subset, model_type):
    result = subset[model_type]
    if result.status in NOT_GRAPHED.get(model_type, ()):  # what it really does on this version, with why
        assert result.reason
        return
    assert result.status in GRAPHED, f"{model_type}: {result.status} ({result.reason})"
    assert result.verify_passed and result.verify_max_abs is not None and result.verify_max_abs < 1e-3
    assert not result.failed


@pytest.mark.parametrize(("model_type", "feature"), sorted(FEATURES.items()))
def test_tiny_configs_keep_the_feature_under_test(subset, model_type, feature):
    assert feature in subset[model_type].features


def test_sliding_window_is_crossed_and_fixed(subset):
    config = tiny_config("mistral")
    assert config.sliding_window < PROMPT_AND_STEPS
    assert any("sliding-window cache layer" in fix for fix in subset["mistral"].fixes)
    assert subset["mistral"].verify_passed and subset["mixtral"].verify_passed


def test_mpt_runs_graph_segments_around_its_attention(subset):
    mpt = subset["mpt"]
    assert mpt.status == "piecewise" and mpt.islands >= 1
    assert "host-sync in MptAttention" in mpt.hazards


def test_falcon_runs_graph_segments_while_it_indexes_with_lists(subset):
    falcon = subset["falcon"]
    if FALCON_INDEXES_WITH_LISTS:  # transformers up to 5.24
        assert falcon.status == "piecewise" and falcon.islands >= 1
        assert "host-data in FalconAttention" in falcon.hazards
    else:
        assert (falcon.status, falcon.islands, falcon.hazards) == ("full", 0, [])


def test_tiny_config_shrinks_each_family_by_its_own_names():
    llama = tiny_config("llama")
    assert (llama.num_hidden_layers, llama.hidden_size, llama.vocab_size, llama.num_key_value_heads) == (2, 64, 256, 2)
    gpt2 = tiny_config("gpt2")  # n_layer / n_embd through attribute_map; special tokens inside the vocab
    assert (gpt2.n_layer, gpt2.n_embd) == (2, 64) and gpt2.eos_token_id < 256
    gptj = tiny_config("gptj")
    assert gptj.rotary_dim < gptj.n_embd // gptj.n_head
    mixtral = tiny_config("mixtral")
    assert (mixtral.num_local_experts, mixtral.num_experts_per_tok) == (4, 2)
    qwen2_moe = tiny_config("qwen2_moe")  # every layer sparse
    assert qwen2_moe.decoder_sparse_step == 1 and not qwen2_moe.mlp_only_layers
    gemma3 = tiny_config("gemma3_text")  # two layers keep the sliding / full mix
    assert set(gemma3.layer_types) == {"sliding_attention", "full_attention"}


def test_encoders_and_encoder_decoders_are_skipped_with_a_reason():
    skipped = skipped_model_types()
    assert {"bert", "roberta", "bart", "whisper"} <= set(skipped)
    assert all(reason.startswith("not decoder-only") for reason in skipped.values())
    decoders = zoo_model_types()
    assert {"llama", "gpt2", "mixtral"} <= set(decoders) and not set(decoders) & set(skipped)


def test_one_entry_in_a_child_process():
    result = run_isolated("qwen2", "cpu")
    assert result.status == "full" and result.verify_passed, result.reason
    assert result.stage == "done"


def test_a_child_that_runs_too_long_is_reported_crashed():
    result = run_isolated("llama", "cpu", timeout=0.5)
    assert result.status == "crashed" and "timed out" in result.reason
    assert not result.failed  # it never got past the static cache, so it is not counted against us


def test_markdown_and_json_carry_the_counts(subset, tmp_path):
    results = [*subset.values(), ZooResult("bert", "skipped", reason="not decoder-only: an encoder")]
    write_zoo_markdown(results, tmp_path / "ZOO.md", ENVIRONMENT)
    text = (tmp_path / "ZOO.md").read_text()
    assert counts_line(results) in text
    assert "| falcon |" in text and "## Skipped: not decoder-only" in text and "- bert:" in text
    assert "transformers x" in text
    write_json(results, tmp_path / "zoo.json", ENVIRONMENT)
    assert [r.model_type for r in read_results(tmp_path / "zoo.json")] == [r.model_type for r in results]
    assert json.loads((tmp_path / "zoo.json").read_text())["counts"]["skipped"] == 1


def test_hazard_disagreements_compare_plans_not_kind_labels(tmp_path):
    cpu = [
        ZooResult("falcon", "piecewise", stage="done", mode="piecewise", hazards=["host-data in FalconAttention"]),
        ZooResult("jetmoe", "verify-failed", stage="done", mode="full"),
    ]
    gpu = [
        ZooResult(
            "falcon",
            "piecewise",
            stage="done",
            mode="piecewise",
            hazards=["host-data in FalconAttention", "device-copy in FalconAttention"],
        ),
        ZooResult("jetmoe", "piecewise", stage="done", mode="piecewise", hazards=["device-copy in JetMoeTopKGating"]),
    ]
    assert hazard_disagreements(cpu, cpu) == []
    (line,) = hazard_disagreements(gpu, cpu)  # a device copy at the same module changes no plan
    assert line.startswith("jetmoe: this run piecewise [device-copy in JetMoeTopKGating], the other full")
    write_json(gpu, tmp_path / "gpu.json", ENVIRONMENT)
    write_json(cpu, tmp_path / "cpu.json", ENVIRONMENT)
    # what `zoo --compare` does: the disagreements survive a round trip through the JSON files
    assert hazard_disagreements(read_results(tmp_path / "gpu.json"), read_results(tmp_path / "cpu.json")) == [line]
    write_zoo_markdown(gpu, tmp_path / "ZOO.md", ENVIRONMENT, 8, [line])
    assert "- jetmoe: this run piecewise" in (tmp_path / "ZOO.md").read_text()


def test_cli_zoo_prints_the_matrix_and_writes_markdown(tmp_path):
    markdown = tmp_path / "ZOO.md"
    result = CliRunner().invoke(
        app,
        [
            "zoo",
            "--types",
            "llama,mpt",
            "--device",
            "cpu",
            "--markdown",
            str(markdown),
            "--json",
            str(tmp_path / "zoo.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "full 1 / piecewise 1" in result.output
    assert "| llama |" in markdown.read_text() and "| mpt |" in markdown.read_text()


def test_cli_zoo_exits_1_when_a_type_fails_verify(monkeypatch):
    def fake_run_zoo(types, *args, on_result, **kwargs):
        results = [ZooResult(t, "verify-failed", stage="done", reason="logits differ at step 3") for t in types]
        for r in results:
            on_result(r)
        return results

    monkeypatch.setattr("accelerate_graph.zoo.run.run_zoo", fake_run_zoo)
    result = CliRunner().invoke(app, ["zoo", "--types", "llama", "--device", "cpu"])
    assert result.exit_code == 1 and "1 type(s) failed" in result.output and "llama" in result.output


def test_cli_zoo_rejects_a_compare_file_that_is_not_zoo_results(tmp_path):
    (tmp_path / "other.json").write_text("{}")
    result = CliRunner().invoke(
        app, ["zoo", "--types", "llama", "--device", "cpu", "--compare", str(tmp_path / "other.json")]
    )
    assert result.exit_code == 2 and "cannot read zoo results" in result.stderr


def test_cli_zoo_rejects_an_unknown_type():
    result = CliRunner().invoke(app, ["zoo", "--types", "llama,not_a_model", "--device", "cpu"])
    assert result.exit_code == 2 and "not_a_model" in result.stderr


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("CUGRAPH_ACCEL_FULL_ZOO") != "1", reason="set CUGRAPH_ACCEL_FULL_ZOO=1 (a minute or two)"
)
def test_full_matrix_on_cpu():
    results = run_zoo(zoo_model_types(), "cpu")
    assert all(r.status in STATUSES for r in results)
    failed = [f"{r.model_type}: {r.status} ({r.reason})" for r in results if r.failed]
    assert not failed, "\n".join(failed)
