#!/usr/bin/env bash
# Issue 13's "five repeated verify runs of each" (REPEAT, default 5) on one H200, one device call (DEADLINE s, default 575):
# for each entry of ENTRIES (recipe:cache:plain|fused[:buckets], most wanted first; buckets joined by "-", 1-8-32
# by default) a capture at those buckets and
# that cache (with --fuse for fused), then `verify --plan ... --repeat 5` (new prompts each repeat).
# Entries separated by "|" run in lanes side by side (below). FAULTS=1 adds the CUDA fault suite
# (tests/verify -m cuda) in a lane of its own. A table last: entry, repeats passed, worst replay error x
# eager's, peak memory vs bound.
# Passed five repeats with code that still holds (2026-12-01, stop 19): plain at 1024 and 4096 for the 8B,
# OLMoE and Phi-3-mini; --fuse at 4096 for the 8B (one lane, FAULTS=1 beside it: 366 s) and Phi-3-mini,
# --fuse at 1024 for Phi-3-mini. A repeat's time goes mostly to the float32 reference (the 8B at 4096: 195
# of 291 s over five repeats; plain beside OLMoE: 264 of 432). Still wanted, one call:
#   olmoe-1b-7b:4096:fused olmoe-1b-7b:1024:fused | llama-3.1-8b:1024:fused
# Usage on the device machine: OUT=/some/dir ENTRIES="llama-3.1-8b:4096:fused" bash benchmarks/realsize_repeat.sh
# (FAULTS=1 and TESTS="tests/fused/test_gpu_fused.py" run beside it: see below)
set -uo pipefail
DEADLINE=${DEADLINE:-575} LOGS=/tmp/realsize SHOW="^verified|verify failed|^verify took|^error|passed|failed"
source "$(dirname "$0")/deadline.sh"
ENTRIES=${ENTRIES:-"llama-3.1-8b:4096:fused"}
# FAULTS=1: the CUDA fault suite, TESTS="pytest args": more GPU tests, each a lane of its own beside the
# verify lanes (tests compare numbers, not times)
[ "${FAULTS:-0}" = 1 ] && run "faults-gpu" 30 240 python3 -m pytest -m cuda -q -p no:cacheprovider -rf tests/verify &
# shellcheck disable=SC2086 # TESTS is a list of pytest arguments
[ -n "${TESTS:-}" ] && run "tests-gpu" 30 300 python3 -m pytest -m cuda -q -p no:cacheprovider -rf $TESTS &
repeat_entries() {  # ENTRY...: capture, then verify --repeat 5, one entry after the other
  for entry in "$@"; do
    IFS=: read -r recipe cache mode buckets <<< "$entry"
    name="$recipe-$cache-$mode" fuse=() buckets=${buckets:-1-8-32}
    [ "$mode" = fused ] && fuse=(--fuse)
    run "capture-$name" 40 120 python3 -m cli capture "$recipe" "${fuse[@]}" --buckets "${buckets//-/,}" --max-cache-len "$cache" \
      --plan "$LOGS/$name.yaml"
    [ -f "$LOGS/$name.yaml" ] && run "verify-$name" 60 520 python3 -m cli verify --plan "$LOGS/$name.yaml" --steps 8 \
      --repeat "${REPEAT:-5}" --json "$LOGS/verify-$name.json"
  done
}
# Lanes: ENTRIES split at "|" run side by side on the one GPU (verify is no timing: a lane only slows the
# other's kernels, and much of verify is host work). Put entries whose peaks add up to under the GPU's
# memory side by side (the 8B and OLMoE at 4096 peak at ~40 GB each, Phi-3-mini ~60 GB).
IFS='|' read -r -a LANES <<< "$ENTRIES"
for lane in "${LANES[@]}"; do
  # shellcheck disable=SC2086 # a lane is a space-separated list of entries
  repeat_entries $lane &
done
wait
python3 - "$LOGS" <<'PY'
import json, pathlib, sys
work = pathlib.Path(sys.argv[1])
gib = lambda b: "-" if b is None else f"{b / 2**30:.1f}"
print(f"{'verify':<34}{'repeats passed':>15}{'worst x eager':>15}{'peak GiB':>10}{'bound GiB':>10}")
for path in sorted(work.glob("verify-*.json")):
    data, memory = json.loads(path.read_text()), {}
    memory = data.get("memory") or {}
    repeats = data.get("repeats") or []
    passed = sum(1 for r in repeats if not r["failed"])
    worst = max((r["worst_ratio"] for r in repeats), default=float("nan"))
    print(f"{path.stem[7:]:<34}{f'{passed} of {len(repeats)}':>15}{worst:>15.2f}{gib(memory.get('peak_bytes')):>10}{gib(memory.get('bound_bytes')):>10}")
PY
tar czf "$FINAL/realsize-logs.tgz" -C "$LOGS" --exclude inductor-cache --exclude '*.inductor' --exclude '*.yaml' . 2>/dev/null
