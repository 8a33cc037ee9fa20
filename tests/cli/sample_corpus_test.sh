#!/usr/bin/env bash
# `specdec sample-corpus` on the default target: samples are keyed by their
# index alone, so a run stopped after some samples and rerun with more (the
# resume) writes the same corpus as one run with another batch and chunking;
# each sample is one document of the corpus format, its prompt cut from the
# token file and its continuation sampled. Chunks are appended: a rerun cuts
# off what a kill left past the recorded progress.
#   sample_corpus_test.sh SPECDEC_BINARY REPO_ROOT
set -uo pipefail
specdec=$1 root=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"
fail() { echo "FAIL: $*"; cat "$work/log"; exit 1; }
# Prompts from random ids below the vocabulary (the test needs no encoder),
# with an end of document (id 2) in them.
/usr/bin/python3 -c '
import random, struct, sys
random.seed(3)
ids = [random.randrange(3, 8000) for _ in range(400)]
ids[150] = 2  # an end of document inside the text
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(ids), *ids))' "$work/tokens.u16"
run() { "$specdec" sample-corpus --model models/target --tokens "$work/tokens.u16" --prompt-tokens 12 \
  --new-tokens 8 --threads 1 --seed "${seed:-5}" "$@" >> "$work/log" 2>&1; }
run --out "$work/a.txt" --samples 3 --batch 2 --chunk 2 || fail "first run: exit $?"
[ "$(grep -c '^<|doc|> specdec-sample ' "$work/a.txt")" = 3 ] || fail "3 samples expected in a.txt"
[ ! -e "$work/a.txt.progress" ] || fail "a finished corpus kept its progress file"
cp "$work/a.txt" "$work/a3.txt"
run --out "$work/a.txt" --samples 5 --batch 2 --chunk 2 || fail "resumed run: exit $?"
grep -q "holds 3 samples: going on from there" "$work/log" || fail "the rerun did not resume"
cmp -s "$work/a3.txt" <(head -c "$(stat -c %s "$work/a3.txt")" "$work/a.txt") || fail "the resume changed saved samples"
run --out "$work/b.txt" --samples 5 --batch 5 --chunk 5 || fail "one-chunk run: exit $?"
cmp -s "$work/a.txt" "$work/b.txt" || { diff "$work/a.txt" "$work/b.txt"; fail "batching or resuming changed a sample"; }
# A kill mid-append: two samples recorded, part of a third written after them.
offset=$(grep -b -m1 '^<|doc|> specdec-sample 2$' "$work/a3.txt" | cut -d: -f1)
head -c "$offset" "$work/a3.txt" > "$work/d.txt"
printf '<|doc|> specdec-sample 2\nhalf a sam' >> "$work/d.txt"
echo "samples 2 bytes $offset" > "$work/d.txt.progress"
run --out "$work/d.txt" --samples 5 --batch 2 --chunk 2 || fail "run after a kill: exit $?"
grep -q "d.txt: cut 35 bytes of an unfinished chunk" "$work/log" || fail "the unfinished chunk was not cut"
cmp -s "$work/d.txt" "$work/b.txt" || { diff "$work/d.txt" "$work/b.txt"; fail "the run after a kill differs"; }
# A corpus shorter than its progress record is refused, not extended.
cp "$work/a3.txt" "$work/e.txt"
echo "samples 3 bytes 999999" > "$work/e.txt.progress"
run --out "$work/e.txt" --samples 5 && fail "a corpus shorter than its progress was accepted"
grep -q "fewer than the 999999 that .*e.txt.progress records for its 3 samples" "$work/log" \
  || fail "no sentence for a corpus shorter than its progress"
seed=6 run --out "$work/c.txt" --samples 5 --batch 5 --chunk 5 && ! cmp -s "$work/b.txt" "$work/c.txt" \
  || fail "another seed gave the same corpus"
run --out "$work/b.txt" --samples 4 && fail "a corpus larger than --samples was accepted"
grep -q "already holds 5 samples, more than --samples 4" "$work/log" || fail "no sentence for the larger corpus"
echo "ok: $(grep -c '' "$work/a.txt") lines in 5 documents"
