# Sourced by the one-call GPU scripts: a deadline for the whole call, and parts that run only while the
# time they need is left. Set before sourcing: DEADLINE (s), LOGS (a folder), SHOW (a grep -E pattern of
# the log lines each part prints after its exit line).
# The environment every part shares: the repo on PYTHONPATH, unbuffered output, wide tables, quiet
# transformers, and NVLink multicast off in NCCL and PyTorch (required on these machines; our launcher
# sets it in every rank too).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
START=$(date +%s)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-200} TRANSFORMERS_VERBOSITY=error
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
FINAL=${OUT:-/tmp/cugraph-accel-out}; rm -rf "$LOGS"; mkdir -p "$LOGS" "$FINAL"
export TORCHINDUCTOR_CACHE_DIR="$LOGS/inductor-cache"  # shared by every part: later compiles hit the cache
left() { echo $(( DEADLINE - ($(date +%s) - START) )); }
# run NAME NEEDS_S LIMIT_S COMMAND...: logged to $LOGS/NAME.log, its exit timed (benchmarks/timed_exit.py);
# skipped when fewer than NEEDS_S seconds are left, cut at LIMIT_S or the deadline
run() {
  local name=$1 needs=$2 limit=$3; shift 3
  if [ "$(left)" -lt "$needs" ]; then echo "$name: skipped ($(left) s left, needs ~$needs s)"; return 0; fi
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  echo "$name: $(python3 benchmarks/timed_exit.py "$LOGS/$name.log" -- timeout "$limit" "$@")"
  grep -E "$SHOW" "$LOGS/$name.log" | cut -c1-330 | head -n 6
}
