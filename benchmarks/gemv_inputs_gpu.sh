#!/usr/bin/env bash
# Batch-1 GEMV inputs stored vs inlined (gemv_lowering.MATERIALIZE_INPUT) and which long reductions stay
# on cuBLAS (LONG_REDUCTION_ELEMENTS), in ONE device call (kind nvidia-h200-x2 for the tp part) under a
# deadline (DEADLINE s, default 540), most wanted first:
#   8B      profile_step llama-3.1-8b, batch 1: fused (as shipped), inputs stored, stored + GEMV for all
#   tp2     profile_tp 8B fused batch 1 oneshot: as shipped, down on cuBLAS (2^24), inputs stored
#   qwen    profile_step qwen2.5-0.5b, batches 1 and 8: fused, inputs stored
#   1b      profile_step llama-3.2-1b, batch 1: fused, inputs stored
# Kernel time per uncaptured step (profile_step) and replayed step ms (profile_tp); a table last.
# Usage on the device machine: OUT=/some/dir bash benchmarks/gemv_inputs_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s); DEADLINE=${DEADLINE:-540}
left() { echo $(( DEADLINE - ($(date +%s) - START) )); }
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-200} TRANSFORMERS_VERBOSITY=error
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
FINAL=${OUT:-/tmp/cugraph-accel-out}; LOGS=/tmp/gemv-logs; rm -rf "$LOGS"; mkdir -p "$LOGS" "$FINAL"
export TORCHINDUCTOR_CACHE_DIR="$LOGS/inductor-cache"
run() {  # NAME NEEDS_S LIMIT_S COMMAND...
  local name=$1 needs=$2 limit=$3; shift 3
  if [ "$(left)" -lt "$needs" ]; then echo "$name: skipped ($(left) s left, needs ~$needs s)"; return 0; fi
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  echo "$name: $(python3 benchmarks/timed_exit.py "$LOGS/$name.log" -- timeout "$limit" "$@")"
  grep -E "kernels,|^tp2 |failed|^error|Error" "$LOGS/$name.log" | cut -c1-400 | head -n 8
}
run 8b 150 240 python3 benchmarks/profile_step.py llama-3.1-8b --batches 1 --cache 1024 \
  --ways fused,fused-stored,fused-stored-all-gemv --top 14 --json "$LOGS/8b.json"
TP=(python3 benchmarks/profile_tp.py recipes/llama-3.1-8b.yaml --batch 1 --fuse --allreduce oneshot --top 10)
run tp2-shipped 50 100 "${TP[@]}" --json "$LOGS/tp2-shipped.json"
run tp2-down-cublas 50 100 env CUGRAPH_ACCEL_LONG_REDUCTION_ELEMENTS=16777216 "${TP[@]}" --json "$LOGS/tp2-down-cublas.json"
run tp2-stored 50 100 env CUGRAPH_ACCEL_GEMV_MATERIALIZE=1 "${TP[@]}" --json "$LOGS/tp2-stored.json"
run qwen 60 120 python3 benchmarks/profile_step.py qwen2.5-0.5b --batches 1,8 --cache 1024 --ways fused,fused-stored \
  --top 6 --json "$LOGS/qwen.json"
run 1b 40 90 python3 benchmarks/profile_step.py llama-3.2-1b --batches 1 --cache 1024 --ways fused,fused-stored \
  --top 6 --json "$LOGS/1b.json"
python3 - "$LOGS" <<'PY'
import json, sys
from pathlib import Path
logs = Path(sys.argv[1])
print(f"{'run':<48}{'kernels':>8}{'kernel us':>11}{'step ms':>9}")
for name in ("8b", "qwen", "1b"):
    path = logs / f"{name}.json"
    for r in json.loads(path.read_text()) if path.is_file() else []:
        print(f"{name + ' ' + r['way'] + ' b' + str(r['batch']) + ' s' + str(r['slots']):<48}{r['kernels']:>8.0f}{r['kernel_us']:>11.1f}{'-':>9}")
for name in ("tp2-shipped", "tp2-down-cublas", "tp2-stored"):
    path = logs / f"{name}.json"
    if path.is_file():
        r = json.loads(path.read_text())
        print(f"{name:<48}{r['kernels']:>8.0f}{r['kernel_us']:>11.1f}{r['step_ms']:>9.3f}")
PY
tar czf "$FINAL/gemv-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
echo "done in $(( $(date +%s) - START )) s"
