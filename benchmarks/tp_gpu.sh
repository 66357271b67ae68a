#!/usr/bin/env bash
# Issue 17 on two H200s (device kind nvidia-h200-x2), in ONE device call under a deadline (DEADLINE s,
# default 420): each part runs only if the time it needs is left, in this order (most wanted first):
#   tp-tests         the cuda-marked tp tests (tiny llama on 2 GPUs: capture, verify, bench, exits)  ~70 s
#   capture/verify   Llama-3.1-8B shape, --tp 2 --allreduce oneshot (verify: also against one GPU)   ~2x60 s
#   bench-tp2        --tp 2, eager,graph,fused, NCCL's all-reduce (the "nccl" variant)              ~70 s
#   bench-tp2-V      --tp 2, graph,fused, first entry of VARIANTS (default "oneshot ll")           ~50 s
#   bench-tp1        --tp 1, eager,graph,fused: the single-GPU reference of the same call           ~60 s
#   profile-tp2-nccl kernels of the tp2 fused step at batch 1 on rank 0: all-reduce vs the rest     ~40 s
#   bench-tp2-V      the other VARIANTS (oneshot: --allreduce oneshot, ll: NCCL_PROTO=LL,
#                    ring: NCCL_ALGO=Ring, ll-ring: both, nccl)                                      ~50 s each
#   profile-tp2-oneshot                                                                              ~40 s
#   then a short table: median ms per step and floors, tp2 / tp1 at batch 1 per variant.
# Buckets 1,8,32, cache 1024, 50 steps. Logs go to $OUT/tp-logs.tgz (the device returns at most 8 files).
# Usage on the device machine: OUT=/some/dir bash benchmarks/tp_gpu.sh [all|tests|run|exits]
#   run: all but the tests; exits: 10 timed `capture tiny --tp 2` runs (EXITS=N), ~3 min
set -uo pipefail
DEADLINE=${DEADLINE:-420} LOGS=/tmp/tp-logs SHOW="^error|^note: rank|teardown|FutureWarning"
source "$(dirname "$0")/deadline.sh"
RECIPE=recipes/llama-3.1-8b.yaml
SHAPE=(--buckets 1,8,32 --max-cache-len 1024 --context-buckets full)
BENCH=(--buckets 1,8,32 --context 1024 --context-buckets full --steps 50 --warmup 5)
VARIANTS=${VARIANTS:-oneshot ll}
variant_env() {  # the environment and options of one all-reduce variant
  case $1 in
    nccl) echo "--allreduce nccl" ;;
    oneshot) echo "--allreduce oneshot" ;;
    ll) echo "NCCL_PROTO=LL --allreduce nccl" ;;
    ring) echo "NCCL_ALGO=Ring --allreduce nccl" ;;
    ll-ring) echo "NCCL_PROTO=LL NCCL_ALGO=Ring --allreduce nccl" ;;
    *) echo "unknown variant $1" >&2; return 1 ;;
  esac
}
finish() { tar czf "$FINAL/tp-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null; echo "done in $(( $(date +%s) - START )) s"; }

python3 -c 'import torch; print("GPUs:", torch.cuda.device_count(), torch.__version__, "| symm_mem one_shot_all_reduce_copy:", hasattr(torch.ops.symm_mem, "one_shot_all_reduce_copy"))'
if [ "${1:-all}" != run ]; then  # `run`: everything but the tests
  run tp-tests 90 300 python3 -m pytest -m cuda -q -p no:cacheprovider -rf --durations=4 tests/distributed
  tail -n 4 "$LOGS/tp-tests.log" 2>/dev/null
fi
if [ "${1:-all}" = tests ]; then finish; exit 0; fi
if [ "${1:-all}" = exits ]; then  # issue 17: every process ends by itself within 10 s, in 10 repeated runs
  for i in $(seq 1 "${EXITS:-10}"); do
    run "exit-$i" 25 90 python3 -m cli capture tiny --tp 2 --buckets 1,2 --plan "$LOGS/exit.plan.yaml" --force
  done | tee "$LOGS/exits.txt"
  python3 - "$LOGS/exits.txt" <<'PY'
import re, sys
runs = [re.search(r"exit (\d+); .* ended ([0-9.]+) s after", line) for line in open(sys.argv[1])]
runs = [(int(m.group(1)), float(m.group(2))) for m in runs if m]
ok = sum(code == 0 for code, _ in runs)
worst = max((lag for _, lag in runs), default=float("nan"))
print(f"exits: {ok} of {len(runs)} runs exit 0; the slowest ended {worst:.1f} s after its last line (issue 17: <= 10 s)")
PY
  finish; exit 0
fi

run capture-tp2 60 150 python3 -m cli capture "$RECIPE" --tp 2 --allreduce oneshot "${SHAPE[@]}" --plan "$LOGS/tp2.plan.yaml"
run verify-tp2 60 150 python3 -m cli verify --plan "$LOGS/tp2.plan.yaml" --allreduce oneshot --steps 4
grep -E "verified|verify failed|tp 2 replay" "$LOGS/verify-tp2.log" 2>/dev/null | head -n 3
run bench-tp2 70 200 python3 -m cli bench "$RECIPE" --tp 2 --allreduce nccl "${BENCH[@]}" --compare eager,graph,fused \
  --csv "$LOGS/bench-tp2.csv"
bench_variant() {  # bench --tp 2, graph and fused, under one all-reduce variant
  local name=$1 text envs=() opts=()
  text=$(variant_env "$name") || return 0
  for item in $text; do if [[ $item == *=* ]]; then envs+=("$item"); else opts+=("$item"); fi; done
  run "bench-tp2-$name" 50 150 env "${envs[@]}" python3 -m cli bench "$RECIPE" --tp 2 "${opts[@]}" "${BENCH[@]}" \
    --compare graph,fused --csv "$LOGS/bench-tp2-$name.csv"
}
profile() {  # rank 0's kernels in the tp2 fused step at batch 1, under one all-reduce kind
  run "profile-tp2-$1" 45 120 python3 benchmarks/profile_tp.py "$RECIPE" --batch 1 --fuse --allreduce "$1" \
    --top 8 --json "$LOGS/profile-tp2-$1.json"
  grep -E "^tp2 |^ +[0-9.]+ us" "$LOGS/profile-tp2-$1.log" 2>/dev/null | head -n 9
}
read -r -a variants <<< "$VARIANTS"
[ ${#variants[@]} -gt 0 ] && bench_variant "${variants[0]}"
run bench-tp1 60 200 python3 -m cli bench "$RECIPE" --tp 1 "${BENCH[@]}" --compare eager,graph,fused \
  --csv "$LOGS/bench-tp1.csv"
profile nccl
for name in "${variants[@]:1}"; do bench_variant "$name"; done
profile oneshot

python3 - "$LOGS" $VARIANTS <<'PY'
import csv, sys
from pathlib import Path
logs, variants = Path(sys.argv[1]), sys.argv[2:]
runs = {"tp1": "bench-tp1.csv", "tp2 nccl": "bench-tp2.csv", **{f"tp2 {v}": f"bench-tp2-{v}.csv" for v in variants}}
rows = {}
for run, name in runs.items():
    path = logs / name
    if not path.is_file():
        print(f"{run}: no results ({name} missing)")
        continue
    for r in csv.DictReader(path.open()):
        if r["kind"] == "step":
            rows[(run, int(r["bucket"]), r["contender"])] = (float(r["median_ms"]), float(r["floor_ms"]))
print("median ms per decode step, Llama-3.1-8B shape, bf16, cache 1024 (floor: bytes one rank moves / bandwidth)")
print(f"{'run':>12} {'batch':>5} {'eager':>8} {'graph':>8} {'fused':>8} {'floor':>7}")
for run in runs:
    for batch in (1, 8, 32):
        cells = [rows.get((run, batch, c)) for c in ("eager", "graph", "fused")]
        if not any(cells):
            continue
        floor = next(c[1] for c in cells if c)
        print(f"{run:>12} {batch:>5} " + " ".join(f"{c[0]:8.3f}" if c else f"{'-':>8}" for c in cells) + f" {floor:7.3f}")
best = {run: min((v[0] for (r, b, c), v in rows.items() if r == run and b == 1), default=None) for run in runs}
if best.get("tp1"):
    for run, ms in best.items():
        if run != "tp1" and ms:
            print(f"batch 1, fastest mode: {run} {ms:.3f} ms / tp1 {best['tp1']:.3f} ms = {ms / best['tp1']:.3f}x (issue 17 asks <= 0.65x)")
PY
finish
