#!/usr/bin/env bash
# A short `specdec bench --soak` (examples/specdec/soak.hpp) on the default
# models: random requests through three methods (one with a draft thread),
# greedy and sampled, some aborted; it must exit 0 with every checked greedy
# output equal to autoregressive decoding's, and write its summary and one
# memory sample per second. The long runs are in docs/RESULTS.md.
#   soak_test.sh SPECDEC_BINARY REPO_ROOT
set -uo pipefail
specdec=$1 root=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"
fail() {
  echo "FAIL: $*"
  echo "--- stdout"; cat "$work/out"; echo "--- stderr"; tr '\r' '\n' < "$work/err" | tail -20
  exit 1
}
"$specdec" bench --prompts data/prompts/prose.jsonl --prompts data/prompts/code.jsonl --num-prompts 8 \
  --method chain:k=4 --method ngram --method duo --max-new-tokens 16 --batch 4 \
  --soak 15s --soak-abort 0.2 --soak-interval 1 --soak-rss "$work/rss.csv" --json "$work/soak.json" \
  > "$work/out" 2> "$work/err" || fail "exit status $?"
grep -q "differing: 0" "$work/out" || fail "a checked output differs"
/usr/bin/python3 - "$work/soak.json" "$work/rss.csv" <<'PY' || fail "the summary or the samples"
import csv, json, sys
s = json.load(open(sys.argv[1]))["soak"]
rows = list(csv.DictReader(open(sys.argv[2])))
assert s["requests"] > 100 and s["aborted"] > 0 and s["checked"] > 0, s
assert s["mismatches"] == [] and not s["interrupted"], s
assert [m["method"] for m in json.load(open(sys.argv[1]))["methods"]] == ["chain:k=4", "ngram", "duo"]
assert len(rows) >= 10 and all(int(r["rss_bytes"]) > 0 for r in rows), rows
PY
echo "soak: $(grep '^soak:' "$work/out")"
