#!/usr/bin/env bash
# Regenerates the committed tokenizer test data from files that Debian packages
# install (licenses, Python 3.11 sources, /usr/share/doc/*/copyright):
#   heldout.txt          held-out text for tokenizer_oracle_test (not trained on)
#   llama_style.model    BPE 1000, byte fallback, identity, add_dummy_prefix,
#                        no whitespace removal, split digits, a user symbol
#   project_style.model  the project's settings (scripts/corpus/train_tokenizer.sh)
#                        at vocab 1000: no dummy prefix, whitespace kept
#   classic_style.model  BPE 800, no byte fallback (<unk>), SentencePiece's
#                        default whitespace handling, a small custom normalization
#                        rule set (precompiled charsmap), user/control symbols
# Needs spm_train (Debian package `sentencepiece`). Run from anywhere.
set -euo pipefail
out="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C

lic=/usr/share/common-licenses
py=/usr/lib/python3.11
# Copyright files: the lines with non-ASCII text (names, (c) signs, quotes).
ls /usr/share/doc/*/copyright | sort > "$tmp/cfiles"
split_at=$(( $(wc -l < "$tmp/cfiles") / 2 ))
head -n "$split_at" "$tmp/cfiles" | xargs grep -hP '[^\x00-\x7F]' | awk '!seen[$0]++' > "$tmp/copy_train"
tail -n +"$((split_at + 1))" "$tmp/cfiles" | xargs grep -hP '[^\x00-\x7F]' |
  awk '!seen[$0]++ && n++ < 500' > "$tmp/copy_heldout"

cat "$lic"/{Apache-2.0,GPL-3,LGPL-2.1,MPL-2.0} "$py"/{argparse,functools,textwrap,typing,dataclasses}.py \
  "$tmp/copy_train" > "$tmp/train.txt"
cat "$lic"/{GPL-2,LGPL-2,Artistic,BSD,CC0-1.0} "$py"/json/decoder.py "$py"/{csv,shlex,string}.py \
  "$tmp/copy_heldout" > "$out/heldout.txt"

# A few normalization rules (hex code points, tab, hex code points): fullwidth
# ASCII, ideographic space and NBSP to space, ligatures, ellipsis, circled
# digits, curly quotes, and a two-code-point source (A + combining grave).
{
  for cp in $(seq $((0xFF01)) $((0xFF5E))); do printf '%X\t%X\n' "$cp" $((cp - 0xFF01 + 0x21)); done
  printf '3000\t20\nA0\t20\nFB01\t66 69\nFB02\t66 6C\n2026\t2E 2E 2E\n2018\t27\n2019\t27\n'
  printf '41 300\tC0\n'
  for i in 0 1 2 3 4 5 6 7 8; do printf '%X\t%X\n' $((0x2460 + i)) $((0x31 + i)); done
} > "$tmp/rules.tsv"

common=(--input="$tmp/train.txt" --model_type=bpe --minloglevel=2 --num_threads=2
        --shuffle_input_sentence=false --random_seed=1)
cd "$tmp"
spm_train "${common[@]}" --model_prefix=llama_style --vocab_size=1000 --byte_fallback=true \
  --normalization_rule_name=identity --remove_extra_whitespaces=false --add_dummy_prefix=true \
  --split_digits=true --user_defined_symbols='<|tool|>' --character_coverage=0.9995
spm_train "${common[@]}" --model_prefix=project_style --vocab_size=1000 --byte_fallback=true \
  --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 --split_digits=true \
  --normalization_rule_name=identity --remove_extra_whitespaces=false --add_dummy_prefix=false \
  --allow_whitespace_only_pieces=true --max_sentencepiece_length=16 --character_coverage=0.9995
spm_train "${common[@]}" --model_prefix=classic_style --vocab_size=800 --byte_fallback=false \
  --normalization_rule_tsv=rules.tsv --character_coverage=0.995 --pad_id=3 \
  --user_defined_symbols='<|tool|>,@@' --control_symbols='<ctl>'
cp llama_style.model project_style.model classic_style.model "$out/"
ls -l "$out"
