#!/usr/bin/env bash
# The fused step as shipped (since 2026-12-01: skinny kernels at batch 1 for the table's shapes, PDL
# for every kernel on Hopper, one kernel advancing every layer's cache position), ONE device call under a
# deadline (DEADLINE s, default 570), most wanted first:
#   8b-bench   bench llama-3.1-8b eager, graph, fused, compile, buckets 1/8/32, cache 1024, prompt 128:
#              issue 13's line (fused at most 1.2x the floor at batch 1 beside reduce-overhead)
#   tests      the fused GPU tests (the merged program with and without the skinny kernels), the PDL ones,
#              beside the 8B's capture --fuse at cache 1024 and verify
#   1b, qwen   bench at buckets 1/8/16/32 (the 1B at KV capacity 16,384, issue 16's shape, beside
#              reduce-overhead: issue 16 asks fused setup <= 1/3 of its compile time)
# Usage on the device machine: OUT=/some/dir bash benchmarks/fused_step_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-570} LOGS=/tmp/fused-step-logs SHOW="passed|failed|^error|Error|verified|worst|peak|layers:|replay"
source "$(dirname "$0")/deadline.sh"
run 8b-bench 90 210 python3 -m cli bench llama-3.1-8b --compare eager,graph,fused,compile --buckets 1,8,32 \
  --context 1024 --steps 30 --warmup 5 --csv "$LOGS/bench-8b.csv"
# the tests beside the 8B's capture and verify (neither is timed)
run tests 40 150 python3 -m pytest -m cuda -q -p no:cacheprovider -rf tests/fused/test_gpu_fused.py \
  tests/fused/kernels/test_skinny_matmul.py::test_gpu_pdl_launches_replay_what_plain_launches_compute \
  tests/fused/kernels/test_decode_attention.py::test_gpu_kernel_inside_inductor_and_a_cuda_graph &
run capture-8b 60 100 python3 -m cli capture llama-3.1-8b --fuse --buckets 1,8,32 --max-cache-len 1024 --plan "$LOGS/8b.yaml"
[ -f "$LOGS/8b.yaml" ] && run verify-8b 50 120 python3 -m cli verify --plan "$LOGS/8b.yaml" --steps 8
wait
run bench-1b 60 170 python3 -m cli bench llama-3.2-1b --compare fused,compile --buckets 1,8,16,32 --context 16384 \
  --steps 30 --warmup 5 --csv "$LOGS/bench-1b.csv"
run bench-qwen 40 90 python3 -m cli bench qwen2.5-0.5b --compare fused --buckets 1,8,16,32 --context 1024 --steps 30 \
  --warmup 5 --csv "$LOGS/bench-qwen.csv"
echo "== bench"
python3 benchmarks/bench_lines.py "$LOGS"/bench-*.csv
tar czf "$FINAL/fused-step-logs.tgz" -C "$LOGS" --exclude inductor-cache --exclude '*.yaml' --exclude '*.inductor' . 2>/dev/null
echo "done in $(( $(date +%s) - START )) s"
