#!/usr/bin/env bash
# Stop 34, second call: verify of every other recipe with the preloaded attention on at batch 1 (stop 34
# item 1), and the CUDA fault suite beside it. One device call (DEADLINE s, default 550): capture --fuse +
# verify (REPEAT=1) in three lanes whose peaks add up to under the GPU's memory (bounds of stop 33: gemma
# 16.5, OLMoE at 1,024 ~23, mistral 7.2, qwen2-moe 7.4, Phi-3 at 1,024 ~25, qwen3-30b 65.2 GiB).
# Usage on the device machine: OUT=/some/dir bash benchmarks/preloaded_recipes_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
DEADLINE=${DEADLINE:-550} REPEAT=1 FAULTS=1 \
  ENTRIES="qwen3-30b-a3b:1024:fused:1-8 | gemma-2-2b:1024:fused olmoe-1b-7b:1024:fused \
  | mistral-sw-0.5b:1024:fused qwen2-moe-0.5b:1024:fused phi-3-mini-4k:1024:fused" \
  bash benchmarks/realsize_repeat.sh
