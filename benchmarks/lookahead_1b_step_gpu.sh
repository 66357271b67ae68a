#!/usr/bin/env bash
# Stop 32's fourth call: the 1B's lookahead tiles timed in its captured step (whole_step_sweep.py, --rows 1),
# since the chain undervalued them at the 8B (chain -2.0 us a layer, step -3.6): each op's 4 fastest lookahead
# configs of stop 32's chain sweep (benchmarks/trials/step-trials-ahead-llama-3.2-1b-1.tsv; the table's config
# won the chain, by 0.0-0.7 us a layer); written into the table where one wins by 0.5%; then bench of the 1B
# at 16,384, fused alone, buckets 1,8,16,32. One device call (DEADLINE s, default 420).
# Ran in stop 32 (H200, 2026-12-02, 110 s): no lookahead tile beat the table in the step (0.810 ms; best 0.810);
# bench 0.809 / 1.004 / 1.041 / 1.121.
# Usage on the device machine: OUT=/some/dir bash benchmarks/lookahead_1b_step_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-420} LOGS=/tmp/lookahead-1b SHOW="^ *(batch|[0-9]+ )|setup|ms|wrote|Error|error"
source "$(dirname "$0")/deadline.sh"
TABLE=accelerate_graph/fused/kernels/skinny_configs.json
run whole-step-1b 60 200 python3 benchmarks/whole_step_sweep.py llama-3.2-1b --rows 1 --budget-s 100 \
  --candidates benchmarks/trials/step-trials-ahead-llama-3.2-1b-1.tsv --top 4 --write-configs "$TABLE" \
  --log "$LOGS/whole-step-trials-llama-3.2-1b-1.tsv"
cp "$TABLE" "$FINAL/skinny_configs.json"
run bench-llama-3.2-1b 60 150 python3 -m cli bench llama-3.2-1b --compare fused --context 16384 --buckets 1,8,16,32 \
  --csv "$FINAL/bench-llama-3.2-1b.csv"
tar czf "$FINAL/lookahead-1b-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
echo "== summary"; grep -hE "^after|^chosen|^table|wrote" "$LOGS/whole-step-1b.log" | cut -c1-200
grep -E "^ *│? *[0-9]+ " "$LOGS/bench-llama-3.2-1b.log" | cut -c1-120 | head -n 6
