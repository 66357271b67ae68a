#!/usr/bin/env bash
# Batch-1 GEMVs, one device call (DEADLINE s, default 585). Inductor's coordinate-descent tuning picks
# different GEMV configs in each process (docs/PERF.md, stop 16); the skinny kernels run the configs of
# their table. (1) SWEEP=1: a wide sweep of the skinny kernels' one-row configs, each op alone (8B first,
# then the 1B and Qwen shapes while SMALL_BUDGET lasts); (2) STEP_SWEEPS (model:budget_s): the one-row
# configs chosen inside a chain of decoder layers (step_sweep.py); both write into the table; (3)
# profiles, one process per PROFILES entry (model:way[,way]) at BATCHES (default 1; "1,8" adds batch 8), each
# logging what coordinate descent tuned.
# 2026-12-01 (stop 17) it swept the 8B and 1B shapes (then the skinny kernels became batch 1's default from
# a hidden size of 2,048); stop 18 measured PDL with it (then PDL became the default). The defaults now:
# the PDL and folded-combine GPU tests, no sweep (STEP_SWEEPS="qwen2.5-0.5b:90" sweeps Qwen's), and each
# model with the attention's combine folded into its split kernel and without (Qwen also with the skinny
# kernels at batch 1, now that its table is step-swept).
# Usage on the device machine: OUT=/some/dir bash benchmarks/batch1_configs_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-585} LOGS=/tmp/batch1 SHOW="replay|kernels,|8B shapes|^total|wrote|MISMATCH|Error|error|us per layer|passed|failed"
source "$(dirname "$0")/deadline.sh"
TABLE=accelerate_graph/fused/kernels/skinny_configs.json
sweep() {  # NAME LIMIT MODELS BUDGET
  run "$1" 40 "$2" python3 benchmarks/kernel_sweep.py --models "$3" --rows 1 --wide --budget-s "$4" \
    --shapes down,o,qkv,gate_up --write-configs "$TABLE"
  grep -E "^(llama|qwen)" "$LOGS/$1.log" | cut -c1-130 | head -n 12
}
run pdl-tests 40 120 python3 -m pytest -m cuda -q -p no:cacheprovider -rf -k "pdl or folded" \
  tests/fused/kernels/test_skinny_matmul.py tests/fused/kernels/test_decode_attention.py
[ "${SWEEP:-0}" = 1 ] && sweep sweep-8b 200 llama-3.1-8b 130 && sweep sweep-small 150 llama-3.2-1b,qwen2.5-0.5b "${SMALL_BUDGET:-90}"
for entry in ${STEP_SWEEPS:-}; do
  IFS=: read -r model budget <<< "$entry"
  run "step-sweep-$model" 40 $((budget + 60)) python3 benchmarks/step_sweep.py "$model" --budget-s "$budget" \
    --write-configs "$TABLE" --log "$LOGS/step-trials-$model.tsv"
done
cp "$TABLE" "$FINAL/skinny_configs.json"
PROFILES=${PROFILES:-"llama-3.1-8b:fused llama-3.1-8b:fused-fold-combine llama-3.2-1b:fused,fused-fold-combine \
qwen2.5-0.5b:fused,fused-fold-combine,fused-skinny-b1"}
n=0
for entry in $PROFILES; do
  IFS=: read -r model ways <<< "$entry"
  n=$((n + 1)) name="profile-$n-$model"
  run "$name" 60 "${PROFILE_LIMIT:-125}" python3 benchmarks/profile_step.py "$model" --batches "${BATCHES:-1}" \
    --ways "$ways" --top 8 \
    --log-tuning "$LOGS/tuning-$n.log" --json "$LOGS/$name.json"
  grep -E "^ +[0-9]" "$LOGS/$name.log" | head -n 8
done
tar czf "$FINAL/batch1-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
