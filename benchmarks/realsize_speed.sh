#!/usr/bin/env bash
# Issue 13's speed and memory lines and issue 15's 8B report, in ONE device call (nvidia-h200) under a
# deadline (DEADLINE s, default 560), most wanted first:
#   gemma      verify gemma-2-2b, plain graphs, buckets 1/8/32, cache 1024 (sliding window, softcapping)
#   8b-bench   bench llama-3.1-8b eager, graph, fused, compile (reduce-overhead), buckets 1/8/32, cache
#              1024, prompt 128: fused against the floor beside reduce-overhead
#   8b-gen     bench llama-3.1-8b hf-generate against generate-fused, 128 new tokens, batches 1/8/32
#   phi-4096   bench phi-3-mini-4k graph, fused, buckets 1/8/32 at cache 4096 (the memory case)
#   8b-repeat  verify --repeat 5 of the 8B, plain graphs, cache 1024
# Each command's peak device memory and bound are in its JSON; the logs come back as one tarball.
# Usage on the device machine: OUT=/some/dir bash benchmarks/realsize_speed.sh
set -uo pipefail
DEADLINE=${DEADLINE:-560} LOGS=/tmp/realsize-speed SHOW="^peak device memory|^error|verified|verify failed|repeat"
source "$(dirname "$0")/deadline.sh"
BUCKETS=(--buckets 1,8,32)
run gemma 40 120 python3 -m cli verify gemma-2-2b "${BUCKETS[@]}" --steps 8 --json "$LOGS/verify-gemma-2-2b.json"
run 8b-bench 90 200 python3 -m cli bench llama-3.1-8b --compare eager,graph,fused,compile "${BUCKETS[@]}" \
  --context 1024 --steps 30 --warmup 5 --json "$LOGS/bench-8b.json"
run 8b-gen 90 200 python3 -m cli bench llama-3.1-8b --compare hf-generate,generate-fused "${BUCKETS[@]}" \
  --context 1024 --new-tokens 128 --json "$LOGS/generate-8b.json"
run phi-4096 60 120 python3 -m cli bench phi-3-mini-4k --compare graph,fused "${BUCKETS[@]}" --context 4096 \
  --steps 20 --warmup 3 --json "$LOGS/bench-phi-4096.json"
run 8b-repeat 60 200 python3 -m cli verify llama-3.1-8b "${BUCKETS[@]}" --steps 8 --repeat 5 \
  --json "$LOGS/verify-8b-repeat.json"
for name in 8b-bench 8b-gen phi-4096; do
  echo "== $name"; sed -n '/, cache length/,/^ *x floor\|HF static+compile *$/p' "$LOGS/$name.log" | grep -v "^[┏┡└]" | head -n 12
done
tar czf "$FINAL/realsize-speed-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
echo "done in $(( $(date +%s) - START )) s"
