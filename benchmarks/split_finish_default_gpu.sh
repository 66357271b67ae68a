#!/usr/bin/env bash
# Stop 36's second call: split-K's finish with PDL as the default (skinny_matmul.SPLIT_FINISH "pdl", chosen by
# benchmarks/split_finish_gpu.sh), checked: bench of the 1B at 16,384 and Qwen at 1,024 at batches 1,8,16,32
# with the default, the 1B again with "here" (which led at batch 32 in the first call), then capture --fuse
# + verify of the 1B, Qwen and the 8B at 4,096 with the default, lanes side by side.
# Usage on the device machine: OUT=/some/dir bash benchmarks/split_finish_default_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-480} LOGS=/tmp/split-finish-default SHOW="passed|failed|Error|error"
source "$(dirname "$0")/deadline.sh"
for turn in llama-3.2-1b:16384:pdl qwen2.5-0.5b:1024:pdl llama-3.2-1b:16384:here; do
  IFS=: read -r model cache finish <<< "$turn"
  name="b-$model-$finish"
  run "$name" 40 100 env CUGRAPH_ACCEL_SPLIT_FINISH="$finish" \
    python3 -m cli bench "$model" --compare fused --context "$cache" --buckets 1,8,16,32 --csv "$FINAL/$name.csv"
done
OUT=$FINAL DEADLINE=$(left) REPEAT=1 \
  ENTRIES="llama-3.2-1b:16384:fused:1-8-16-32 | qwen2.5-0.5b:1024:fused:1-8-16-32 | llama-3.1-8b:4096:fused:1-8-32" \
  bash benchmarks/realsize_repeat.sh > "$LOGS/realsize.out" 2>&1
grep -E "^verify-|^verified|failed|-fused " "$LOGS/realsize.out" | cut -c1-200
echo "== fused ms by batch: the default (finish with PDL), the 1B with the last slice finishing"
for f in "$FINAL"/b-*.csv; do python3 benchmarks/bench_lines.py "$f" | grep fused; done
