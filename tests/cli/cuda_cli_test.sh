#!/usr/bin/env bash
# The command line on a GPU, on the default models in models/:
#  - `specdec generate --device cuda`, for methods whose verification runs on
#    the device (chain, a dynamic tree, n-gram) and one that verifies on the
#    host (DuoDecoding, its draft on the GPU or on the host cores with
#    host_draft=): greedy speculation prints exactly the text of greedy
#    autoregressive decoding on the GPU ("outputs identical"), the weights on
#    the device;
#  - `specdec bench --device cuda --check`, batch 1 and 4: every greedy output
#    equals autoregressive decoding's, and the JSON has a cell per method and
#    batch.
# Without a device the commands must say so, and the test reports itself
# skipped.
#   cuda_cli_test.sh SPECDEC_BINARY REPO_ROOT
set -uo pipefail
specdec=$1 root=$2
cd "$root"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
skip_without_device() {  # rc output
  if [ "$1" -eq 2 ] && grep -q "no CUDA device is visible to this process" <<<"$2"; then
    echo "skipped: no CUDA device"
    exit 0
  fi
}
for method in chain:k=4 dynamic ngram duo duo:host_draft=models/draft; do
  out=$("$specdec" generate --device cuda --method "$method" --prompt "And God said unto Moses" \
        --max-new-tokens 48 2>&1)
  rc=$?
  skip_without_device $rc "$out"
  echo "$out"
  [ $rc -eq 0 ] || { echo "FAIL: generate $method exited $rc"; exit 1; }
  grep -q "^target: .*weights bf16 on cuda:0" <<<"$out" || { echo "FAIL: $method: the target is not on cuda:0"; exit 1; }
  grep -q "^speedup .*; outputs identical$" <<<"$out" ||
    { echo "FAIL: $method: greedy output differs from autoregressive decoding's"; exit 1; }
done
out=$("$specdec" bench --device cuda --prompts data/prompts/prose.jsonl --prompts data/prompts/code.jsonl \
      --num-prompts 3 --max-new-tokens 32 --method chain:k=4 --method dynamic --batch 1 --batch 4 --check \
      --json "$work/bench.json" 2>&1)
rc=$?
skip_without_device $rc "$out"
echo "$out"
[ $rc -eq 0 ] || { echo "FAIL: bench exited $rc"; exit 1; }
grep -q "^check passed: 0 of 24 greedy outputs differ" <<<"$out" || { echo "FAIL: bench --check"; exit 1; }
cells=$(grep -c '"method"' "$work/bench.json")
[ "$cells" -eq 6 ] || { echo "FAIL: bench.json has $cells cells, not 6 (3 methods x 2 batches)"; exit 1; }
echo "passed"
