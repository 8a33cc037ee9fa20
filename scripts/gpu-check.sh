#!/usr/bin/env bash
# The device check: on a CUDA machine, with the binaries scripts/gpu-pack.sh
# packed, runs the CUDA tests, the CUDA tests under compute-sanitizer's
# memcheck, a device-to-device bandwidth probe, the kernel benchmarks, the
# CUDA model's step benchmarks and the registry's methods decoding on it;
# writes logs and JSON into OUT_DIR and prints a summary against the goals
# last. Sized to finish in a few minutes on an H100 / H200. The methods run
# second, after the tests: of the stages, theirs is the code that has run
# least on a device.
#   bash scripts/gpu-check.sh [PACK=.gpu] [OUT_DIR=gpu-out]
# BENCH_FILTER (a Google Benchmark regex; default: the goals' shapes, V = 32k
# and 128k, batch 1 and 64, k = 4) picks the kernel benchmarks, BENCH_REPS
# their repetitions (default 1),
# MEMCHECK_FILTER (a Catch2 test spec, default "[cuda]") the memcheck run,
# MODEL_BENCH_FILTER the model benchmarks, METHODS_ARGS cuda_methods_bench's
# options (default: chain and magicdec against autoregressive decoding at
# batch 1, 8, 32 and contexts 512, 1024), MODEL_GRAPHS_FILTER (unset: none)
# those run again with CUDA graphs, PROFILE (unset: none; e.g. "target
# llama_1b") the models whose decode step gpu-profile.sh times kernel by
# kernel; T_TEST, T_MEMCHECK, T_KERNELS (0: no kernel benchmarks), T_MODEL,
# T_METHODS (0: no methods benchmark), T_CLI (0: no command-line check), T_DUO
# (0: no DuoDecoding split, GPU target and host draft) and
# T_PROFILE, T_PYTHON (0: no Python package step) each stage's time limit in
# seconds. T_TOTAL (default 450) bounds the whole check: a device session has
# 15 minutes for all its runs, so each stage gets at most what is left of it,
# and a stage with under 20 s left is skipped and named.
set -uo pipefail
pack=${1:-.gpu}
out=${2:-gpu-out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
started=$(date +%s)
step() { echo; echo "== $* ($(date -u +%H:%M:%S))"; }
# limit SECONDS: the stage's own limit, cut to what is left of T_TOTAL.
limit() {
  local left=$(( ${T_TOTAL:-450} - ($(date +%s) - started) ))
  if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}
# fits NAME SECONDS: false (and says so) when the stage has under 20 s left.
fits() {
  if [ "$(limit "$2")" -lt 20 ]; then echo "== $1: skipped, T_TOTAL=${T_TOTAL:-450} s spent"; skipped=1; return 1; fi
}
skipped=0

step device
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv | tee "$out/device.txt"

step "cuda tests"
if fits "cuda tests" "${T_TEST:-240}" && ! timeout "$(limit "${T_TEST:-240}")" "$pack/bin/cuda_test" --durations yes > "$out/cuda_test.log" 2>&1; then status=1; fi
tail -4 "$out/cuda_test.log" 2>/dev/null

if [ "${T_CLI:-90}" != 0 ] && [ -x "$pack/bin/specdec" ]; then
  step "the command line: specdec generate and bench --device cuda on the default models (greedy outputs checked)"
  if fits "command line" "${T_CLI:-90}" && ! timeout "$(limit "${T_CLI:-90}")" bash "$(dirname "$0")/../tests/cli/cuda_cli_test.sh" \
      "$pack/bin/specdec" . > "$out/cli_cuda.log" 2>&1; then status=1; fi
  grep -E "^(method|target|speedup|check)|FAIL|passed|skipped" "$out/cli_cuda.log" 2>/dev/null
fi

if [ "${T_DUO:-100}" != 0 ] && [ -x "$pack/bin/specdec" ]; then
  step "DuoDecoding's split: the target on the GPU, the draft on host cores (duo:host_draft), beside chain SD and duo with the draft on the GPU (greedy outputs checked)"
  if fits duo "${T_DUO:-100}" && ! timeout "$(limit "${T_DUO:-100}")" "$pack/bin/specdec" bench --device cuda \
      --prompts data/prompts/prose.jsonl --prompts data/prompts/code.jsonl --num-prompts 4 --max-new-tokens 64 \
      --batch 1 --method chain:k=4 --method duo --method duo:host_draft=models/draft \
      --method duo:host_draft=models/draft:concurrent=0 --method duo:host_draft=models/draft:draft_threads=4 \
      --check --json "$out/duo_host.json" > "$out/duo_host.log" 2>&1; then status=1; fi
  tail -12 "$out/duo_host.log" 2>/dev/null
fi

if [ "${T_METHODS:-150}" != 0 ]; then
  step "methods on the CUDA model (default models, batched, long contexts; greedy outputs checked)"
  # shellcheck disable=SC2086  # METHODS_ARGS is a list of options
  if fits methods "${T_METHODS:-150}" && ! timeout "$(limit "${T_METHODS:-150}")" "$pack/bin/cuda_methods_bench" ${METHODS_ARGS:---batch 1 --batch 8 --batch 32 \
      --context 512 --context 1024 --waves 2 --method chain:k=4 --method magicdec:k=4} \
      --json "$out/cuda_methods_bench.json" > "$out/cuda_methods_bench.log" 2>&1; then status=1; fi
  tail -20 "$out/cuda_methods_bench.log" 2>/dev/null
fi

step "cuda tests under compute-sanitizer memcheck (the [cuda] cases; few χ² decodes)"
if fits memcheck "${T_MEMCHECK:-150}" && ! SPECDEC_STATISTICAL_OUTCOMES=2000 SPECDEC_CUDA_QUICK=1 timeout "$(limit "${T_MEMCHECK:-150}")" compute-sanitizer --tool memcheck --error-exitcode 9 "$pack/bin/cuda_test" "${MEMCHECK_FILTER:-[cuda]}" \
    > "$out/memcheck.log" 2>&1; then status=1; fi
tail -3 "$out/memcheck.log" 2>/dev/null

if [ "${T_KERNELS:-180}" != 0 ]; then
  step "kernel benchmarks"
  # The goals' shapes by default: the whole grid (184 benchmarks, each building
  # up to a gigabyte of rows on the host) ran 24 benchmarks in 150 s on an H200.
  if fits "kernel benchmarks" "${T_KERNELS:-180}" && ! timeout "$(limit "${T_KERNELS:-180}")" "$pack/bin/cuda_kernels_bench" --benchmark_filter="${BENCH_FILTER:-V:(32000|128256)/batch:(1|64)/k:4/}" \
      --benchmark_min_time=0.1 --benchmark_repetitions="${BENCH_REPS:-1}" \
      --benchmark_report_aggregates_only=true --benchmark_out="$out/cuda_kernels_bench.json" \
      --benchmark_out_format=json > "$out/cuda_kernels_bench.log" 2>&1; then status=1; fi
fi

step "model benchmarks (the CUDA Llama: default models when models/ holds them, 1B- and 7B-class random)"
if fits "model benchmarks" "${T_MODEL:-150}" && ! timeout "$(limit "${T_MODEL:-150}")" "$pack/bin/cuda_model_bench" --benchmark_filter="${MODEL_BENCH_FILTER:-.}" --benchmark_min_time=0.2 \
    --benchmark_out="$out/cuda_model_bench.json" --benchmark_out_format=json > "$out/cuda_model_bench.log" 2>&1; then status=1; fi
tail -20 "$out/cuda_model_bench.log" 2>/dev/null

if [ -n "${MODEL_GRAPHS_FILTER:-}" ]; then
  step "model benchmarks with CUDA graphs"
  if fits "model benchmarks with CUDA graphs" "${T_MODEL:-150}" && ! SPECDEC_CUDA_GRAPHS=1 timeout "$(limit "${T_MODEL:-150}")" "$pack/bin/cuda_model_bench" --benchmark_filter="$MODEL_GRAPHS_FILTER" \
      --benchmark_min_time=0.2 --benchmark_out="$out/cuda_model_bench_graphs.json" --benchmark_out_format=json \
      > "$out/cuda_model_bench_graphs.log" 2>&1; then status=1; fi
  grep BM_ "$out/cuda_model_bench_graphs.log" 2>/dev/null; rm -f "$out/cuda_model_bench_graphs.log"
fi

if [ "${T_PYTHON:-240}" != 0 ]; then
  step "the Python package against this machine's torch: torch.ops.specdec on CUDA tensors (gpu-python.sh)"
  if fits "Python package" "${T_PYTHON:-240}" && ! timeout "$(limit "${T_PYTHON:-240}")" bash "$(dirname "$0")/gpu-python.sh" "$pack" "$out"; then status=1; fi
fi

if [ -n "${PROFILE:-}" ]; then
  step "kernel times of one decode step (ncu): $PROFILE"
  # shellcheck disable=SC2086  # PROFILE is a list of models
  if fits profile "${T_PROFILE:-150}" && ! timeout "$(limit "${T_PROFILE:-150}")" bash "$(dirname "$0")/gpu-profile.sh" "$pack" "$out" $PROFILE; then status=1; fi
fi

if [ -f "$out/cuda_kernels_bench.json" ]; then
  step summary
  python3 "$(dirname "$0")/gpu_summary.py" "$out/cuda_kernels_bench.json" | tee "$out/summary.txt"
fi
echo "gpu-check status: $status$( [ "$skipped" = 1 ] && echo " (stages skipped: T_TOTAL)")"
exit $status
