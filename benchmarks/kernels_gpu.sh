#!/usr/bin/env bash
# One device call (~8 min): the Triton kernels (issue 16) on the H200.
#  1. their GPU tests and the fused GPU tests (the layer program runs them);
#  2. benchmarks/kernel_sweep.py: best config per shape, written where the kernels read it;
#  3. kernel profiles of the fused step: HF's layer, the layer program with the kernels, Triton attention; Qwen2.5-0.5B batches 1/8 and the 8B at 1/32;
#  4. bench fused on Qwen2.5-0.5B, buckets 1,8,16,32.
# Logs go into one tarball under $OUT with the config table beside it.
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s); DEADLINE=${DEADLINE:-560}
left() { echo $(( DEADLINE - ($(date +%s) - START) )); }
FINAL=${OUT:-/tmp/out}; WORK=/tmp/kern; mkdir -p "$WORK" "$FINAL"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=200 TRANSFORMERS_VERBOSITY=error TORCHINDUCTOR_CACHE_DIR=$WORK/inductor
echo "== tests"
timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda tests/fused/kernels tests/fused/test_gpu_fused.py > "$WORK/tests.log" 2>&1
echo "exit $?"; grep -E "^FAILED|^ERROR|passed|failed" "$WORK/tests.log" | cut -c1-250 | tail -n 12
echo "== sweep ($(left) s left)"
timeout 150 python3 benchmarks/kernel_sweep.py --budget-s 60 --write-configs "$FINAL/skinny_configs.json" > "$WORK/sweep.log" 2>&1
echo "exit $?"; grep -vE "^\s*$|^W1|skipped Skinny" "$WORK/sweep.log" | tail -n 56 | cut -c1-160
[ -f "$FINAL/skinny_configs.json" ] && cp "$FINAL/skinny_configs.json" accelerate_graph/fused/kernels/skinny_configs.json
echo "== attention sweep ($(left) s left)"
timeout 110 python3 benchmarks/attention_sweep.py --write-configs "$FINAL/attention_configs.json" > "$WORK/attn-sweep.log" 2>&1
echo "exit $?"; grep -vE "^\s*$|^W1" "$WORK/attn-sweep.log" | tail -n 32 | cut -c1-180
[ -f "$FINAL/attention_configs.json" ] && cp "$FINAL/attention_configs.json" accelerate_graph/fused/kernels/attention_configs.json
profile() {  # NAME BATCHES WAYS
  [ "$(left)" -lt 60 ] && { echo "== $1: skipped"; return; }
  echo "== profile $1 $2 $3 ($(left) s left)"
  timeout $(( $(left) - 30 )) python3 benchmarks/profile_step.py "$1" --batches "$2" --ways "$3" --cache 1024 --top 8 \
    --json "$WORK/profile-$1.json" > "$WORK/profile-$1.log" 2>&1
  grep -E "kernels,|failed|Error" "$WORK/profile-$1.log" | cut -c1-260
}
profile qwen2.5-0.5b 1,8 fused,fused-kernels,fused-matmul-attn
profile llama-3.1-8b 1,32 fused,fused-kernels,fused-matmul-attn
if [ "$(left)" -gt 90 ]; then
  echo "== bench ($(left) s left)"
  timeout $(( $(left) - 20 )) python3 -m cli bench qwen2.5-0.5b --compare fused --buckets 1,8,16,32 --context 1024 \
    --steps 50 > "$WORK/bench.log" 2>&1
  grep -E "^\s*(1|8|16|32) |fused" "$WORK/bench.log" | head -n 12
fi
tar czf "$FINAL/kern-logs.tgz" -C "$WORK" --exclude inductor . 2>/dev/null
echo "done in $(( $(date +%s) - START )) s"
