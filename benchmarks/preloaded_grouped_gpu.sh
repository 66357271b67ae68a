#!/usr/bin/env bash
# Prepared in stop 35, NOT run on a GPU: the preloaded attention's grouped form above batch 1 (decode_attention.
# _decode_preloaded_kernel with HEADS = the group: one program per row, K/V head and part of the head dimension
# takes the group's query heads one after the other over one K/V tile loaded before the PDL wait; no split, no
# combine; CUGRAPH_ACCEL_ATTENTION_PRELOADED_GROUPED = the largest batch that takes it, 0 off by default).
# Why: stop 35's profile (docs/PERF.md stop 35, item 4): at batches 2-8 the split kernel and its combine cost
# 93-105 us a step at the 1B (bucket 256) against batch 1's preloaded 69, and 103-109 at Qwen; the ungrouped
# preloaded kernel lost at batch 8 because each query head re-read its K/V head's tile (stop 34 item 1).
# One device call (DEADLINE s, default 560):
#   (1) GPU tests: test_decode_attention.py -m cuda -k "grouped or preloaded or inside_inductor";
#   (2) bench of the 1B at 16,384 and Qwen at 1,024, batches 1,2,4,8,16, one process per way: grouped off,
#       grouped up to 16 (4 parts), grouped up to 16 with 1 part (CUGRAPH_ACCEL_ATTENTION_PRELOADED=1: K read
#       once a group, not once a part; batch 1 then runs 1 part too);
#   (3) capture --fuse + verify of both with grouped up to 16, lanes side by side.
# Prediction: batches 2-8 -20 to -40 us at each model (the combine's 19-31 us and a kernel boundary a layer
# gone), batch 16 unknown (its bucket-256 programs: 16 rows x K/V heads x parts), batch 1 unchanged (4 parts).
# Usage on the device machine: OUT=/some/dir bash benchmarks/preloaded_grouped_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-560} LOGS=/tmp/preloaded-grouped SHOW="passed|failed|Error|error"
source "$(dirname "$0")/deadline.sh"
run gpu-tests 60 150 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/fused/kernels/test_decode_attention.py \
  -k "grouped or preloaded or inside_inductor"
for turn in llama-3.2-1b:16384:0:4 llama-3.2-1b:16384:16:4 llama-3.2-1b:16384:16:1 \
  qwen2.5-0.5b:1024:0:4 qwen2.5-0.5b:1024:16:4 qwen2.5-0.5b:1024:16:1; do
  IFS=: read -r model cache grouped parts <<< "$turn"
  name="b-$model-grouped$grouped-parts$parts"
  run "$name" 40 100 env CUGRAPH_ACCEL_ATTENTION_PRELOADED_GROUPED="$grouped" CUGRAPH_ACCEL_ATTENTION_PRELOADED="$parts" \
    python3 -m cli bench "$model" --compare fused --context "$cache" --buckets 1,2,4,8,16 --csv "$FINAL/$name.csv"
done
CUGRAPH_ACCEL_ATTENTION_PRELOADED_GROUPED=16 OUT=$FINAL DEADLINE=$(left) REPEAT=1 \
  ENTRIES="llama-3.2-1b:16384:fused:1-8-16 | qwen2.5-0.5b:1024:fused:1-8-16" \
  bash benchmarks/realsize_repeat.sh > "$LOGS/realsize.out" 2>&1
grep -E "^verify-|^verified|failed|-fused " "$LOGS/realsize.out" | cut -c1-200
echo "== fused ms by batch: grouped off, grouped up to 16 (4 parts), grouped up to 16 (1 part)"
for f in "$FINAL"/b-*.csv; do python3 benchmarks/bench_lines.py "$f" | grep fused; done
