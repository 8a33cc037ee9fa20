#!/usr/bin/env python3
"""Tokenize a corpus split into the flat token file `specdec train` reads.

Usage: encode_corpus.py TOKENIZER_MODEL CORPUS_TXT OUT_U16

Output: little-endian uint16 token ids (the vocabulary is 8k). Each document
(a "<|doc|> source title" line starts one) becomes <s> + its text + </s>; lines
are joined with the byte token for "\\n". The reference implementation does
the encoding: spm_encode runs in its own process (libsentencepiece must never
share a process with libtorch). The tokenizer is trained without a dummy
prefix, so encoding line by line equals encoding whole documents.
"""
import array
import subprocess
import sys


def piece_ids(model: str) -> dict:
    vocab = model[: -len(".model")] + ".vocab"
    with open(vocab, encoding="utf-8") as f:
        return {line.split("\t")[0]: i for i, line in enumerate(f)}


def main() -> None:
    model, corpus, out = sys.argv[1:4]
    ids = piece_ids(model)
    bos, eos, newline = ids["<s>"], ids["</s>"], ids["<0x0A>"]
    with open(corpus, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    enc = subprocess.run(["spm_encode", f"--model={model}", "--output_format=id"],
                         input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
    encoded = enc.stdout.split("\n")[: len(lines)]
    if len(encoded) != len(lines):
        sys.exit(f"spm_encode returned {len(encoded)} lines for {len(lines)}")
    tokens = array.array("H")
    doc_open = False
    pending_blank = False  # the blank line that ends a document is not part of it
    for line, ids_text in zip(lines, encoded):
        if line.startswith("<|doc|> "):
            if doc_open:
                tokens.append(eos)
            tokens.append(bos)
            doc_open, first, pending_blank = True, True, False
            continue
        if line == "":
            if pending_blank and not first:
                tokens.append(newline)
            pending_blank = True
            continue
        if pending_blank and not first:
            tokens.append(newline)
        pending_blank = False
        if not first:
            tokens.append(newline)
        tokens.extend(int(t) for t in ids_text.split())
        first = False
    if doc_open:
        tokens.append(eos)
    if tokens and max(tokens) >= 65536:
        sys.exit("token id does not fit uint16")
    with open(out, "wb") as f:
        tokens.tofile(f)
    print(f"{corpus}: {len(lines)} lines -> {len(tokens)} tokens ({out})")


if __name__ == "__main__":
    main()
