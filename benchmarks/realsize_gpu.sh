#!/usr/bin/env bash
# Issue 13 on one H200: the real-size recipes through the CLI, in one device call (DEADLINE s, default 560),
# most wanted first:
#   OLMoE, Phi-3-mini, 8B:  bench eager, graph, fused and compile (reduce-overhead) at buckets 1, 8, 32 and
#                           caches 1024 and 4096 (its graph and fused rows are capture and capture --fuse,
#                           each with its check after capture);
#   Gemma-2-2B:             verify, plain graphs, buckets 1,8,32 (sliding window, logit softcapping);
#   Qwen3-30B-A3B:          verify at bucket 1 only (capture + verify: 61 GB of weights).
# RECIPES overrides the bench list, CONTEXTS its caches; VERIFY=0 leaves out the two verifies. Every command
# reports its peak device memory beside its stated bound; a short table comes last.
# Usage on the device machine: OUT=/some/dir bash benchmarks/realsize_gpu.sh;
# the logs and JSON come back in $OUT/realsize-gpu-logs.tgz (the device returns at most 8 files).
set -uo pipefail
DEADLINE=${DEADLINE:-560} LOGS=/tmp/realsize-gpu SHOW="^peak device memory|memory [0-9.]+ GiB|^error|verified|verify failed"
source "$(dirname "$0")/deadline.sh"
for recipe in ${RECIPES:-olmoe-1b-7b phi-3-mini-4k llama-3.1-8b}; do
  run "bench-$recipe" 90 330 python3 -m cli bench "$recipe" --compare eager,graph,fused,compile --buckets 1,8,32 \
    --context "${CONTEXTS:-1024,4096}" --steps 20 --warmup 3 --json "$LOGS/bench-$recipe.json"
done
if [ "${VERIFY:-1}" = 1 ]; then
  run "verify-gemma-2-2b" 30 100 python3 -m cli verify gemma-2-2b --buckets 1,8,32 --steps 8 --json "$LOGS/verify-gemma-2-2b.json"
  run "verify-qwen3-30b-a3b" 30 120 python3 -m cli verify qwen3-30b-a3b --buckets 1 --steps 8 --json "$LOGS/verify-qwen3-30b-a3b.json"
fi
python3 - "$LOGS" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
gib = lambda b: "-" if b is None else f"{b / 2**30:.1f}"
print(f"\n{'recipe':<26}{'command':<10}{'cache':>6}{'peak GiB':>10}{'bound GiB':>10}  {'result':<30}ms per step (batch: eager / graph / fused / compile)")
for path in sorted(out.glob("*.json")):
    data = json.loads(path.read_text())
    recipe = path.stem.split("-", 1)[1]
    if path.stem.startswith("verify-"):
        m = data.get("memory", {})
        result = "verified" if data.get("passed") else f"FAILED {sum(not r['passed'] for r in data['rows'])}/{len(data['rows'])}"
        print(f"{recipe:<26}{'verify':<10}{'':>6}{gib(m.get('peak_bytes')):>10}{gib(m.get('bound_bytes')):>10}  {result:<30}")
    elif path.stem.startswith("bench-"):
        for info in data["contexts"]:
            m, rows = info.get("memory", {}), [r for r in data["rows"] if r["context"] == info["cache_len"] and r["kind"] == "step"]
            cells = {(r["bucket"], r["contender"]): r for r in rows}
            speed = "  ".join(f"{b}: " + " / ".join(f"{cells[b, c]['median_ms']:.2f}" + ("!" if cells[b, c]["under_floor"] else "")
                              if (b, c) in cells else "-" for c in ("eager", "graph", "fused", "compile")) for b in info["buckets"])
            floor = "; floor " + ", ".join(f"{f['floor_ms']:.2f}" for f in info.get("floors", []))
            result = "within bound" if m.get("within_bound") else ("OVER BOUND" if m.get("within_bound") is False else "?")
            print(f"{recipe:<26}{'bench':<10}{info['cache_len']:>6}{gib(m.get('peak_bytes')):>10}{gib(m.get('bound_bytes')):>10}  {result:<30}{speed}{floor}")
print("(! = measured under its floor; a missing fused cell: see the bench log's 'no fused row' note)")
PY
tar czf "$FINAL/realsize-gpu-logs.tgz" -C "$LOGS" --exclude inductor-cache . 2>/dev/null
