#!/usr/bin/env bash
# Issue 4 on the GPU: one `bench` run of the Qwen2.5-0.5B-shaped recipe with every contender
# (eager, our graph replay, torch.compile reduce-overhead, HF generate vs our loop), against the
# measured HBM floor. Writes bench.png / bench.json / bench.csv / bench.log under $OUT; the tables last.
#
# Usage on the device machine: OUT=/some/dir bash benchmarks/issue4_bench.sh [extra bench args]
# e.g. extra args: --context 1024,4096   (each context adds ~4 torch.compile and ~4 HF first calls)
#
# Budget: 4 buckets x (torch.compile ~35-50 s + HF generate's own compile ~35-50 s) is ~5-7 min of
# compilation; everything else (eager at ~20 ms/step, replays, generate calls) well under a minute.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-200}
OUT=${OUT:-/tmp/cugraph-accel-out}
mkdir -p "$OUT"
BUDGET_S=600

{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv;
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)";
  python3 -c "import matplotlib; print('matplotlib', matplotlib.__version__)"; } 2>&1 | tee "$OUT/env.txt"

start=$(date +%s)
python3 -m cli bench qwen2.5-0.5b --compare eager,graph,compile,hf-generate --buckets 1,8,16,32 \
  --steps 100 --warmup 10 --new-tokens 128 \
  --plot "$OUT/bench.png" --json "$OUT/bench.json" --csv "$OUT/bench.csv" "$@" >"$OUT/bench.log" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))

echo "== bench exit code $rc after ${elapsed} s (budget ${BUDGET_S} s)"
[ "$elapsed" -gt "$BUDGET_S" ] && echo "!! over budget"
ls -l "$OUT"/bench.* 2>/dev/null
if [ "$rc" -ne 0 ] || ! grep -q "benchmark environment" "$OUT/bench.log"; then
  tail -n 40 "$OUT/bench.log"
  exit "$rc"
fi
# Warnings printed before the tables (HF, inductor), briefly; then the tables, last.
echo "== log before the tables (last 15 lines)"
sed '/benchmark environment/,$d' "$OUT/bench.log" | tail -n 15
echo "== results"
sed -n '/benchmark environment/,$p' "$OUT/bench.log"
