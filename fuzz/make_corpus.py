#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora into fuzz/corpus/NAME/ (small valid
inputs of each format, and a few edge cases). Run from the repository root:
    /usr/bin/python3 fuzz/make_corpus.py
Regression inputs (crashes once found) live beside the seeds, named
crash-*, and are never regenerated."""
import json
import os
import shutil
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def crc32c(data):
    """CRC-32C (Castagnoli), as specdec's writer puts it in __metadata__."""
    crc = 0xffffffff
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82f63b78 & -(crc & 1))
    return crc ^ 0xffffffff


def safetensors(tensors, metadata=None, checksum=False):
    header, blobs, at = {}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    if checksum:
        metadata = dict(metadata or {}, **{"specdec.crc32c": "%08x" % crc32c(b"".join(blobs))})
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


put("safetensors", "f32", safetensors({"w": ("F32", [2, 3], struct.pack("<6f", *range(6)))}))
put("safetensors", "bf16-meta",
    safetensors({"a": ("BF16", [4], b"\x80\x3f" * 4), "b.c": ("F16", [2, 1], b"\x00\x3c" * 2)},
                {"format": "pt"}))
put("safetensors", "i64-scalar", safetensors({"n": ("I64", [], struct.pack("<q", 7))}))
put("safetensors", "empty", safetensors({}))
put("safetensors", "checksummed",
    safetensors({"w": ("BF16", [2, 2], b"\x80\x3f\x00\x40\x40\x40\x80\x40")}, {"format": "pt"}, checksum=True))

# Indexes of the directory safetensors_index_fuzz.cpp writes: shard 1 holds a
# and b, shard 2 holds c.
S1, S2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
put("safetensors_index", "valid.json",
    json.dumps({"metadata": {"total_size": 28}, "weight_map": {"a": S1, "b": S1, "c": S2}}))
put("safetensors_index", "partial-map.json", json.dumps({"weight_map": {"a": S1}}))
put("safetensors_index", "wrong-shard.json", json.dumps({"weight_map": {"a": S2, "c": S2}}))
put("safetensors_index", "missing-shard.json", json.dumps({"weight_map": {"a": "model-00003-of-00003.safetensors"}}))
put("safetensors_index", "escape.json", json.dumps({"weight_map": {"a": "../" + S1}}))
put("safetensors_index", "no-map.json", json.dumps({"metadata": {"format": "pt"}}))

# Prompt sets: the first lines of each committed set, and edge cases.
for name in ("prose", "code", "definitions"):
    with open(os.path.join("data", "prompts", name + ".jsonl")) as f:
        put("prompts", name + ".jsonl", "".join(f.readlines()[:3]))
put("prompts", "blank-lines.jsonl", '\n{"prompt": "a"}\n\n{"prompt": "b", "id": 2}\n')
put("prompts", "not-a-string.jsonl", '{"prompt": 7}\n')
put("prompts", "no-field.jsonl", '{"text": "a"}\n')
put("prompts", "escapes.jsonl", '{"prompt": "tab\\t \\u00e9 \\ud83d\\ude00"}\n')

os.makedirs(os.path.join(ROOT, "llama_config"), exist_ok=True)
for name in ("target", "draft"):
    shutil.copy(os.path.join("models", name, "config.json"), os.path.join(ROOT, "llama_config", name + ".json"))
put("llama_config", "minimal.json", json.dumps({
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 1,
    "num_attention_heads": 4, "vocab_size": 100}))

os.makedirs(os.path.join(ROOT, "sv_profile"), exist_ok=True)
shutil.copy(os.path.join("models", "sv", "t0.json"), os.path.join(ROOT, "sv_profile", "t0.json"))

put("token_frequencies", "counts.json", json.dumps({"counts": [5, 0, 9, 1, 3], "hot": [2, 0]}))
put("token_frequencies", "negative.json", '{"counts": [1, -2]}')
put("token_frequencies", "float.json", '{"counts": [1, 2.5, 1e3]}')
put("token_frequencies", "no-counts.json", '{"hot": [1, 2]}')

os.makedirs(os.path.join(ROOT, "sentencepiece_model"), exist_ok=True)
for name in ("classic_style", "llama_style"):
    shutil.copy(os.path.join("tests", "tokenizer", "data", name + ".model"),
                os.path.join(ROOT, "sentencepiece_model", name + ".model"))

SP = "\u2581"
vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
for b in range(256):
    vocab["<0x%02X>" % b] = 3 + b
for i, piece in enumerate([SP, "h", "e", "l", "o", "w", "r", "d", "he", "ll", SP + "he", "llo", SP + "hello",
                           SP + "w", "or", "ld", SP + "world"]):
    vocab[piece] = 259 + i
hf = {
    "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])],
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": SP}, {"type": "Replace", "pattern": {"String": " "}, "content": SP}]},
    "pre_tokenizer": None,
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": SP}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True,
              "vocab": vocab, "merges": ["h e", "l l", SP + " he", "ll o", SP + "he llo", SP + " w", "o r", "l d"]},
}
put("hf_tokenizer", "bpe-byte-fallback.json", json.dumps(hf, ensure_ascii=False))
hf2 = json.loads(json.dumps(hf))
hf2["model"]["byte_fallback"] = False
hf2["model"]["merges"] = [m.split(" ") for m in hf["model"]["merges"]]
hf2["pre_tokenizer"] = {"type": "Metaspace", "replacement": SP, "prepend_scheme": "first", "split": False}
put("hf_tokenizer", "bpe-pairs-metaspace.json", json.dumps(hf2, ensure_ascii=False))

put("tokenizer_text", "ascii", "Once upon a time, there was a little robot.\n")
put("tokenizer_text", "utf8", "Grüße aus Köln — 東京 🙂 naïve café\t<s></s>")
put("tokenizer_text", "invalid-utf8", b"ab\xff\xfe\xc3(\xe2\x82 \xf0\x9f\x98")
put("tokenizer_text", "spaces", "   leading and  double  spaces   ")
put("tokenizer_text", "empty", b"")

for i, spec in enumerate(["autoregressive", "chain:k=4", "chain:k=4:rule=block", "tree:rule=traversal",
                          "dynamic", "sequoia:p=0.5,0.2,0.1:total=8:depth=3", "ngram:k=3", "duo:gamma=4",
                          "sv", "magicdec"]):
    put("method_spec", "spec%02d" % i, spec)
