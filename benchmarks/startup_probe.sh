#!/usr/bin/env bash
# Issue 15's "first token within 5 s from a new process": where a new `cugraph-accel generate` process
# spends the time before its first token (plain graphs, the Qwen2.5-0.5B recipe, prompt 128, batch 1,
# cache 1024). One device call, < 2 min on the H200:
#  1. bare interpreter costs: python, import torch, torch + CUDA context, import transformers, `generate --help`;
#  2. one generate under `python -X importtime` ($OUT/importtime.txt): the 15 slowest cumulative imports;
#  3. the same generate three times, each a new process: first token after launch, stage by stage.
# Usage on the device machine, from the repo root: OUT=/some/dir bash benchmarks/startup_probe.sh
# Without a GPU (to try the script): PROBE_MODEL=tiny GENERATE_ARGS="--device cpu" PYTHON=.venv/bin/python
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-200}
OUT=${OUT:-/tmp/cugraph-accel-out}
PYTHON=${PYTHON:-python3}
MODEL=${PROBE_MODEL:-qwen2.5-0.5b}
mkdir -p "$OUT"
source benchmarks/first_token.sh
write_prompts 1

seconds() {  # LABEL COMMAND...: wall seconds of a new process running COMMAND
  local label=$1 start end rc
  shift
  start=$(date +%s.%N)
  "$@" > /dev/null 2> "$OUT/probe-stderr.txt"
  rc=$?
  end=$(date +%s.%N)
  printf '%-44s %6.2f s%s\n' "$label" "$(awk "BEGIN {print $end - $start}")" \
    "$([ $rc = 0 ] || echo "  (exit code $rc: $(tail -1 "$OUT/probe-stderr.txt"))")"
}

echo "== 1. a new process, doing only"
seconds "python3 -c pass" "$PYTHON" -c pass
seconds "import torch" "$PYTHON" -c "import torch"
seconds "import torch; torch.cuda.init()" "$PYTHON" -c "import torch; torch.cuda.init()"
seconds "import transformers" "$PYTHON" -c "import transformers"
seconds "import torch, transformers, modeling_qwen2" "$PYTHON" -c "import transformers.models.qwen2.modeling_qwen2"
seconds "cugraph-accel generate --help" "$PYTHON" -m cli generate --help

echo "== 2. generate under -X importtime: the 15 slowest imports, cumulative (nesting as indented)"
# shellcheck disable=SC2086 - GENERATE_ARGS is a list of words
timeout 60 "$PYTHON" -X importtime -m cli generate "$MODEL" --prompts "$OUT/prompts-1.jsonl" --max-new-tokens 128 \
  --buckets 1 --max-cache-len 1024 ${GENERATE_ARGS:-} > "$OUT/importtime-generate.log" 2> "$OUT/importtime.txt"
echo "exit code $?"
"$PYTHON" - "$OUT/importtime.txt" <<'PY'
import re, sys
rows = []
for line in open(sys.argv[1]):
    m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
    if m:
        rows.append((int(m.group(2)), len(m.group(3)), m.group(4)))
print(f"{len(rows)} modules imported, {sum(r[0] for r in rows if r[1] == 1) / 1e6:.2f} s in top-level imports")
for cumulative, depth, name in sorted(rows, reverse=True)[:15]:
    print(f"{cumulative / 1e6:8.3f} s  {' ' * (depth - 1)}{name}")
PY

echo "== 3. generate from a new process, three times: $MODEL batch 1, prompt 128, 128 new tokens"
for run in 1 2 3; do first_token "$MODEL" 1 "run$run"; done
