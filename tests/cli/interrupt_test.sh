#!/usr/bin/env bash
# Ctrl-C during `specdec generate` and `specdec bench` (examples/specdec/
# interrupt.hpp): the command stops after the step in flight, reports what it
# produced and its partial stats, writes bench's JSON marked interrupted, and
# exits 130. The models are the default ones in models/.
#   interrupt_test.sh SPECDEC_BINARY REPO_ROOT generate|bench
set -uo pipefail
specdec=$1 root=$2 which=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"

# Waits (up to 120 s) until FILE holds PATTERN, then sends one SIGINT to PID.
interrupt_when() {
  local pid=$1 file=$2 pattern=$3
  for _ in $(seq 1 12000); do
    if grep -q -- "$pattern" "$file" 2>/dev/null; then
      kill -INT "$pid"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { echo "FAIL: specdec ended before '$pattern' appeared"; return 1; }
    sleep 0.01
  done
  echo "FAIL: '$pattern' never appeared"
  return 1
}

fail() {
  echo "FAIL: $*"
  echo "--- stdout"; cat "$work/out"; echo "--- stderr"; tr '\r' '\n' < "$work/err" | tail -20
  exit 1
}

# Runs `specdec ARGS...` in the background (stdout to out, stderr to err),
# interrupts it once the file STREAM (out or err) holds PATTERN, and checks
# that it exits 130.
run_interrupted() {
  local stream=$1 pattern=$2
  shift 2
  "$specdec" "$@" > "$work/out" 2> "$work/err" &
  local pid=$!
  interrupt_when $pid "$work/$stream" "$pattern" || fail "no signal sent"
  wait $pid
  local rc=$?
  [ $rc -eq 130 ] || fail "exit status $rc, not 130"
}

case $which in
  generate)
    # The prompt echo is flushed just before the first round; one thread, f32
    # and the longest generation the context allows keep the run going for
    # seconds after it.
    run_interrupted out "^Interrupt me" generate --target models/target --prompt "Interrupt me" \
      --max-new-tokens 900 --no-baseline --threads 1 --dtype f32
    grep -q '^\[interrupted after [0-9]* new tokens' "$work/out" || fail "no interruption note"
    grep -q '^== speculative decoding ==' "$work/out" || fail "no stats after the interruption"
    ;;
  bench)
    # Two runs per prompt (autoregressive, chain); once the progress line
    # counts 2 runs the first prompt is done, and its row must be reported.
    run_interrupted err " 2/16 " bench --target models/target --draft models/draft --prompts data/prompts/prose.jsonl \
      --num-prompts 8 --max-new-tokens 48 --method chain:k=4 --threads 1 --dtype f32 --warmup 0 \
      --json "$work/bench.json"
    grep -q '^\[interrupted after' "$work/out" || fail "no interruption note"
    grep -q '^chain:k=4 ' "$work/out" || fail "no row for the prompts that finished"
    [ -s "$work/bench.json" ] || fail "no JSON written"
    grep -q '"interrupted": *true' "$work/bench.json" || fail "the JSON is not marked interrupted"
    grep -q '"prompts": *[1-7][,}]' "$work/bench.json" || fail "the JSON does not count the finished prompts only"
    ;;
  *) echo "usage: $0 SPECDEC REPO_ROOT generate|bench"; exit 2 ;;
esac
echo "ok: $which stopped on SIGINT, reported, exit 130"
