#!/usr/bin/env bash
# The zoo on the GPU: every causal-LM type transformers knows, one child process per type on CUDA (real
# graphs, bf16), side by side with the same matrix under the CPU emulation on this machine's CPU; then
# where the two planned differently. Writes $OUT/ZOO.md, $OUT/zoo.json, $OUT/zoo-cpu.json (+ logs); the
# counts come last. A few minutes on one H200 with 16 cores.
# Usage on the device machine: OUT=/some/dir bash benchmarks/zoo_gpu.sh [extra zoo args, e.g. --types llama,qwen2]
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/cugraph-accel-out}
WORKERS=${WORKERS:-8}  # children at a time: each is a python process with its own CUDA context on the one GPU
mkdir -p "$OUT"
ca() { python3 -m cli "$@"; }

{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader;
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"; } 2>&1 | tee "$OUT/env.txt"

echo "== zoo: the CPU emulation in the background, CUDA graphs isolated ($WORKERS children at a time)"
# Thread counts are capped so the CPU run and the children share the cores instead of fighting for them.
OMP_NUM_THREADS=2 ca zoo --device cpu --no-isolate --json "$OUT/zoo-cpu.json" --markdown "$OUT/ZOO-cpu.md" "$@" \
  > "$OUT/zoo-cpu.log" 2>&1 &
cpu_pid=$!
OMP_NUM_THREADS=1 ca zoo --device cuda --isolate --workers "$WORKERS" --timeout 75 --steps 8 \
  --json "$OUT/zoo.json" --markdown "$OUT/ZOO.md" "$@" > "$OUT/zoo.log" 2>&1
cuda_rc=$?
wait "$cpu_pid"
echo "zoo exit code on CUDA: $cuda_rc (1: a type with a working static cache failed verify or crashed)"

python3 - "$OUT" <<'PY'
import sys
from pathlib import Path

from accelerate_graph.zoo.report import compare_files, counts_line, read_results

out = Path(sys.argv[1])
runs = {"CPU emulation": out / "zoo-cpu.json", "CUDA graphs": out / "zoo.json"}
missing = [name for name, path in runs.items() if not path.exists()]
if missing:
    sys.exit(f"no results from {', '.join(missing)}: see zoo.log / zoo-cpu.log")
print("== where the CPU emulation planned differently from CUDA (mode or hazardous modules); also in ZOO.md")
print("\n".join(compare_files(runs["CUDA graphs"], runs["CPU emulation"], out / "ZOO.md")) or "none")
for name, path in runs.items():
    failed = [r for r in read_results(path) if r.failed]
    print(f"== failures past a working static cache, {name}")
    print("\n".join(f"{r.model_type}: {r.status} at {r.stage}: {r.reason[:240]}" for r in failed) or "none")
print("== counts")
for name, path in runs.items():
    print(f"{name}: {counts_line(read_results(path))}")
PY
