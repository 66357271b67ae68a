#!/usr/bin/env bash
# Split-K's second pass three ways (skinny_matmul.SPLIT_FINISH): finish_kernel launched plainly ("kernel",
# what ran until stop 36), with PDL ("pdl"), or no second kernel, the last slice of each block summing the
# partials itself ("here", arrival.py). Only the configs that split K take part: in the shipped table the
# 1B's and Qwen2.5-0.5B's down above batch 1 (the 8B splits nowhere).
# Why: stop 35's profile (docs/PERF.md stop 35, item 4): the finish costs 30-35 us a step at batches 2-8 and
# a kernel boundary a layer that PDL does not overlap; issue 16 asks batches 8-32 for at most 1.25x batch 1.
# One device call (DEADLINE s, default 560):
#   (1) GPU tests: test_skinny_matmul.py -m cuda -k "split or pdl", test_decode_attention.py -m cuda -k fold
#       (the attention's arrival counters moved to arrival.py);
#   (2) bench of the 1B at 16,384 and Qwen at 1,024, batches 1,8,16,32, one process per way;
#   (3) capture --fuse + verify of both with "here", lanes side by side.
# Prediction: batches 8-32 -15 to -35 us at each model with "here" (16 or 24 launches and their boundaries
# gone, a serial tail per block added), -10 to -20 with "pdl"; batch 1 unchanged (nothing splits there).
# Usage on the device machine: OUT=/some/dir bash benchmarks/split_finish_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-560} LOGS=/tmp/split-finish SHOW="passed|failed|Error|error"
source "$(dirname "$0")/deadline.sh"
run gpu-tests 60 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/fused/kernels/test_skinny_matmul.py \
  tests/fused/kernels/test_decode_attention.py -k "split or pdl or fold"
for turn in llama-3.2-1b:16384:kernel llama-3.2-1b:16384:pdl llama-3.2-1b:16384:here \
  qwen2.5-0.5b:1024:kernel qwen2.5-0.5b:1024:pdl qwen2.5-0.5b:1024:here; do
  IFS=: read -r model cache finish <<< "$turn"
  name="b-$model-$finish"
  run "$name" 40 100 env CUGRAPH_ACCEL_SPLIT_FINISH="$finish" \
    python3 -m cli bench "$model" --compare fused --context "$cache" --buckets 1,8,16,32 --csv "$FINAL/$name.csv"
done
CUGRAPH_ACCEL_SPLIT_FINISH=here OUT=$FINAL DEADLINE=$(left) REPEAT=1 \
  ENTRIES="llama-3.2-1b:16384:fused:1-8-16 | qwen2.5-0.5b:1024:fused:1-8-16" \
  bash benchmarks/realsize_repeat.sh > "$LOGS/realsize.out" 2>&1
grep -E "^verify-|^verified|failed|-fused " "$LOGS/realsize.out" | cut -c1-200
echo "== fused ms by batch: finish kernel plain, with PDL, in the last slice"
for f in "$FINAL"/b-*.csv; do python3 benchmarks/bench_lines.py "$f" | grep fused; done
