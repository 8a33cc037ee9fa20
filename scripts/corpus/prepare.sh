#!/usr/bin/env bash
# Everything a training run needs, from Debian packages to token files:
#   build/corpus/{train,heldout}.txt   the corpus and its held-out split
#   build/data/{train,heldout}.u16     token ids (uint16) for `specdec train`
# The committed tokenizer (models/tokenizer.model) is used; pass --retrain-tokenizer
# to train a new one from the corpus (scripts/corpus/train_tokenizer.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/corpus/build_corpus.sh build/corpus
if [ "${1:-}" = "--retrain-tokenizer" ]; then
  bash scripts/corpus/train_tokenizer.sh build/corpus build/tokenizer
  cp build/tokenizer/tokenizer.model build/tokenizer/tokenizer.vocab models/
fi
mkdir -p build/data
for split in train heldout; do
  python3 scripts/corpus/encode_corpus.py models/tokenizer.model "build/corpus/$split.txt" "build/data/$split.u16"
done
