#!/usr/bin/env bash
# Issue 6 on the GPU, each part one device call under its 10-minute limit.
#   probe: the fused GPU test's recompilations (logged), kernels per step (benchmarks/profile_step.py: HF's step, fused, fused without batch 1's GEMV
#          lowering), a quick graph-vs-fused bench at cache 1024, then every cuda-marked test.
#   tests: every cuda-marked test, then kernels reloaded from inductor's cache against freshly compiled ones (two new
#          processes profiling batch 1 at cache 4096 over one cache folder, per-kernel differences), then a cold fused
#          bench at cache 4096 (its setup column is the cold compile).
#   final: the fused path's GPU tests, the Qwen2.5-0.5B bench (graph, fused, torch.compile reduce-overhead at cache lengths 1024
#          and 4096, buckets 1/8/16/32), then Llama-3.2-1B graph vs fused in the time left.
# Usage on the device machine: OUT=/some/dir bash benchmarks/issue6_gpu.sh probe|tests|final
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-220} TRANSFORMERS_VERBOSITY=error
OUT=${OUT:-/tmp/cugraph-accel-out}
mkdir -p "$OUT"
export TORCHINDUCTOR_CACHE_DIR="$OUT/inductor-cache"  # cold: nothing compiled before this run
DEADLINE=${DEADLINE:-560}  # seconds for the whole script
left() { echo $((DEADLINE - SECONDS)); }
table() { grep -E "^note|^error|fused:" "$1" | head -n 12; sed -n '/decode step, cache length/,/x floor:/p' "$1"; }

if [ "${1:-final}" = probe ]; then
  echo "== recompilations of the fused GPU test"
  TORCH_LOGS=recompiles timeout 90 python3 -m pytest -m cuda -q -s -p no:cacheprovider -rf tests/fused/test_gpu_fused.py \
    -k compile_once 2>&1 | tee "$OUT/recompiles.log" | grep -E "^\s*- |passed|failed" | cut -c1-400 | tail -n 12
  echo "== kernels per step"
  timeout 170 python3 benchmarks/profile_step.py qwen2.5-0.5b --batches 1,32 --ways "${WAYS:-fused}" \
    --json "$OUT/profile.json" 2>&1 \
    | tee "$OUT/profile.log" | grep -E "kernels|failed" | tail -n 12
  echo "== qwen2.5-0.5b graph vs fused, cache 1024 ($(left) s left)"
  rm -rf "$TORCHINDUCTOR_CACHE_DIR"
  timeout 150 python3 -m cli bench qwen2.5-0.5b --compare graph,fused --buckets 1,8,16,32 --steps 50 --warmup 5 \
    --json "$OUT/bench-probe.json" > "$OUT/bench-probe.log" 2>&1
  echo "bench exit code $?"
  table "$OUT/bench-probe.log"
  echo "== every cuda-marked test ($(left) s left)"
  timeout "$(( $(left) - 5 ))" python3 -m pytest -m cuda -q -p no:cacheprovider -rf --durations=8 tests 2>&1 \
    | tee "$OUT/gpu-tests.log" | tail -n 16
elif [ "$1" = tests ]; then
  echo "== every cuda-marked test"
  timeout 330 python3 -m pytest -m cuda -q -p no:cacheprovider -rf --durations=5 tests 2>&1 \
    | tee "$OUT/gpu-tests.log" | tail -n 12
  echo "== batch 1 kernels, compiled then reloaded from inductor's cache ($(left) s left)"
  rm -rf "$TORCHINDUCTOR_CACHE_DIR"
  for run in compiled reloaded; do
    timeout 100 python3 benchmarks/profile_step.py qwen2.5-0.5b --batches 1 --cache 4096 --ways fused --top 6 \
      --json "$OUT/kernels-$run.json" > "$OUT/kernels-$run.log" 2>&1
    echo "$run: exit $?; $(grep -E 'compiled in|kernels,' "$OUT/kernels-$run.log" | cut -c1-100 | tr '\n' ' ')"
  done
  python3 - "$OUT/kernels-compiled.json" "$OUT/kernels-reloaded.json" <<'PY'
import json, sys
fresh, reloaded = (json.load(open(path)) for path in sys.argv[1:])
for a, b in zip(fresh, reloaded):
    ka, kb = a["by_kernel_us"], b["by_kernel_us"]
    delta = sorted(((kb.get(n, 0) - ka.get(n, 0), n) for n in set(ka) | set(kb)), key=lambda d: -abs(d[0]))
    print(f"slots {a['slots']}: {a['kernel_us']:.0f} -> {b['kernel_us']:.0f} us; largest per-kernel changes: "
          + "; ".join(f"{d:+.1f} {n[:50]}" for d, n in delta[:3]))
PY
  echo "== cold fused bench, cache 4096 ($(left) s left)"
  rm -rf "$TORCHINDUCTOR_CACHE_DIR"
  timeout "$(( $(left) - 5 ))" python3 -m cli bench qwen2.5-0.5b --compare fused --buckets 1,8,16,32 --context 4096 \
    --steps 50 --warmup 5 > "$OUT/bench-cold-4096.log" 2>&1
  echo "bench exit code $?"
  table "$OUT/bench-cold-4096.log"
else
  echo "== GPU tests of the fused path"
  timeout 100 python3 -m pytest -m cuda -q -p no:cacheprovider -rf tests/fused/test_gpu_fused.py 2>&1 \
    | tee "$OUT/gpu-tests-fused.log" | tail -n 3
  rm -rf "$TORCHINDUCTOR_CACHE_DIR"
  echo "== qwen2.5-0.5b ($(left) s left)"
  timeout "$(( $(left) - 100 ))" python3 -m cli bench qwen2.5-0.5b --compare graph,fused,compile --buckets 1,8,16,32 \
    --context 1024,4096 --steps 50 --warmup 5 --json "$OUT/bench-qwen.json" --csv "$OUT/bench-qwen.csv" \
    --plot "$OUT/bench-qwen.png" > "$OUT/bench-qwen.log" 2>&1
  echo "bench exit code $?"
  echo "== llama-3.2-1b ($(left) s left)"
  timeout "$(( $(left) - 5 ))" python3 -m cli bench llama-3.2-1b --compare graph,fused --buckets 1,8,16,32 \
    --steps 50 --warmup 5 --json "$OUT/bench-llama.json" > "$OUT/bench-llama.log" 2>&1
  echo "bench exit code $?"
  table "$OUT/bench-qwen.log"; table "$OUT/bench-llama.log"
fi
rm -rf "$OUT/inductor-cache"
