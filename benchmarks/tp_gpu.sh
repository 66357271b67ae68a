#!/usr/bin/env bash
# Issue 17 on two H200s (device kind nvidia-h200-x2), each part one device call:
#   tests (about 1 min): the cuda-marked tp tests (tiny llama on 2 GPUs: capture, verify, bench, exits timed).
#   run   (about 5 min): a Llama-3.1-8B shape at --tp 2, buckets 1,8,32: capture, verify (also against one
#         GPU), bench eager/graph/fused (FUSED=0: no fused) at --tp 2 and --tp 1, every command's exit timed,
#         a short table last.
# Usage on the device machine: OUT=/some/dir bash benchmarks/tp_gpu.sh tests|run
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-200} TRANSFORMERS_VERBOSITY=error
# Required on these machines: NVLink multicast off in NCCL and PyTorch (it can take the host's GPUs out of service).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/cugraph-accel-out}
mkdir -p "$OUT"
export TORCHINDUCTOR_CACHE_DIR="$OUT/inductor-cache"
RECIPE=recipes/llama-3.1-8b.yaml
if [ ! -f "$RECIPE" ]; then  # the recipe may not have landed yet: the same shape, written here
  RECIPE="$OUT/llama-3.1-8b.yaml"
  cat > "$RECIPE" <<'YAML'
name: llama-3.1-8b
description: Llama-3.1-8B shape (32 layers, hidden 4096, GQA 32/8, vocab 128256), random weights
model_type: llama
seed: 0
config:
  hidden_size: 4096
  intermediate_size: 14336
  num_hidden_layers: 32
  num_attention_heads: 32
  num_key_value_heads: 8
  head_dim: 128
  vocab_size: 128256
  max_position_embeddings: 131072
  rope_theta: 500000.0
  rope_scaling: {rope_type: llama3, factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position_embeddings: 8192}
  rms_norm_eps: 1.0e-05
  tie_word_embeddings: false
defaults:
  buckets: [1, 8, 32]
  max_cache_len: 1024
  prompt_len: 128
YAML
fi
SHAPE=(--buckets 1,8,32 --max-cache-len 1024 --context-buckets full)
BENCH_SHAPE=(--buckets 1,8,32 --context 1024 --context-buckets full)
COMPARE=eager,graph; [ "${FUSED:-1}" = 1 ] && COMPARE=$COMPARE,fused
timed() { local name=$1; shift; echo "$name: $(python3 benchmarks/timed_exit.py "$OUT/$name.log" -- "$@")"; grep -E "^error|^note: rank|teardown" "$OUT/$name.log" | head -n 3; }

python3 -c 'import torch; print("GPUs:", torch.cuda.device_count(), torch.__version__)'
if [ "${1:-run}" = tests ]; then
  timed tp-tests timeout 300 python3 -m pytest -m cuda -q -p no:cacheprovider -rf --durations=4 tests/distributed
  tail -n 8 "$OUT/tp-tests.log"
  exit 0
fi
timed capture-tp2 timeout 150 python3 -m cli capture "$RECIPE" --tp 2 "${SHAPE[@]}" --plan "$OUT/tp2.plan.yaml"
timed verify-tp2 timeout 150 python3 -m cli verify --plan "$OUT/tp2.plan.yaml" --steps 4
grep -E "verified|verify failed" "$OUT/verify-tp2.log"
timed bench-tp2 timeout 200 python3 -m cli bench "$RECIPE" --tp 2 "${BENCH_SHAPE[@]}" --compare "$COMPARE" --steps 50 \
  --warmup 5 --csv "$OUT/bench-tp2.csv"
timed bench-tp1 timeout 200 python3 -m cli bench "$RECIPE" --tp 1 "${BENCH_SHAPE[@]}" --compare "$COMPARE" --steps 50 \
  --warmup 5 --csv "$OUT/bench-tp1.csv"
python3 - "$OUT/bench-tp1.csv" "$OUT/bench-tp2.csv" <<'PY'
import csv, sys
rows = {}
for tp, path in zip((1, 2), sys.argv[1:]):
    try:
        for r in csv.DictReader(open(path)):
            if r["kind"] == "step":
                rows[(int(r["bucket"]), r["contender"], tp)] = (float(r["median_ms"]), float(r["floor_ms"]))
    except OSError:
        print(f"no results at {path}")
print("median ms per decode step, Llama-3.1-8B shape, bf16, cache 1024 (floor: bytes one rank moves / bandwidth)")
print(f"{'batch':>5} {'contender':>9} {'tp1 ms':>8} {'tp2 ms':>8} {'tp2/tp1':>8} {'floor1':>7} {'floor2':>7}")
for batch, contender in sorted({(b, c) for b, c, _ in rows}):
    one, two = rows.get((batch, contender, 1)), rows.get((batch, contender, 2))
    ratio = f"{two[0] / one[0]:.3f}" if one and two else "-"
    cell = lambda v, i: f"{v[i]:.3f}" if v else "-"
    print(f"{batch:>5} {contender:>9} {cell(one, 0):>8} {cell(two, 0):>8} {ratio:>8} {cell(one, 1):>7} {cell(two, 1):>7}")
best1 = min((v[0] for (b, c, t), v in rows.items() if b == 1 and t == 1), default=None)
best2 = min((v[0] for (b, c, t), v in rows.items() if b == 1 and t == 2), default=None)
if best1 and best2:
    print(f"batch 1, fastest mode: tp2 {best2:.3f} ms / tp1 {best1:.3f} ms = {best2 / best1:.3f}x (issue 17 asks <= 0.65x)")
PY
