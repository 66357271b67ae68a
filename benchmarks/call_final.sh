#!/usr/bin/env bash
# The session's last device call (~5 min): generate's GPU tests, the first failing kernel GPU test,
# the 8B fused step with down_proj on cuBLAS vs inductor's GEMV, and a plain `generate` from a new process.
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s); DEADLINE=${DEADLINE:-330}
left() { echo $(( DEADLINE - ($(date +%s) - START) )); }
FINAL=${OUT:-/tmp/out}; WORK=/tmp/final; mkdir -p "$WORK" "$FINAL"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=200 TRANSFORMERS_VERBOSITY=error TORCHINDUCTOR_CACHE_DIR=$WORK/inductor
echo "== generate GPU tests"
timeout 100 python3 -m pytest -q -p no:cacheprovider -m cuda -rf tests/generate > "$WORK/gen-tests.log" 2>&1
echo "exit $?"; grep -E "^FAILED|passed|failed|agree" "$WORK/gen-tests.log" | cut -c1-250 | tail -n 8
echo "== kernel GPU tests, first failure ($(left) s left)"
timeout 50 python3 -m pytest -q -p no:cacheprovider -m cuda -x -rf tests/fused/kernels/test_skinny_matmul.py > "$WORK/kern-tests.log" 2>&1
echo "exit $?"; grep -E "^FAILED|^E  |passed|failed" "$WORK/kern-tests.log" | cut -c1-250 | head -n 12
echo "== 8B b1 profile ($(left) s left)"
timeout $(( $(left) - 50 )) python3 benchmarks/profile_step.py llama-3.1-8b --batches 1 --ways fused,fused-long-cublas \
  --cache 1024 --top 4 --json "$WORK/profile-8b.json" > "$WORK/profile-8b.log" 2>&1
grep -vE "^W1|^\s*$" "$WORK/profile-8b.log" | grep -E "kernels,|us  |failed" | cut -c1-230
if [ "$(left)" -gt 35 ]; then
  echo "== generate from a new process ($(left) s left)"
  python3 -c 'import json,random; random.seed(0); print(json.dumps({"input_ids":[random.randrange(100,500) for _ in range(128)]}))' > "$WORK/p1.jsonl"
  s=$(date +%s.%N)
  timeout $(( $(left) - 5 )) python3 -m cli generate qwen2.5-0.5b --prompts "$WORK/p1.jsonl" --max-new-tokens 128 --buckets 1 \
    --max-cache-len 1024 --json "$WORK/gen1.json" > "$WORK/gen1.log" 2>&1
  echo "exit $?"
  python3 - "$WORK/gen1.json" "$s" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except OSError:
    sys.exit("no JSON")
print(f"first token {r['first_token_unix'] - float(sys.argv[2]):.2f} s after launch; {r['tokens_per_second']:,.0f} tok/s; "
      f"step p50 {r['step_ms']['p50']:.3f} ms; host ms/step {r.get('host_ms_per_step')}")
st = r.get("startup_unix") or {}
items = sorted(st.items(), key=lambda kv: kv[1]) if isinstance(st, dict) else st
prev = float(sys.argv[2])
print("stages: " + ", ".join(f"{k} +{v - prev:.2f}" for k, v in items) if items else "")
PY
fi
tar czf "$FINAL/final-logs.tgz" -C "$WORK" --exclude inductor . 2>/dev/null
echo "done in $(( $(date +%s) - START )) s"
