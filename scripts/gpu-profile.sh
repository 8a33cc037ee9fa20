#!/usr/bin/env bash
# Where a CUDA model's decode step spends its time, kernel by kernel: Nsight
# Compute times each kernel of one steady-state step of cuda_model_bench
# (graphs off, clocks left alone) and ncu_summary.py sums them by kernel.
#   bash scripts/gpu-profile.sh [PACK=.gpu] [OUT_DIR=gpu-out] [MODEL...]
# MODEL: target (the default target; needs models/), draft or llama_1b
# (default: target llama_1b). Writes OUT_DIR/ncu_<model>.csv and prints the
# summary. ncu serialises kernels: the times are each kernel alone, the sum
# is the step without launch gaps.
set -uo pipefail
pack=${1:-.gpu}
out=${2:-gpu-out}
shift $(( $# < 2 ? $# : 2 ))
models=("$@")
[ ${#models[@]} -eq 0 ] && models=(target llama_1b)
mkdir -p "$out"
export LD_LIBRARY_PATH="$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
for model in "${models[@]}"; do
  # Skipped: the random model's fills, the 128-token prefill, the accept and
  # the warm-up; then three steps' kernels (layers x 6 + 2 launches each).
  ncu --clock-control none --cache-control none --csv --metrics gpu__time_duration.sum --launch-skip 800 --launch-count 450 \
    "$pack/bin/cuda_model_bench" --benchmark_filter="BM_Step/$model/batch:1/tokens:1/" --benchmark_min_time=2 \
    > "$out/ncu_$model.csv" 2> "$out/ncu_$model.err" || status=1
  echo "== $model"
  python3 "$(dirname "$0")/ncu_summary.py" "$out/ncu_$model.csv" || status=1
  rm -f "$out/ncu_$model.err"
done
exit $status
