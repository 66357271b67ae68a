#!/usr/bin/env bash
# Stop 34, first call: the preloaded attention on by default at batch 1 with 4 parts (decode_attention.
# PRELOADED_PARTS / PRELOADED_MAX_BATCH; stop 34 item 1 in docs/PERF.md has the measurement that chose them).
# One device call (DEADLINE s, default 560):
#   (1) tests/fused/kernels/test_decode_attention.py -m cuda, all of it;
#   (2) bench of the 1B at 16,384 and Qwen at 1,024, one process each: the default at batches 1,2,4,8,16,32
#       (the first is cold: its setup is the new code's), then CUGRAPH_ACCEL_ATTENTION_PRELOADED_BATCH=4 at
#       2,4 (is the batch limit of 1 right between 1 and 8?);
#   (3) capture --fuse + verify of the 1B, Qwen and the 8B at 4,096, lanes side by side, with
#       tests/fused/test_gpu_fused.py (whole fused models at batch 1, now on the preloaded kernel) beside them.
# Prediction: batch 1 as stop 34's first call (1B ~0.783, Qwen ~0.571), batch 8 and up unchanged; batches 2
# and 4 with the kernel: unknown (K re-read per query head: 2x / 4x batch 1's L2 traffic).
# Usage on the device machine: OUT=/some/dir bash benchmarks/preloaded_default_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-560} LOGS=/tmp/preloaded-default SHOW="passed|failed|Error|error"
source "$(dirname "$0")/deadline.sh"
run gpu-tests 60 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/fused/kernels/test_decode_attention.py
for turn in llama-3.2-1b:16384:1:1,2,4,8,16,32 llama-3.2-1b:16384:4:2,4 \
  qwen2.5-0.5b:1024:1:1,2,4,8,16,32 qwen2.5-0.5b:1024:4:2,4; do
  IFS=: read -r model cache limit buckets <<< "$turn"
  export CUGRAPH_ACCEL_ATTENTION_PRELOADED_BATCH=$limit
  run "b-$model-batch$limit" 40 100 python3 -m cli bench "$model" --compare fused --context "$cache" \
    --buckets "$buckets" --csv "$LOGS/b-$model-batch$limit.csv"
done
unset CUGRAPH_ACCEL_ATTENTION_PRELOADED_BATCH
OUT=$FINAL DEADLINE=$(left) REPEAT=1 TESTS="tests/fused/test_gpu_fused.py" \
  ENTRIES="llama-3.2-1b:16384:fused:1-8-16-32 | qwen2.5-0.5b:1024:fused:1-8-16-32 | llama-3.1-8b:4096:fused:1-8-32" \
  bash benchmarks/realsize_repeat.sh > "$LOGS/realsize.out" 2>&1
grep -E "^tests-gpu|^verify-|passed|failed|skipped|^verify |-fused " "$LOGS/realsize.out" | cut -c1-200
cp "$LOGS"/b-*.csv "$FINAL"/ 2>/dev/null
echo "== fused ms by batch: the default (preloaded at batch 1), then the kernel up to batch 4"
for f in "$LOGS"/b-*.csv; do python3 benchmarks/bench_lines.py "$f" | grep fused; done
python3 - "$LOGS"/b-*batch1.csv <<'PY'  # setup of the four buckets 1,8,16,32 (the 1B's process ran first: cold)
import csv, sys
for path in sys.argv[1:]:
    rows = [r for r in csv.DictReader(open(path)) if r["contender"] == "fused" and r["bucket"] in ("1", "8", "16", "32")]
    print(path.rsplit("/", 1)[-1], "fused setup of batches 1,8,16,32:", round(sum(float(r["setup_seconds"] or 0) for r in rows), 1), "s")
PY
