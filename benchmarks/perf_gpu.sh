#!/usr/bin/env bash
# The fused step's numbers after a lowering change, in ONE device call (kind nvidia-h200-x2) under a
# deadline (DEADLINE s, default 540), most wanted first:
#   tests    the cuda-marked fused and tp tests (the default all-reduce `auto` on CUDA)
#   qwen     bench qwen2.5-0.5b graph,fused, buckets 1/8/16/32, cache 1024
#   8b       bench llama-3.1-8b graph,fused, buckets 1/32, cache 1024
#   tp       bench 8B --tp 2 and --tp 1, fused, buckets 1/8/32 (issue 17: tp2 / tp1 at batch 1)
# A table last. Usage on the device machine: OUT=/some/dir bash benchmarks/perf_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-540} LOGS=/tmp/perf-logs SHOW="kernels,|passed|failed|^error|Error"
source "$(dirname "$0")/deadline.sh"
run tests-fused 40 90 python3 -m pytest -m cuda -q -p no:cacheprovider -rf tests/fused
run tests-tp 60 150 python3 -m pytest -m cuda -q -p no:cacheprovider -rf tests/distributed
BENCH=(--context 1024 --steps 40 --warmup 5)
run qwen 40 120 python3 -m cli bench qwen2.5-0.5b --compare graph,fused --buckets 1,8,16,32 "${BENCH[@]}" --csv "$LOGS/qwen.csv"
run 8b 60 150 python3 -m cli bench llama-3.1-8b --compare graph,fused --buckets 1,32 "${BENCH[@]}" --csv "$LOGS/8b.csv"
run tp2 60 150 python3 -m cli bench recipes/llama-3.1-8b.yaml --tp 2 --compare fused --buckets 1,8,32 --context-buckets full \
  "${BENCH[@]}" --csv "$LOGS/tp2.csv"
run tp1 50 120 python3 -m cli bench recipes/llama-3.1-8b.yaml --tp 1 --compare fused --buckets 1,8,32 --context-buckets full \
  "${BENCH[@]}" --csv "$LOGS/tp1.csv"
python3 - "$LOGS" <<'PY'
import csv, sys
from pathlib import Path
logs = Path(sys.argv[1])
print(f"{'bench':<6}{'contender':>10}{'batch':>6}{'median ms':>11}{'floor ms':>10}{'x floor':>9}")
best = {}
for name in ("qwen", "8b", "tp2", "tp1"):
    path = logs / f"{name}.csv"
    for r in csv.DictReader(path.open()) if path.is_file() else []:
        if r["kind"] != "step":
            continue
        ms, floor = float(r["median_ms"]), float(r["floor_ms"])
        print(f"{name:<6}{r['contender']:>10}{r['bucket']:>6}{ms:>11.3f}{floor:>10.3f}{ms / floor:>9.2f}")
        if r["bucket"] == "1":
            best[name] = min(best.get(name, ms), ms)
if "tp1" in best and "tp2" in best:
    print(f"tp2 / tp1 at batch 1: {best['tp2']:.3f} / {best['tp1']:.3f} = {best['tp2'] / best['tp1']:.3f}x (issue 17: <= 0.65x)")
PY
tar czf "$FINAL/perf-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
echo "done in $(( $(date +%s) - START )) s"
