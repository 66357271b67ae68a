#!/usr/bin/env bash
# The GPU runs of this repository, one entry: run from the repository root on a GPU machine,
#
#   OUT=./gpu-out bash benchmarks/gpu.sh SUITE [SUITE...]
#
# Suites run in the order given, each part under its own `timeout`, all under one deadline (DEADLINE s,
# default 570) so that one invocation fits a 10-minute command; a part the time left cannot hold is skipped
# and says so. Everything a run writes goes into ONE archive, $OUT/results-<suites>.tar.gz (logs, JSON, CSV,
# tables), and the short tables come last on stdout; it exits 1 when a part failed. Suites (budget on one H200):
#   tests     every cuda-marked test but the real-size recipes, in WORKERS (8) processes, then the
#             tests marked alone by themselves; RUNS=n repeats it (TESTS="paths": only those) ~300 s
#   bench     bench --compare graph,fused at buckets 1,8,32: llama-3.2-1b at a KV cache of 16,384,
#             qwen2.5-0.5b and llama-3.1-8b at 1,024 (BENCH_ENTRIES model:cache[:fp8]); ms per step ~510 s
#             BASELINE=DIR (bench and verify): each bf16 entry again from the source tree in DIR
#   verify    capture --fuse + verify --repeat $REPEAT (default 2) of every recipe, in three lanes
#             side by side on the one GPU, or two phases on 80 GB (VERIFY_ENTRIES; see verify_lane; each
#             verify cut at VERIFY_LIMIT s, default 400: one recipe alone may take a call)          ~560 s
#   fp8       a fine-grained FP8 checkpoint of $FP8_FROM (llama-3.2-1b) written here (fp8_export), then
#             capture --fuse (FP8_MODE) + verify --repeat 5 of it beside FP8_VERIFY (the 8B and OLMoE with
#             --weights fp8; ";" between phases, as on 80 GB), then a bench of the checkpoint alone  ~500 s
#   tune      a bench on the tables as they are, cugraph-accel tune $TUNE_RECIPE (qwen2.5-0.5b), then a
#             bench in a new process whose header names the table it used; TUNE_WEIGHTS=fp8 or
#             fp8-block: the FP8 kernel's table, as --weights to all, then the bf16 fused step
#             (TUNE_COMPILE_WORKERS: tune's --compile-workers; its log says the configs tried a bucket) ~420 s
#   zoo       the zoo on CUDA (isolated children) beside the CPU emulation, and where they differ    ~420 s
#   faults    the CUDA fault suites (tests/verify/test_faults.py, test_fused_faults.py), then fault_sweep.py
#             (FAULT_SWEEP=--fuse: of the fused step)                                                ~540 s
#   profile   profile_step.py of the fused step, one process per PROFILE_ENTRIES model:cache[:weights
#             [:per-row]] (FP8 weights; the per-row graphs serve replays), batches 1,8,32, each process
#             cut at PROFILE_LIMIT s (default 170)                                                   ~510 s
#   generate  bench of the generate contenders (tok/s), first token of a new process, GPU tests      ~420 s
#   tp        (two GPUs) the tensor-parallel GPU tests, bench --tp 2 against --tp 1, profile_tp.py    ~560 s
#   trained   trains the GPU models of accelerate_graph/training (TRAINED_MODELS; TRAIN_ARGS, default 30 s each)
#             into TRAINED_DIR (scratch, not archived; each training.json is), then capture --fuse, verify
#             --repeat 5, generate, eval --fuse with an FP8 arm (EVAL_WEIGHTS, "" for none) on held-out text,
#             the eval fault tests, bf16 greedy agreement with HF (graphs and fused) and the verify faults on
#             each, side by side. The lanes outlast one call: TRAINED_PARTS (default all of train capture
#             verify generate eval eval-faults agreement verify-faults) runs some, e.g. the rest in a second
#             call on TRAINED_DIR, which a warm machine keeps, without train                          ~570 s
#   atscale   benchmarks/verify_at_scale.py side by side, one process each (ATSCALE_ENTRIES "recipe:flags|...",
#             flags joined by commas; default the 8B, OLMoE-1B-7B and Phi-3-mini with --fuse,--per-row: the
#             graphs serve replays): cases passed, the planted faults caught, the reference's time and peak ~200 s
#   serve     serve_load.py on $SERVE_RECIPE (llama-3.1-8b) with --fuse, prompt 128, output 128: our server at
#             1, 8, 32, 64 clients, then (SERVE_MODES) its engine alone, our fixed-batch generate and HF's
#             generate_batch; SERVE_CLIENT_PROCESSES spreads the clients over that many processes;
#             SERVE_PARTS="load compare" (either alone: the second when the first left it no time)  ~560 s
# More than one suite shares the deadline: a full run is one invocation per suite.
# SET="name=value ..." passes `--set name=value` to every CLI call and profile_step.py (`cugraph-accel settings`).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SUITES=(tests bench verify fp8 tune zoo faults profile generate tp trained atscale serve)
usage() { echo "usage: bash benchmarks/gpu.sh SUITE [SUITE...]; suites: ${SUITES[*]}" >&2; exit 2; }
[ $# -gt 0 ] || usage
for suite in "$@"; do
  [[ " ${SUITES[*]} " == *" $suite "* ]] || { echo "gpu.sh: no suite '$suite'; suites: ${SUITES[*]}" >&2; exit 2; }
done

START=$(date +%s) DEADLINE=${DEADLINE:-570}
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ARCHIVE="$OUT/results-$(IFS=-; echo "$*").tar.gz"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cugraph-accel-gpu.XXXXXX")
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-200}
export TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
# the server's packages where the machine lacks them: built into .serve-deps beforehand for its Python
# (benchmarks/README.md), without those the machine has; a machine with its own server packages keeps them
if [ -d .serve-deps ] && ! python3 -c "import fastapi, uvicorn, openai" 2>/dev/null; then
  PYTHONPATH="$PYTHONPATH:$PWD/.serve-deps"
fi
# NVLink multicast off in NCCL and torch: the tensor-parallel paths do not use it
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# a cold inductor cache shared by every part of this run: the first compile of a step is in its setup time
export TORCHINDUCTOR_CACHE_DIR="$WORK/inductor-cache"
SET_ARGS=()
for assignment in ${SET:-}; do SET_ARGS+=(--set "$assignment"); done
CLI=(python3 -m cli)  # an array, not a function: `timeout` runs programs
# BASELINE=DIR: bench and verify entries run again from the source tree in DIR (another commit, from `git
# archive`), right after ours: "unchanged" and "slower than before" are comparisons within one run on one GPU.
# Without --set and FP8 entries, which an older tree may not know.
BASELINE_CLI=()
if [ -n "${BASELINE:-}" ]; then
  BASELINE=$(cd "$BASELINE" && pwd) || { echo "gpu.sh: BASELINE=$BASELINE is no folder" >&2; exit 2; }
  BASELINE_CLI=(env -C "$BASELINE" PYTHONPATH="$BASELINE" python3 -m cli)
fi

left() { echo $((DEADLINE - ($(date +%s) - START))); }
# part NAME NEEDS LIMIT COMMAND...: COMMAND's output in $WORK/NAME.log; skipped when fewer than NEEDS seconds
# are left, cut at LIMIT seconds or the deadline; one line per part in $WORK/parts.tsv for the last table
part() {
  local name=$1 needs=$2 limit=$3 began rc
  shift 3
  if [ "$(left)" -lt "$needs" ]; then
    echo "$name: skipped ($(left) s left, needs ~$needs s)"
    printf '%s\tskipped\t0\n' "$name" >> "$WORK/parts.tsv"
    return 0
  fi
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  began=$(date +%s)
  timeout "$limit" "$@" > "$WORK/$name.log" 2>&1
  rc=$?
  [ "$rc" = 124 ] && rc="124 (cut at ${limit} s)"
  echo "$name: exit $rc in $(($(date +%s) - began)) s"
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - began))" >> "$WORK/parts.tsv"
  grep -E "^(FAILED|ERROR)|^error|Error:|passed|failed" "$WORK/$name.log" | cut -c1-240 | tail -n 4
}
TABLES=()  # summary.py calls printed last: "kind args..."
finish() {
  echo
  for table in "${TABLES[@]}"; do
    echo "== ${table%% *}"
    # shellcheck disable=SC2086 # a table entry is summary.py's words
    python3 benchmarks/summary.py $table 2>&1 | tee -a "$WORK/tables.txt"
  done
  echo "== parts (exit code, seconds)"
  column -t -s $'\t' "$WORK/parts.tsv" 2>/dev/null || cat "$WORK/parts.tsv" 2>/dev/null
  tar czf "$ARCHIVE" -C "$WORK" --exclude inductor-cache --exclude '*.inductor' --exclude '*.yaml' \
    --exclude 'prompts-*' . 2>/dev/null
  rm -rf "$WORK"
  echo "wrote $ARCHIVE in $(($(date +%s) - START)) s"
}
trap finish EXIT
trap 'exit 143' TERM INT  # a run stopped from outside still leaves its archive

environment() {
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c "import torch, transformers, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'triton', triton.__version__, 'transformers', transformers.__version__, 'GPUs', torch.cuda.device_count())"
    git rev-parse HEAD 2>/dev/null; } > "$WORK/environment.txt" 2>&1
  cat "$WORK/environment.txt"
}

# pytest where "no test selected" (exit 5) is not a failure: a TESTS narrowing may hold no test marked alone
pytest_some() { python3 -m pytest "$@"; local rc=$?; [ "$rc" = 5 ] && rc=0; return "$rc"; }
export -f pytest_some
tests_suite() {
  # WORKERS pytest processes share the GPU (compiling kernels is most of the time, and host-bound); the tests
  # marked alone (they fill or measure the whole GPU's memory) run after, by themselves, in one process. RUNS: the suite again.
  local run workers=()
  python3 -c "import xdist" 2>/dev/null && workers=(-n "${WORKERS:-8}" --dist worksteal)
  for run in $(seq 1 "${RUNS:-1}"); do
    # shellcheck disable=SC2086 # TESTS is a list of pytest paths
    part "tests-$run" 60 480 python3 -m pytest -m "cuda and not realsize and not alone" "${workers[@]}" \
      -q -p no:cacheprovider -rf --durations=25 ${TESTS:-tests}
    # shellcheck disable=SC2086
    part "tests-alone-$run" 30 240 bash -c 'pytest_some "$@"' _ -m "cuda and alone and not realsize" -q \
      -p no:cacheprovider -rf ${TESTS:-tests}
    TABLES+=("pytest $WORK/tests-$run.log $WORK/tests-alone-$run.log")
  done
}

bench_suite() {  # most wanted first: the 1B at 16,384 is the published batch-1 comparison
  local entry model cache weights name files=()
  # model:cache[:weights]: weights fp8 or fp8-block adds --weights (the same model twice compares them)
  for entry in ${BENCH_ENTRIES:-llama-3.2-1b:16384 qwen2.5-0.5b:1024 llama-3.1-8b:1024}; do
    IFS=: read -r model cache weights <<< "$entry"
    name=$model${weights:+-$weights}
    bench_entry "$name" "${CLI[@]}"
    [ -n "${BASELINE:-}" ] && [ -z "$weights" ] && bench_entry "$name-baseline" "${BASELINE_CLI[@]}"  # right after
  done
  TABLES+=("bench ${files[*]}")
}
bench_entry() {  # NAME CLI...: bench_suite's entry (its locals) benched with that CLI, into bench-NAME.*
  local out=$1 extra=()
  shift
  [ "$out" = "$name" ] && extra=("${SET_ARGS[@]}" ${weights:+--weights "$weights"})  # a baseline: bf16, no --set
  part "bench-$out" 60 170 "$@" bench "$model" --compare "${BENCH_COMPARE:-graph,fused}" --buckets 1,8,32 \
    --context "$cache" --steps "${BENCH_STEPS:-50}" --warmup 5 "${extra[@]}" \
    --json "$WORK/bench-$out.json" --csv "$WORK/bench-$out.csv"
  files+=("$WORK/bench-$out.csv")
}

# recipe:cache:mode[:buckets] entries (mode fused or plain; buckets joined by "-", 1-8-32 by default); "|"
# separates lanes that run side by side (verify compares numbers, not times, and much of it is host work), ";"
# phases that run one after the other. Each lane's first entries have the largest peaks (Qwen3-30B-A3B ~65 GiB,
# the 8B at 4,096 ~40, the 1B at 16,384 ~20): together under an H200's 139 GiB; a GPU of 80 GB takes two phases.
VERIFY_DEFAULT="qwen3-30b-a3b:1024:fused:1-8 qwen2.5-0.5b:1024:fused \
| llama-3.1-8b:4096:fused gemma-2-2b:1024:fused olmoe-1b-7b:1024:fused \
| llama-3.2-1b:16384:fused mistral-sw-0.5b:1024:fused qwen2-moe-0.5b:1024:fused phi-3-mini-4k:1024:fused"
VERIFY_80GB="qwen3-30b-a3b:1024:fused:1-8 | qwen2.5-0.5b:1024:fused mistral-sw-0.5b:1024:fused \
; llama-3.1-8b:4096:fused gemma-2-2b:1024:fused olmoe-1b-7b:1024:fused \
| llama-3.2-1b:16384:fused qwen2-moe-0.5b:1024:fused phi-3-mini-4k:1024:fused"
gpu_gib() {  # the first GPU's memory in GiB, empty without one
  nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | awk 'NR == 1 {print int($1 / 1024)}'
}
verify_lane() {  # ENTRY...: capture, then verify --repeat, one entry after the other
  local entry recipe cache mode buckets weights name fuse
  for entry in "$@"; do
    # recipe:cache:mode[:buckets[:weights]]; the recipe may be a model folder, weights fp8 or fp8-block
    IFS=: read -r recipe cache mode buckets weights <<< "$entry"
    name="$(basename "$recipe")-$cache-$mode${weights:+-$weights}" buckets=${buckets:-1-8-32} fuse=()
    [ "$mode" = fused ] && fuse=(--fuse)
    verify_entry "" "${CLI[@]}"
    [ -n "${BASELINE:-}" ] && [ -z "$weights" ] && verify_entry -baseline "${BASELINE_CLI[@]}"  # right after ours
  done
}
verify_entry() {  # SUFFIX CLI...: verify_lane's entry (its locals) captured and verified with that CLI
  local suffix=$1 extra=()
  shift
  [ -z "$suffix" ] && extra=("${SET_ARGS[@]}")  # the baseline tree may not know --set
  part "capture-$name$suffix" 60 150 "$@" capture "$recipe" "${fuse[@]}" --buckets "${buckets//-/,}" \
    --max-cache-len "$cache" "${extra[@]}" ${weights:+--weights "$weights"} ${VERIFY_DTYPE:+--dtype "$VERIFY_DTYPE"} \
    --plan "$WORK/$name$suffix.yaml"
  [ -f "$WORK/$name$suffix.yaml" ] && part "verify-$name$suffix" 60 "${VERIFY_LIMIT:-400}" "$@" verify --plan "$WORK/$name$suffix.yaml" \
    --steps 8 --repeat "${REPEAT:-2}" "${extra[@]}" --json "$WORK/verify-$name$suffix.json"
}
run_phases() {  # ENTRIES: ";" phases one after the other, each of "|" lanes of verify_lane side by side
  local phases phase lanes lane
  IFS=';' read -r -a phases <<< "$1"
  for phase in "${phases[@]}"; do
    IFS='|' read -r -a lanes <<< "$phase"
    for lane in "${lanes[@]}"; do
      # shellcheck disable=SC2086 # a lane is a space-separated list of entries
      verify_lane $lane &
    done
    wait
  done
}
verify_suite() {
  local entries=${VERIFY_ENTRIES:-}
  if [ -z "$entries" ]; then
    entries=$VERIFY_DEFAULT
    [ "$(gpu_gib)" -lt 100 ] 2>/dev/null && entries=$VERIFY_80GB
  fi
  run_phases "$entries"
  TABLES+=("verify $WORK" "agreement $WORK")
}

fp8_suite() {  # FP8 weights end to end: a fine-grained checkpoint made here, and recipes quantized on load
  local dir=${FP8_DIR:-${TMPDIR:-/tmp}/cugraph-accel-fp8} checkpoint entries name model cache weights="" files=()
  local REPEAT=${REPEAT:-5} VERIFY_DTYPE=bf16  # verify_lane's, for this suite's lanes (FP8 needs bf16)
  checkpoint="$dir/$(basename "${FP8_FROM:-llama-3.2-1b}")-fp8"
  rm -rf "$checkpoint" && mkdir -p "$dir"  # scratch, not archived
  part fp8-export 60 240 python3 -m accelerate_graph.quant.fp8_export "${FP8_FROM:-llama-3.2-1b}" "$checkpoint"
  # three lanes at --repeat 5 outlast the verify part's 400 s on an H100: there the 8B's lane runs first, alone
  entries=${FP8_VERIFY:-llama-3.1-8b:1024:fused::fp8 | olmoe-1b-7b:1024:fused::fp8}
  [ -z "${FP8_VERIFY:-}" ] && [ "$(gpu_gib)" -lt 100 ] 2>/dev/null && entries=${entries/ |/ ;}
  [ -d "$checkpoint" ] && entries+=" | $checkpoint:${FP8_CACHE:-1024}:${FP8_MODE:-fused}"
  run_phases "$entries"
  # then the checkpoint's step timed alone, as a bench entry (its weights are the checkpoint's)
  name=$(basename "$checkpoint") model=$checkpoint cache=${FP8_CACHE:-1024}
  [ -d "$checkpoint" ] && bench_entry "$name" "${CLI[@]}"
  TABLES+=("verify $WORK" "bench ${files[*]}")
}

tune_bench() {  # NAME RECIPE [ARGS...]: RECIPE's fused step at the tune's buckets, logged and written as bench-NAME
  local name=$1 recipe=$2
  shift 2
  part "bench-$name" 60 150 "${CLI[@]}" bench "$recipe" --compare fused --buckets "${TUNE_BUCKETS:-1,8}" --context 1024 \
    --steps "${BENCH_STEPS:-50}" --warmup 5 "${SET_ARGS[@]}" "$@" --json "$WORK/bench-$name.json" \
    --csv "$WORK/bench-$name.csv"
}
tune_suite() {  # the table goes to this run's cache folder (archived), not the user's
  local recipe=${TUNE_RECIPE:-qwen2.5-0.5b} weights=${TUNE_WEIGHTS:-}
  local -x XDG_CACHE_HOME="$WORK/cache"  # this suite's parts only: a later suite uses the tables as they were
  # what the tables served before the tune (the shipped one, if any), in this run: what tuning bought
  tune_bench before "$recipe" ${weights:+--weights "$weights"}
  part tune 120 $((${TUNE_BUDGET:-180} + 120)) "${CLI[@]}" tune "$recipe" --buckets "${TUNE_BUCKETS:-1,8}" \
    --budget-s "${TUNE_BUDGET:-180}" ${weights:+--weights "$weights"} --json "$WORK/tune.json" \
    ${TUNE_COMPILE_WORKERS:+--compile-workers "$TUNE_COMPILE_WORKERS"}
  tune_bench tuned "$recipe" ${weights:+--weights "$weights"}
  echo "the bench's header on its tuning table:"
  grep -iE "tuning|table" "$WORK/bench-tuned.log" | head -n 4
  (cd "$WORK" && find cache -name '*.json' -printf 'the table, in the archive: %p\n' 2>/dev/null)
  TABLES+=("bench $WORK/bench-before.csv $WORK/bench-tuned.csv")  # one table, the rows before the tune above
  TABLES+=("tune $WORK/tune.json")
  [ -n "$weights" ] || return 0
  # FP8's aims are also against the bf16 fused step: that step in the same run, on its own shipped table
  tune_bench bf16 "$recipe"
  TABLES+=("bench $WORK/bench-bf16.csv")
}

zoo_suite() {  # the CPU emulation with capped threads in the background, so both share the cores
  OMP_NUM_THREADS=2 part zoo-cpu 60 420 "${CLI[@]}" zoo --device cpu --no-isolate --json "$WORK/zoo-cpu.json" \
    --markdown "$WORK/ZOO-cpu.md" &
  OMP_NUM_THREADS=1 part zoo 60 420 "${CLI[@]}" zoo --device cuda --isolate --workers "${ZOO_WORKERS:-8}" --timeout 75 \
    --steps 8 --json "$WORK/zoo.json" --markdown "$WORK/ZOO.md"
  wait
  TABLES+=("zoo $WORK")
}

faults_suite() {  # alone: a fault ending in a device-side assert would poison other tests' CUDA context
  part faults 60 240 python3 -m pytest -m cuda -q -p no:cacheprovider -rf tests/verify/test_faults.py \
    tests/verify/test_fused_faults.py
  # FAULT_SWEEP="--fuse": the sweep of the fused step (compiled layers on a GPU) instead of plain graphs
  part fault-sweep 60 300 python3 benchmarks/fault_sweep.py --devices cuda --rounds 6 --no-docs ${FAULT_SWEEP:-}
  grep -E "^\| cuda" "$WORK/fault-sweep.log" 2>/dev/null
  TABLES+=("pytest $WORK/faults.log")
}

profile_suite() {  # one process per entry: the ways of one process are not on equal terms
  local entry model cache weights rows name extra
  # model:cache[:weights[:per-row]]: weights fp8 or fp8-block (bf16 model), per-row the graphs serve replays
  for entry in ${PROFILE_ENTRIES:-qwen2.5-0.5b:1024 llama-3.2-1b:16384 llama-3.1-8b:1024}; do
    IFS=: read -r model cache weights rows <<< "$entry"
    name=$model${weights:+-$weights}${rows:+-$rows} extra=()
    [ -n "$weights" ] && extra+=(--weights "$weights" --dtype bf16)
    [ "$rows" = per-row ] && extra+=(--per-row)
    part "profile-$name" 60 "${PROFILE_LIMIT:-170}" python3 benchmarks/profile_step.py "$model" --cache "$cache" --batches 1,8,32 \
      --ways "${PROFILE_WAYS:-fused}" --top 8 "${extra[@]}" "${SET_ARGS[@]}" --json "$WORK/profile-$name.json"
    grep -E "replay|kernels," "$WORK/profile-$name.log" | cut -c1-200
  done
}

generate_suite() {
  part generate-bench 60 240 "${CLI[@]}" bench qwen2.5-0.5b \
    --compare hf-eager,hf-generate,drop-in,drop-in-fused,generate,generate-fused --buckets 1,8,32 --context 1024 \
    --new-tokens 128 "${SET_ARGS[@]}" --json "$WORK/generate-bench.json"
  part first-token 30 200 python3 benchmarks/first_token.py qwen2.5-0.5b --batches 1,8,32 --timeout 60 \
    --extra "${SET_ARGS[*]}" --json "$WORK/first-token.json"
  part generate-tests 30 120 python3 -m pytest -m cuda -q -p no:cacheprovider -rf tests/generate
  TABLES+=("generate $WORK" "pytest $WORK/generate-tests.log")
}

tp_suite() {  # two GPUs: the 8B recipe split over both against one, cache 1,024
  local recipe=recipes/llama-3.1-8b.yaml
  local shape=(--buckets 1,8,32 --context 1024 --context-buckets full --steps 50 --warmup 5)
  part tp-tests 90 300 python3 -m pytest -m cuda -q -p no:cacheprovider -rf --durations=8 tests/distributed
  part bench-tp2 60 150 "${CLI[@]}" bench "$recipe" --tp 2 --compare graph,fused "${shape[@]}" "${SET_ARGS[@]}" \
    --csv "$WORK/bench-tp2.csv"
  part bench-tp1 60 120 "${CLI[@]}" bench "$recipe" --tp 1 --compare graph,fused "${shape[@]}" "${SET_ARGS[@]}" \
    --csv "$WORK/bench-tp1.csv"
  part profile-tp2 45 120 python3 benchmarks/profile_tp.py "$recipe" --batch 1 --fuse --top 8 "${SET_ARGS[@]}" \
    --json "$WORK/profile-tp2.json"
  grep -E "^tp2 " "$WORK/profile-tp2.log" 2>/dev/null
  TABLES+=("pytest $WORK/tp-tests.log" "bench $WORK/bench-tp2.csv $WORK/bench-tp1.csv")
}

TRAINED_PROMPT=$'import os\n\n\ndef read_config(path):\n    # Return the settings in the file at path.\n'
trained_lane() {  # FOLDER: the engine on one trained model (verify, generate, eval; logs in the archive)
  local folder=$1 name eval_weights=${EVAL_WEIGHTS-fp8}
  name=$(basename "$folder")
  if trained_part capture verify; then
    part "capture-$name" 60 150 "${CLI[@]}" capture "$folder" --fuse --buckets 1,8 --max-cache-len 1024 \
      "${SET_ARGS[@]}" --plan "$WORK/$name.yaml"
  fi
  trained_part verify && [ -f "$WORK/$name.yaml" ] && part "verify-$name" 60 200 "${CLI[@]}" verify \
    --plan "$WORK/$name.yaml" --steps 8 --repeat "${REPEAT:-5}" "${SET_ARGS[@]}" --json "$WORK/verify-$name.json"
  trained_part generate && part "generate-$name" 30 120 "${CLI[@]}" generate "$folder" --fuse \
    --prompt "$TRAINED_PROMPT" --max-new-tokens 64 --max-cache-len 1024 "${SET_ARGS[@]}" \
    --json "$WORK/generate-$name.json"
  # EVAL_WEIGHTS (fp8 by default; "" for none) adds an arm of what FP8 costs against the same reference
  trained_part eval && part "eval-$name" 60 240 "${CLI[@]}" eval "$folder" --text "$EVAL_TEXT" --fuse --buckets 8,32 \
    --windows 64 --window-len 256 --max-cache-len 1024 "${SET_ARGS[@]}" ${eval_weights:+--weights "$eval_weights"} \
    --json "$WORK/eval-$name.json"
  # the planted faults (a 1.01 logit scale, a skewed rotary angle) must fail the gate on these weights too
  trained_part eval-faults && part "eval-faults-$name" 60 200 env EVAL_MODEL_DIR="$folder" python3 -m pytest -q \
    -p no:cacheprovider -rf tests/eval/test_gpu_eval.py
  # greedy bf16 text of our graphs and the fused forward against HF bf16's, next to HF bf16's against float32
  trained_part agreement && part "agreement-$name" 60 180 python3 -m accelerate_graph.eval.agreement "$folder" \
    --prompts 16 --new-tokens 64 --fuse --json "$WORK/agreement-$name.json"
  # every planted verify fault fails on these weights, and the harmless ones pass
  trained_part verify-faults && part "verify-faults-$name" 60 200 env FAULTS_MODEL_DIR="$folder" python3 -m pytest \
    -m cuda -q -p no:cacheprovider -rf tests/verify/test_faults_trained.py
  return 0
}
picked() {  # LIST NAME...: whether the space-separated LIST (a suite's parts to run) names any of the NAMEs
  local one
  for one in "${@:2}"; do [[ " $1 " == *" $one "* ]] && return 0; done
  return 1
}
trained_part() {  # NAME...: whether TRAINED_PARTS (default: all) names any of them
  picked "${TRAINED_PARTS:-train capture verify generate eval eval-faults agreement verify-faults}" "$@"
}
trained_suite() {  # one training process: the models share the corpus and tokenizer
  local dir=${TRAINED_DIR:-${TMPDIR:-/tmp}/cugraph-accel-trained} models name out
  read -r -a models <<< "${TRAINED_MODELS:-llama-gqa-100m qwen2-moe-small gemma2-sliding}"
  mkdir -p "$dir"
  # 30 s per model (1.5 min of training for the three) leaves the lanes their time within the deadline
  # shellcheck disable=SC2086 # TRAIN_ARGS is a list of options, e.g. "--budget-s 30"
  if trained_part train; then
    # --out is the parent of several models' folders, but one model's own folder
    out=$dir && [ "${#models[@]}" -eq 1 ] && out=$dir/${models[0]}
    part train 120 300 python3 -m accelerate_graph.training "${models[@]}" --out "$out" ${TRAIN_ARGS:---budget-s 30}
    grep -E "held-out|error" "$WORK/train.log"
  fi
  # eval text: held-out files (held out by path hash, so by any corpus size) of a larger corpus
  EVAL_TEXT="$dir/eval-text.txt"
  trained_part eval && python3 -c 'import sys; from accelerate_graph.training.corpus import load_corpus
open(sys.argv[1], "w").write("".join(load_corpus(64_000_000).held_out)[:400_000])' "$EVAL_TEXT"
  for name in "${models[@]}"; do
    [ -f "$dir/$name/training.json" ] && cp "$dir/$name/training.json" "$WORK/training-$name.json"
    [ -f "$dir/$name/config.json" ] && trained_lane "$dir/$name" &
  done
  wait
  TABLES+=("verify $WORK" "agreement $WORK" "eval $WORK")
}

atscale_suite() {  # their peaks (22, 19 and 20 GiB on an H100) fit one GPU together
  local entry entries recipe flags name
  IFS='|' read -r -a entries <<< \
    "${ATSCALE_ENTRIES:-llama-3.1-8b:--fuse,--per-row|olmoe-1b-7b:--fuse,--per-row|phi-3-mini-4k:--fuse,--per-row}"
  for entry in "${entries[@]}"; do
    IFS=: read -r recipe flags <<< "${entry// /}"
    name=${flags//--/} name="atscale-$(basename "$recipe" .yaml)${name:+-${name//,/-}}"
    # shellcheck disable=SC2086 # the flags are words
    part "$name" 90 420 python3 benchmarks/verify_at_scale.py "$recipe" ${flags//,/ } --buckets 1,8,32 &
  done
  wait
  grep -E "^verify:|^fault|^float32" "$WORK"/atscale-*.log 2>/dev/null | sed "s|^$WORK/||" | cut -c1-200
}

serve_suite() {  # one server process, then the other ways in this one (each captures the recipe anew)
  local load=(python3 benchmarks/serve_load.py "${SERVE_RECIPE:-llama-3.1-8b}" --fuse --prompt-len 128 --output-len 128
    --max-cache-len "${SERVE_CACHE:-1024}" --clients "${SERVE_CLIENTS:-1,8,32,64}"
    --client-processes "${SERVE_CLIENT_PROCESSES:-1}" "${SET_ARGS[@]}")
  picked "${SERVE_PARTS:-load compare}" load &&
    part serve-load 240 420 "${load[@]}" --modes server --json "$WORK/serve-load.json"
  picked "${SERVE_PARTS:-load compare}" compare &&
    part serve-compare 200 400 "${load[@]}" --modes "${SERVE_MODES:-engine,generate,hf-batch}" \
      --json "$WORK/serve-compare.json"
  # the tables: the modes' rows, and the rows of the server's own count (indented)
  grep -hE "^(mode|server|engine|generate|hf-batch) |^ +[0-9]" "$WORK/serve-load.log" "$WORK/serve-compare.log" \
    2>/dev/null | grep -v "{"
}

environment
for suite in "$@"; do
  echo "== $suite ($(left) s left)"
  "${suite}_suite"
done
# exit 1 when a part failed or was cut (the parts table says which), 0 when every part ran and passed
! cut -f2 "$WORK/parts.tsv" 2>/dev/null | grep -qvE '^(0|skipped)$'
