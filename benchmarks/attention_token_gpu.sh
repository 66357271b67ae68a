#!/usr/bin/env bash
# The decode attention rotating q and the step's key and writing K/V into the cache itself (stop 22,
# layer_program.ATTENTION_WRITES_TOKEN, off), ONE device call (DEADLINE s, default 580):
# (1) profiles, the shipped step against the attention writing the token (fused-writes-token), at batches
# 1, 8 and 32, one process per model (PROFILE_MODELS); (2) BENCH=1: `bench --compare fused` of the 1B at
# a KV capacity of 16,384 and of Qwen at 1,024 (issue 16's lines); both timing, alone; (3) then side by
# side: the 8B's --fuse capture and `verify --repeat` for each VERIFY entry (cache:repeats), with
# CUGRAPH_ACCEL_ATTENTION_WRITES_TOKEN=1, and the attention's and the fused GPU tests. Stop 22 ran both forms (docs/PERF.md): the first (the token taken
# inside the loop) slowed the 8B's attention; the second breaks even, so the switch stays off. The first way
# of a process replays fastest: WAYS="fused-writes-token,fused" runs the other order.
# Usage on the device machine: OUT=/some/dir bash benchmarks/attention_token_gpu.sh
set -uo pipefail
DEADLINE=${DEADLINE:-580} LOGS=/tmp/token-logs SHOW="replay|^error|Error|fused:|passed|failed|^verified|verify failed"
source "$(dirname "$0")/deadline.sh"
n=0
for model in ${PROFILE_MODELS:-llama-3.1-8b llama-3.2-1b qwen2.5-0.5b}; do
  n=$((n + 1))
  run "profile-$n-$model" 60 150 python3 benchmarks/profile_step.py "$model" --batches 1,8,32 \
    --ways "${WAYS:-fused,fused-writes-token}" --top 8 --json "$LOGS/profile-$n-$model.json"
done
bench() {  # NAME RECIPE CONTEXT BUCKETS
  run "$1" 40 120 python3 -m cli bench "$2" --compare fused --buckets "$4" --context "$3" --steps 30 --warmup 5 \
    --csv "$LOGS/bench-$1.csv"
}
if [ "${BENCH:-0}" = 1 ]; then
  bench 1b llama-3.2-1b 16384 1,8,16,32
  bench qwen qwen2.5-0.5b 1024 1,8,16,32
  python3 benchmarks/bench_lines.py "$LOGS"/bench-*.csv
fi
for entry in ${VERIFY:-4096:2 1024:1}; do  # one lane: each capture, then its verify
  IFS=: read -r cache repeats <<< "$entry"
  name=llama-3.1-8b-$cache-fused
  # `run` answers grep's status (pipefail): no "&&" after it
  CUGRAPH_ACCEL_ATTENTION_WRITES_TOKEN=1 run "capture-$name" 40 150 python3 -m cli capture llama-3.1-8b --fuse --buckets 1,8,32 --max-cache-len "$cache" \
    --plan "$LOGS/$name.yaml"
  [ -f "$LOGS/$name.yaml" ] && CUGRAPH_ACCEL_ATTENTION_WRITES_TOKEN=1 run "verify-$name" 60 300 python3 -m cli verify --plan "$LOGS/$name.yaml" \
    --steps 8 --repeat "$repeats" --json "$LOGS/verify-$name.json"
done &
run gpu-tests 40 300 python3 -m pytest -m cuda -q -p no:cacheprovider -rf tests/fused/test_gpu_fused.py \
  tests/fused/kernels/test_decode_attention.py -k "${TESTS_K:-inductor or writing or tiny_model or test_gpu_fused}" &
wait
echo "== replay ms per step: batch 1 / 8 / 32"
python3 - "$LOGS" <<'PY'
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("profile-*.json")):
    rows = {}
    for r in json.loads(path.read_text()):
        rows.setdefault(r["way"], {})[r["batch"]] = r["replay_ms"]
    for way, by_batch in rows.items():
        print(f"{path.stem[10:]:<16}{way:<30}" + " / ".join(f"{by_batch[b]:.3f}" for b in sorted(by_batch)))
PY
tar czf "$FINAL/token-logs.tgz" -C "$LOGS" --exclude inductor-cache --exclude '*.yaml' --exclude '*.inductor' . 2>/dev/null
echo "done in $(( $(date +%s) - START )) s"
