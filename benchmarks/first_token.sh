# Sourced by the GPU scripts (generate_gpu.sh, startup_probe.sh): `cugraph-accel generate` from a NEW
# process, and how long after its launch the first token came, stage by stage (the --json
# `startup_unix` stamps). Needs OUT (a folder) and, for first_token, $OUT/prompts-BATCH.jsonl from
# write_prompts. PYTHON: the interpreter (default python3); GENERATE_ARGS: extra words for generate
# (e.g. --device cpu to try a script without a GPU).

write_prompts() {  # BATCH...: $OUT/prompts-BATCH.jsonl, BATCH prompts of 128 random ids (100-499)
  "${PYTHON:-python3}" - "$OUT" "$@" <<'PY'
import json, random, sys
random.seed(0)
for batch in map(int, sys.argv[2:]):
    with open(f"{sys.argv[1]}/prompts-{batch}.jsonl", "w") as f:
        for _ in range(batch):
            f.write(json.dumps({"input_ids": [random.randrange(100, 500) for _ in range(128)]}) + "\n")
PY
}

first_token() {  # MODEL BATCH [TAG]: a new process; prints launch -> first token, its breakdown, and tok/s
  local model=$1 batch=$2 tag=${3:-} start rc name
  name="$(basename "$model")-$batch${tag:+-$tag}"
  start=$("${PYTHON:-python3}" -c 'import time; print(time.time())')
  echo "$start" > "$OUT/launch-$name.txt"
  # shellcheck disable=SC2086 - GENERATE_ARGS is a list of words
  timeout 60 "${PYTHON:-python3}" -m cli generate "$model" --prompts "$OUT/prompts-$batch.jsonl" --max-new-tokens 128 \
    --buckets "$batch" --max-cache-len 1024 --json "$OUT/generate-$name.json" ${GENERATE_ARGS:-} \
    > "$OUT/generate-$name.log" 2>&1
  rc=$?
  "${PYTHON:-python3}" - "$OUT/generate-$name.json" "$start" "$model" "$batch" "$rc" <<'PY'
import json, sys
path, start, model, batch, rc = sys.argv[1:]
try:
    r = json.load(open(path))
except OSError:
    print(f"{model} batch {batch}: exit code {rc}, no JSON (see the .log)"); sys.exit()
stamps = [("launch", float(start))] + [tuple(s) for s in r.get("startup_unix", [])]
spent = ", ".join(f"{a} {b_at - a_at:.2f}" for (a, a_at), (_, b_at) in zip(stamps, stamps[1:]))
steps = r["step_ms"] or {"p50": 0.0}
print(f"{model} batch {batch}: first token {r['first_token_unix'] - float(start):.2f} s after launch "
      f"(in-call {r['time_to_first_token_s'] * 1000:.0f} ms); {r['tokens_per_second']:,.0f} tok/s (one cold call); "
      f"step p50 {steps['p50']:.3f} ms, host {r.get('host_ms_per_step', 0):.3f} ms/step; {r['new_tokens']} tokens")
print(f"   s per stage (each from its start to the next): {spent}")
captures = ", ".join(f"bucket {c['bucket']} context {c['context']} {c['seconds']:.2f} s" for c in r.get("captures", []))
if captures:
    print(f"   graph captures (inside the stages above): {captures}")
PY
}
