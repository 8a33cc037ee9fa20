#!/usr/bin/env bash
# Fuzzes the parsers of outside input (fuzz/, docs/fuzzing.md): builds the
# libFuzzer targets with clang++-14 (ASan + UBSan, libFuzzer's coverage on
# every file) in build-fuzz/, then runs each for RUNS executions (default
# 1,000,000) from a copy of its committed corpus, and prints libFuzzer's
# final stats. A finding (crash-*, leak-*, timeout-*, oom-*) is written to
# build-fuzz/findings/NAME/ and fails the script; copy it into
# fuzz/corpus/NAME/ as crash-<what> once fixed, so ctest replays it.
#   scripts/fuzz.sh [RUNS] [NAME...]       (Debian: clang-14, libclang-rt-14-dev)
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-1000000}
shift || true
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  names=(safetensors safetensors_index llama_config prompts sv_profile token_frequencies sentencepiece_model hf_tokenizer tokenizer_text method_spec)
fi
flags="-O1 -g1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DSPECDEC_FUZZ=ON -DSPECDEC_BUILD_TESTS=OFF -DSPECDEC_BUILD_BENCH=OFF -DSPECDEC_BUILD_EXAMPLES=OFF \
  -DSPECDEC_WITH_TORCH=OFF -DSPECDEC_WITH_CUDA=OFF -DSPECDEC_INSTALL=OFF > build-fuzz.configure.log 2>&1 ||
  { cat build-fuzz.configure.log; exit 1; }
rm -f build-fuzz.configure.log
ninja -C build-fuzz "${names[@]/#/fuzz_}" || exit 1
status=0
for name in "${names[@]}"; do
  work=build-fuzz/corpus/$name findings=build-fuzz/findings/$name
  rm -rf "$work" && mkdir -p "$work" "$findings"
  cp fuzz/corpus/"$name"/* "$work"/ 2>/dev/null || true
  echo "== $name: $runs runs"
  # -detect_leaks: LeakSanitizer after each input; -timeout: an input taking
  # longer than 10 s is a finding; -rss_limit_mb: so is using over 2 GB.
  if ! build-fuzz/fuzz/fuzz_"$name" "$work" -runs="$runs" -timeout=10 -rss_limit_mb=2048 -detect_leaks=1 \
      -print_final_stats=1 -artifact_prefix="$findings/" > build-fuzz/fuzz_"$name".log 2>&1; then
    status=1
    grep -E 'ERROR|SUMMARY|Test unit written|==[0-9]+==' build-fuzz/fuzz_"$name".log | head -20
  fi
  grep -E '^stat::(number_of_executed_units|peak_rss_mb)|^Done ' build-fuzz/fuzz_"$name".log
done
exit $status
