#!/usr/bin/env bash
# The skinny kernels' configs and the step's profile, one device call (DEADLINE s, default 585). Inductor's
# coordinate-descent tuning picks different GEMV configs in each process (docs/PERF.md, stop 16); the skinny
# kernels run the configs of their table. (1) SWEEP=1: a wide sweep of the skinny kernels' one-row configs,
# each op alone (8B first, then the 1B and Qwen shapes while SMALL_BUDGET lasts); (2) STEP_SWEEPS
# (model:budget_s[:rows]): the configs chosen inside a chain of decoder layers (step_sweep.py; above one
# row also timed against inductor + cuBLAS, and written only where the skinny chain wins); WHOLE_STEP_SWEEPS
# (model:budget_s:rows): configs timed in the captured step itself, the chain's fastest first
# (whole_step_sweep.py, its --candidates from benchmarks/trials/ or this call's step sweep); all write into
# the table; (3) profiles, one process per PROFILES entry (model:way[,way]) at BATCHES, each logging what
# coordinate descent tuned; (4) GPU tests (TESTS, pytest arguments), last: the deadline cuts them first.
# History: stop 17 swept the 8B and 1B shapes at batch 1 (then the skinny kernels became batch 1's default
# from a hidden size of 2,048); stop 18 measured PDL (then the default); stop 19 measured the folded combine
# (slower: off); stop 20 measured both L2 prefetches under PDL (all skinny weights, first K/V block): no
# gain, removed; the skinny kernels above batch 1 (CUGRAPH_ACCEL_SKINNY_BATCHES): half cuBLAS's speed, off;
# the rotary table (on); stop 21: the final RMSNorm as one kernel (-14 us at the 1B's batch 1: on) and
# inductor's Triton GEMM templates above batch 1 (the 1B's batch 8 1.195 -> 1.553 ms: removed); stop 22: the
# attention's splits fitted to the context bucket (no empty splits: the 1B 0.856 -> 0.860 ms, Qwen 0.670 ->
# 0.716 at batch 1; no combine up to 1,024 slots: 0.901, 0.789): removed; stop 23: the tensor-core kernels
# with the weights on the MMA's long side above batch 1 (ROW_SWEEP; the 1B's batch 8 1.263 against 1.183 ms:
# off) and Qwen's batch-1 configs swept in a step (0.634 / 0.655 against 0.663 / 0.715: on); stop 24: the
# row norms' loads at once (skinny kernels at batch 1: the 8B -55 us, the 1B -7, Qwen -3: on); stop 25: the
# one-kernel decode mask (-15 / -16 us at the 1B's / Qwen's batch 1: on), the q/k/v kernel writing the cache
# (the 1B +34 us: off), the 1B's batch-1 chain re-swept (STEP_SWEEPS="llama-3.2-1b:150": o's config, -7 us);
# stop 26: the epilogue's loads before the K walk (the 1B +27 us, Qwen -7: removed), the q/k/v epilogue with
# its loads hoisted (its kernel 119 -> 168 us a step at the 1B: hoisting reverted, the lever stays off).
# stop 27: o and down on the skinny kernels above batch 1, q/k/v and gate/up on cuBLAS (the 1B's batch 8
# 1.073 -> 1.011 ms: on at its shapes; Qwen +39 us and the 8B +866 at batch 8: cuBLAS there), and with it
# down computing silu(gate) * up itself (the 1B +164 us, Qwen +1,274: removed); stop 28: multiply-and-sum
# tiles at 8 rows (1.1-3x slower than tensor cores per op: removed), every op of Qwen on the skinny kernels
# with configs swept in a step at 8 / 16 / 32 rows (0.892 -> 0.785 ms at batch 8: on up to 8 rows; 0.928 ->
# 1.097 at 16, 0.961 -> 1.119 at 32, the step slower than its kernels: cuBLAS there), the 1B's 8 rows
# (1.011 -> 1.042: its q/k/v and gate/up stay on cuBLAS).
# The defaults now: the shipped step and cuBLAS for every op above batch 1 (fused-cublas-above-1) for the
# 1B, the shipped step for Qwen, one process each (since stop 26 one capture stream keeps ways in one
# process comparable, but one process each stays the rule), at batches 1, 8 and 32; then the GPU tests of
# the fused step, the mask, the q/k/v epilogue and the skinny kernels (~260 s alone). No step sweep by default
# (STEP_SWEEPS="llama-3.2-1b:60:8" runs the 1B's 8-row chain). Stop 29: Qwen's every-op-skinny batch 16
# is not slow for its configs (0.875 ms without a batch-1 graph in the process, 1.086 with one: PDL's
# overlap lost). Stop 30 fixed that (one shared-memory split for every kernel node above batch 1, core/
# backends/cuda.py; Qwen skinny up to 16 rows: 0.840 ms at batch 16) and the sweeps now time their chains
# with the same split. Stop 31 re-swept Qwen's 32 rows that way (STEP_SWEEPS="qwen2.5-0.5b:80:32"
# WHOLE_STEP_SWEEPS="qwen2.5-0.5b:110:32", PROFILES=" " TESTS=""; 320 s with two timing_gap runs after it):
# the step's 1.030 -> 0.992 ms in the sweep, then every op skinny 0.957 against cuBLAS's 0.958 at batch 32:
# a tie, cuBLAS kept. The carveout's percent (100 / 60 / 50) did not move 16 or 32 rows either: the 32-row
# skinny tiles are not short of L1.
# Usage on the device machine: OUT=/some/dir bash benchmarks/skinny_configs_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-585} LOGS=/tmp/batch1 SHOW="replay|kernels,|8B shapes|^total|wrote|MISMATCH|Error|error|us per layer|ms per step|against inductor|passed|failed"
source "$(dirname "$0")/deadline.sh"
TABLE=accelerate_graph/fused/kernels/skinny_configs.json
sweep() {  # NAME LIMIT MODELS BUDGET
  run "$1" 40 "$2" python3 benchmarks/kernel_sweep.py --models "$3" --rows 1 --wide --budget-s "$4" \
    --shapes down,o,qkv,gate_up --write-configs "$TABLE"
  grep -E "^(llama|qwen)" "$LOGS/$1.log" | cut -c1-130 | head -n 12
}
[ "${SWEEP:-0}" = 1 ] && sweep sweep-8b 200 llama-3.1-8b 130 && sweep sweep-small 150 llama-3.2-1b,qwen2.5-0.5b "${SMALL_BUDGET:-90}"
if [ -n "${ROW_SWEEP-}" ]; then  # models: the swapped tensor-core configs above one row, each op against cuBLAS
  run row-sweep 60 $((${ROW_BUDGET:-200} + 90)) python3 benchmarks/kernel_sweep.py --models "$ROW_SWEEP" \
    --rows "${ROWS:-8,32,16}" --swap --merged --budget-s "${ROW_BUDGET:-200}" --write-configs "$TABLE"
  grep -E "^(llama|qwen)" "$LOGS/row-sweep.log" | cut -c1-130
fi
# LOOKAHEAD=1 (batch 1): the step sweeps try only tiles that load the next K block ahead (step_sweep.py
# --lookahead) and the whole-step sweeps take their candidates from those sweeps' logs (step-trials-ahead-*)
ahead=() tag=""
[ "${LOOKAHEAD:-0}" = 1 ] && ahead=(--lookahead) tag=ahead-
for entry in ${STEP_SWEEPS-}; do
  IFS=: read -r model budget rows <<< "$entry"
  rows=${rows:-1}
  run "step-sweep-$model-$rows" 40 $((budget + 60)) python3 benchmarks/step_sweep.py "$model" --rows "$rows" \
    "${ahead[@]}" --budget-s "$budget" --write-configs "$TABLE" --log "$LOGS/step-trials-$tag$model-$rows.tsv"
done
for entry in ${WHOLE_STEP_SWEEPS-}; do  # model:budget_s:rows: configs timed in the captured step itself
  IFS=: read -r model budget rows <<< "$entry"
  trials=benchmarks/trials/step-trials-$tag$model-$rows.tsv  # the chain's ranking, where a step sweep kept one
  [ -f "$LOGS/step-trials-$tag$model-$rows.tsv" ] && trials=$LOGS/step-trials-$tag$model-$rows.tsv
  candidates=()
  [ -f "$trials" ] && candidates=(--candidates "$trials" --top "${TOP:-8}")
  run "whole-step-sweep-$model-$rows" 60 $((budget + 90)) python3 benchmarks/whole_step_sweep.py "$model" \
    --rows "$rows" --budget-s "$budget" "${candidates[@]}" --write-configs "$TABLE" \
    --log "$LOGS/whole-step-trials-$model-$rows.tsv"
done
cp "$TABLE" "$FINAL/skinny_configs.json"
# default: the shipped step and the one before it, each the first way of its own process
PROFILES=${PROFILES:-"llama-3.2-1b:fused llama-3.2-1b:fused-cublas-above-1 qwen2.5-0.5b:fused"}
n=0
for entry in $PROFILES; do
  IFS=: read -r model ways <<< "$entry"
  n=$((n + 1)) name="profile-$n-$model"
  run "$name" 60 "${PROFILE_LIMIT:-170}" python3 benchmarks/profile_step.py "$model" --batches "${BATCHES:-1,8,32}" \
    --ways "$ways" --top 8 \
    --log-tuning "$LOGS/tuning-$n.log" --json "$LOGS/$name.json"
  grep -E "^ +[0-9]" "$LOGS/$name.log" | head -n 8
done
TESTS=${TESTS-"tests/fused/kernels/test_qkv_writes_cache.py tests/fused/kernels/test_decode_mask.py
  tests/fused/test_gpu_fused.py tests/fused/kernels/test_skinny_matmul.py"}
# shellcheck disable=SC2086 # TESTS is a list of pytest arguments
[ -n "$TESTS" ] && run gpu-tests 40 300 python3 -m pytest -m cuda -q -p no:cacheprovider -rf $TESTS
tar czf "$FINAL/batch1-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
