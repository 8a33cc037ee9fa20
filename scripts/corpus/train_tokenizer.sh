#!/usr/bin/env bash
# Trains the project's SentencePiece tokenizer on the corpus training split and
# reports tokens per byte on the held-out split.
#   bash scripts/corpus/train_tokenizer.sh [CORPUS_DIR] [OUT_DIR] [VOCAB_SIZE]
# defaults: build/corpus (from build_corpus.sh), build/tokenizer and 8000 (the
# target's; models/draft-4k/ uses 4000, a second vocabulary for the
# cross-vocabulary methods slem and tli).
# Writes OUT_DIR/tokenizer.model, tokenizer.vocab, tokens_per_byte.txt.
#
# Llama-style BPE with byte fallback: <unk>=0, <s>=1, </s>=2, no pad; digits
# split. Deliberate differences from Llama's own settings, for code and for
# multi-line documents:
#  - identity normalization and remove_extra_whitespaces=false: indentation,
#    runs of spaces and tabs survive a round trip (NFKC would rewrite text).
#  - add_dummy_prefix=false: training sees one line at a time, but documents
#    are encoded whole, where a newline (byte token <0x0A>) precedes each line's
#    first word with no space; without a dummy prefix, line-initial words look
#    the same in training and in use, and decode(encode(x)) == x exactly.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
corpus="${1:-$here/../../build/corpus}"
out="${2:-$here/../../build/tokenizer}"
vocab_size="${3:-8000}"
[ -f "$corpus/train.txt" ] || { echo "no $corpus/train.txt: run build_corpus.sh first" >&2; exit 1; }
if ! command -v spm_train >/dev/null; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends sentencepiece
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
# spm stores its input and output names in the model: a fixed work dir and
# relative names keep tokenizer.model byte-identical from run to run.
tmp="$out/.work"
rm -rf "$tmp" && mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

# Separator lines are markup, not text: keep them out of the vocabulary.
grep -v -e '^<|doc|> ' -e '^$' "$corpus/train.txt" > "$tmp/train_lines.txt"

(cd "$tmp" && spm_train --input=train_lines.txt --model_prefix=tokenizer \
  --model_type=bpe --vocab_size="$vocab_size" --character_coverage=0.9995 --byte_fallback=true \
  --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 --split_digits=true \
  --normalization_rule_name=identity --remove_extra_whitespaces=false --add_dummy_prefix=false \
  --allow_whitespace_only_pieces=true --max_sentencepiece_length=16 \
  --input_sentence_size=2000000 --shuffle_input_sentence=true --random_seed=20240601 \
  --num_threads="$(nproc)" --minloglevel=1 2> spm_train.log) ||
  { tail -20 "$tmp/spm_train.log" >&2; exit 1; }
mv "$tmp/tokenizer.model" "$tmp/tokenizer.vocab" "$out/"

# Tokens per byte on held-out text, per source. spm_encode works line by line,
# so each line's newline is counted as the one byte token it becomes.
awk -v dir="$tmp" '/^<\|doc\|> /{src=$2; next} src{print > (dir "/heldout." src ".txt")}' "$corpus/heldout.txt"
{
  printf '%-10s %10s %10s %8s\n' source bytes tokens tok/byte
  for f in "$tmp"/heldout.*.txt; do
    src=$(basename "$f" .txt); src=${src#heldout.}
    bytes=$(wc -c < "$f"); lines=$(wc -l < "$f")
    toks=$(spm_encode --model="$out/tokenizer.model" --output_format=id < "$f" | wc -w)
    toks=$((toks + lines))
    awk -v s="$src" -v b="$bytes" -v t="$toks" 'BEGIN{printf "%-10s %10d %10d %8.3f\n", s, b, t, t/b}'
  done
} | tee "$out/tokens_per_byte.txt"
