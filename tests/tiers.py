"""The two test tiers: which tests are `exhaustive` (`make test-all`) rather than fast (`make test`).

The fast tier keeps at least one test of every module of accelerate_graph/ and cli/ and a representative few
of each parametrized sweep; the exhaustive tier adds the rest of each sweep, the sm_90 compile of every kernel
variant and the whole zoo. conftest.py marks the items at collection, so no test file names its tier.

A pattern is a pytest node id in which `*` matches any run of characters (and `[`, `]` are literal);
`keep` lists node ids under the pattern that stay in the fast tier.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Exhaustive:
    pattern: str
    why: str
    keep: tuple[str, ...] = ()

    def matches(self, nodeid: str) -> bool:
        return _compiled(self.pattern).fullmatch(nodeid) is not None and not any(
            _compiled(kept).fullmatch(nodeid) for kept in self.keep
        )


_cache: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    if pattern not in _cache:
        _cache[pattern] = re.compile(".*".join(re.escape(part) for part in pattern.split("*")))
    return _cache[pattern]


EXHAUSTIVE: tuple[Exhaustive, ...] = (
    Exhaustive(
        "tests/bench/test_gpu_entry.py::test_a_profile_entry_profiles_the_fp8_per_row_step",
        "compiles the tiny model's fused FP8 step on the CPU; the fast tier keeps profile_step's own tests",
    ),
    Exhaustive(
        "tests/fused/kernels/test_compiles_for_hopper.py::*",
        "compiles every kernel variant for sm_90: minutes of CPU; the kernel tests cover each kernel's code",
    ),
    Exhaustive(
        "tests/zoo/test_zoo.py::test_full_matrix_on_cpu",
        "every decoder type of transformers (make test-all sets CUGRAPH_ACCEL_FULL_ZOO); the subset stays fast",
    ),
    Exhaustive(
        "tests/fused/kernels/test_decode_attention.py::test_kernel_matches_the_reference_and_the_matmul_path[*]",
        "one interpreted child runs all the cases for any of them; the tiny-model test keeps the kernel fast",
    ),
    Exhaustive(
        "tests/fused/kernels/test_skinny_matmul.py::"
        "test_the_merged_program_runs_the_skinny_kernels_at_batch_1_where_swept[*]",
        "inductor under the interpreter, six seconds a regime; llama's table lookup stays fast, both switches on "
        "and qwen2's biases are variations of it",
        keep=("*[llama-auto-off-tuned]",),
    ),
    *(
        Exhaustive(
            f"tests/fused/kernels/test_skinny_matmul.py::{name}[*]",
            "rows 1 (the batch-1 path) and 17 (a ragged block of rows) stay fast; 3, 8 and 32 add no new code",
            keep=("*-1]", "*-17]"),
        )
        for name in ("test_norm_projections", "test_linear_residual", "test_norm_gate_up")
    ),
    Exhaustive(
        "tests/fused/kernels/test_skinny_matmul.py::test_split_k_matches_one_pass[*]",
        "a ragged K slice (72) stays fast for every op and path; the even one (128) is the easier case",
        keep=("*-72-*",),
    ),
    Exhaustive(
        "tests/fused/kernels/test_skinny_matmul.py::"
        "test_several_rows_without_tensor_cores_sum_each_row_as_one_row_does[*]",
        "split in two over five rows stays fast (the most code); one slice and two rows are its simpler cases",
        keep=("*[2-5]",),
    ),
    Exhaustive(
        "tests/fused/kernels/test_skinny_matmul.py::test_one_row_with_the_next_block_loaded_ahead_is_the_same_sum[*]",
        "a ragged last block split in two, and one block with nothing ahead, stay fast; the rest lie between",
        keep=("*[2-72]", "*[1-32]"),
    ),
    Exhaustive(
        "tests/distributed/test_tp_cpu.py::*",
        "whole commands on two rank processes (a minute each on two cores); test_tp_failures.py keeps the ranks' "
        "launch and capture fast, test_tp_units.py the split model and its emulated collectives",
    ),
    Exhaustive(
        "tests/bench/test_gpu_entry.py::test_a_suite_run_writes_one_archive_and_ends_with_its_tables",
        "gpu.sh's tests suite runs a child pytest twice; its CLI parts keep the entry script fast",
    ),
    Exhaustive(
        "tests/bench/test_gpu_entry.py::test_the_fp8_suite_writes_a_checkpoint_then_verifies_it_beside_the_fp8_entries",
        "exports, captures and verifies in children; the exporter's own tests stay fast",
    ),
    Exhaustive(
        "tests/bench/test_gpu_entry.py::test_verify_entries_capture_then_verify_repeated_and_end_with_their_table",
        "captures and verifies in a child; its CLI parts keep the entry script fast",
    ),
    Exhaustive(
        "tests/bench/test_first_token.py::test_a_failing_process_is_its_exit_and_last_line_and_exit_1",
        "a second child process; the tiny recipe's first-token run keeps the module fast",
    ),
    Exhaustive(
        "tests/fused/kernels/test_decode_attention.py::test_inductor_passes_the_cache_itself_not_a_copy",
        "inductor over the kernel's op; the grouped-attention test keeps the compiled path fast",
    ),
    Exhaustive(
        "tests/fused/kernels/test_decode_attention.py::test_the_op_compiles_once_for_every_larger_batch_and_context",
        "inductor over the op at several shapes; the grouped-attention test keeps the compiled path fast",
    ),
    Exhaustive(
        "tests/distributed/test_tp_failures.py::*",
        "rank processes that fail during capture or wait out a rendezvous timeout (15 s and more); the collective "
        "choice test keeps the ranks' launch fast, test_tp_units.py the split model",
    ),
    Exhaustive(
        "tests/bench/test_first_token.py::test_a_cpu_run_of_the_tiny_recipe_reports_its_first_token",
        "a child process through every stage (14 s); the stamps and prompts tests keep the tool's logic fast",
    ),
    Exhaustive(
        "tests/bench/test_gpu_entry.py::test_the_trained_suite_runs_only_the_parts_asked_for_on_one_model",
        "gpu.sh training the tiny model and running the verify faults' pytest in children (15 s); its CLI parts "
        "keep the entry script fast",
    ),
    Exhaustive(
        "tests/bench/test_gpu_entry.py::test_cli_parts_run_the_cli_and_keep_its_one_line_refusal_on_the_cpu",
        "gpu.sh running the CLI in children (12 s); its argument checks keep the entry script fast",
    ),
    Exhaustive(
        "tests/bench/test_bench.py::test_fused_alone_prepares_what_capture_fuse_makes_and_times_those_graphs",
        "a fused capture and bench (13 s); the CLI's fused capture and the bench's fused contender stay fast",
    ),
    Exhaustive(
        "tests/serve/test_drain.py::*",
        "a server process stopped by SIGTERM mid-request (13 s); the endpoint tests keep the server fast",
    ),
    Exhaustive(
        "tests/cli/test_first_hour.py::test_two_captures_into_one_plan_one_wins",
        "two capture processes racing for one plan (15-20 s); the plan lock's own test stays fast",
    ),
    Exhaustive(
        "tests/generate/test_generate_bench.py::test_drop_in_fused_makes_its_rows_with_the_compile_in_its_setup",
        "inductor's CPU code under the generate bench (11 s); the drop-in's fused equality with HF stays fast",
    ),
    Exhaustive(
        "tests/fused/test_contexts_and_fuse.py::test_fused_layers_under_inductor_match_eager",
        "inductor's CPU code over the layers (10 s); the CLI's fused capture, verified against eager, stays fast",
    ),
    Exhaustive(
        "tests/fused/test_causal_mask.py::test_the_fused_step_decodes_the_same_with_the_mask_kernel[*]",
        "a fused decode per architecture; llama's stays fast, qwen2 adds the biases",
        keep=("*[llama]",),
    ),
    Exhaustive(
        "tests/verify/test_non_finite.py::test_a_non_finite_top_logit_in_one_row_fails_every_case[*]",
        "a whole verify per kind and dtype; NaN in bf16 (and every GPU case) stays fast",
        keep=("*[nan_top_logit-NaN-dtype1-cpu]", "*-cuda]"),
    ),
    Exhaustive(
        "tests/verify/test_fp8_faults.py::test_*[*]",
        "a whole verify per FP8 scheme; block scales passing and a per-channel wrong scale (and the GPU) stay fast",
        keep=("*pass[fp8-block-cpu]", "*case[fp8-cpu]", "*-cuda]"),
    ),
    Exhaustive(
        "tests/verify/test_fused_faults.py::*",
        "a fused capture and a whole verify per fault (five minutes in all); a cache fault on the last layer, the "
        "refusals, the harmless fault, a block-scaled wrong scale and the GPU test stay fast",
        keep=(
            "*::test_a_fault_in_every_fused_graph_fails_every_case[skipped_write-None]",
            "*_is_refused",
            "*::test_rounding_noise_under_fuse_runs_in_full_or_is_refused",
            "*::test_garbled_padding_rows_of_a_fused_step_pass_having_run",
            "*::test_a_wrong_scale_under_fuse_fails_every_case[fp8-block]",
            "*::test_faults_in_the_compiled_fused_step_on_the_gpu_are_caught",
        ),
    ),
    Exhaustive(
        "tests/quant/test_fp8_fused.py::test_cli_fuse_with_fp8_weights_runs_the_layer_program_and_verifies",
        "inductor's CPU code over the FP8 layer program, then a verify (two minutes); the eager-backend FP8 "
        "program tests stay fast",
    ),
    Exhaustive(
        "tests/serve/test_soak.py::*",
        "2,000 requests from 64 clients: over two minutes on two cores; the scheduling tests keep the server fast",
    ),
    Exhaustive(
        "tests/verify/test_calibrated_floor.py::test_*cache*",
        "a whole verify per model, layer and noise size; 3x and 1x at layer 0 of Llama stay fast",
        keep=("*fails[llama-0]", "*passes[0-1.0]"),
    ),
    Exhaustive(
        "tests/verify/test_faults_trained.py::*",
        "a whole verify of the trained model per fault (the long runs and late slots take minutes); the faults "
        "in every graph, the left-padding ones and the clean float32 graphs stay fast",
        keep=(
            "*::test_the_correct_graphs_pass[dtype0-*",
            "*::test_a_fault_in_every_graph_fails_every_case[*",
            "*::test_a_replay_blind_to_left_padding*",
        ),
    ),
    Exhaustive(
        "tests/verify/test_faults_trained.py::test_a_fault_in_every_graph_fails_every_case[nan_cache-*-cpu]",
        "10 s of bf16 verify on the CPU; test_non_finite.py keeps a NaN cache write fast on the random tiny model",
    ),
    Exhaustive(
        "tests/serve/test_slot_engine.py::test_staggered_requests_each_equal_hf_generate_alone[*]",
        "a capture and a whole staggered run per architecture; llama's stays fast",
        keep=("*[llama]",),
    ),
    Exhaustive(
        "tests/serve/test_slot_engine.py::test_a_sliding_window_shorter_than_the_rows_applies_per_row[*]",
        "the staggered run per windowed model; mistral's (one mask) stays fast, gemma2 adds a mask per layer kind",
        keep=("*[mistral]",),
    ),
    Exhaustive(
        "tests/serve/test_slot_engine.py::test_an_eager_plan_runs_the_sessions_own_step",
        "the staggered run again without graphs; the graph runs cover the engine's code but its eager branch",
    ),
    Exhaustive(
        "tests/quant/test_fp8_matmul.py::test_kernel_matches_the_reference_under_the_interpreter[*]",
        "245 interpreted kernel cases (in one child, ~26 s for the fast few); one of each path and fold stays fast",
        keep=tuple(
            f"*[{case}]"
            for case in (  # fmt: skip
                "fma-bf16-channel-rows1",
                "fma-bf16-block-rows2",
                "dot-fp16-block-rows4",
                "swap-fp32-channel-rows5",
                "e4m3-swap-block-rows32-spread14",
                "e4m3-dot-channel-rows3-spread24",
                "split-block",
                "lookahead-channel",
                "norm-fma-bf16-channel-rows1",
                "norm-swap-split-fp16-block-rows4",
                "residual-split-bf16-channel-rows2",
                "gate_up-fma-bf16-block-rows1",
                "gate_up-swap-split-fp16-channel-rows16",
                "gate_up-e4m3-swap-split-bf16-block-rows32",
                "gate_up-e4m3-x-apart-block-rows32",
                "op-norm-rows1",
                "op-gate_up-rows4",
                "strided-norm",
                "strided-residual",
                "op-default-config-batched",
            )
        ),
    ),
    Exhaustive(
        "tests/quant/test_fp8_fused.py::test_fp8_fold_folds_the_norms_and_residuals_into_the_kernel_under_the_interpreter[*]",
        "five interpreted layer programs (30 s); the kernel cases keep each fold against its unfolded sequence fast",
    ),
    Exhaustive(
        "tests/tune/test_chain.py::test_the_one_row_chain_agrees_with_its_torch_twin_interpreted",
        "14 s of interpreted chain; the skinny kernels' own tests interpret each kernel fast",
    ),
    Exhaustive(
        "tests/tune/test_fp8_chain.py::test_the_one_row_fp8_chain_agrees_with_its_reference_twin_interpreted",
        "18 s of interpreted chain; the kernel tests interpret each fold, the fast chain tests its calls",
    ),
    Exhaustive(
        "tests/tune/test_tune_suite.py::*",
        "gpu.sh's tune suite wiring through a stand-in python3 (13 s); the tune CLI tests stay fast",
    ),
)


def tier_of(nodeid: str) -> str:
    """'exhaustive' or 'fast'."""
    return "exhaustive" if any(entry.matches(nodeid) for entry in EXHAUSTIVE) else "fast"


def unmatched(nodeids: list[str]) -> list[Exhaustive]:
    """The entries that match none of `nodeids`: a test renamed or deleted under them."""
    return [entry for entry in EXHAUSTIVE if not any(entry.matches(n) for n in nodeids)]
