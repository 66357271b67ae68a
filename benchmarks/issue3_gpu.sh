#!/usr/bin/env bash
# Issue 3 on the GPU, one device call: the full zoo with real graphs (benchmarks/zoo_gpu.sh), then the
# batch-1 speedup of the chosen region plan over eager for an MoE and a sliding-window model at the
# Qwen2.5-0.5B scale. Writes under $OUT; prints the counts and the two tables last.
# Usage on the device machine: OUT=/some/dir bash benchmarks/issue3_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-200}
OUT=${OUT:-/tmp/cugraph-accel-out}
mkdir -p "$OUT"

timeout 330 bash benchmarks/zoo_gpu.sh > "$OUT/zoo-gpu.log" 2>&1
echo "zoo_gpu.sh exit code $?"
for recipe in qwen2-moe-0.5b mistral-sw-0.5b; do
  timeout 120 python3 -m cli bench "$recipe" --compare eager,graph --buckets 1,8 --steps 50 \
    --json "$OUT/bench-$recipe.json" > "$OUT/bench-$recipe.log" 2>&1
  echo "bench $recipe exit code $?"
done
tail -n 3 "$OUT/zoo-gpu.log"
for recipe in qwen2-moe-0.5b mistral-sw-0.5b; do
  grep -E "mode|fix|island" "$OUT/bench-$recipe.log" | head -n 6
  sed -n '/decode step, cache length/,/x floor:/p' "$OUT/bench-$recipe.log"
done
