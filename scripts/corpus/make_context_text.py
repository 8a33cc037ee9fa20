#!/usr/bin/env python3
"""Writes the held-out text `specdec bench --context L` fills prompts from.

  python3 scripts/corpus/make_context_text.py [--heldout build/corpus/heldout.txt]
      [--out data/context/heldout.txt] [--kjv 12] [--python 6]

The first KJV chapters and Python files of the corpus's HELD-OUT split (in
corpus order) that no prompt of data/prompts or data/profile was cut from,
concatenated with blank lines between them: long documents, so that a filled
prompt reads like a long context rather than unrelated snippets.
"""
import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def read_docs(path):
    for chunk in re.split(r"^<\|doc\|> ", Path(path).read_text(encoding="utf-8"), flags=re.M)[1:]:
        header, _, text = chunk.partition("\n")
        source, _, title = header.partition(" ")
        yield source, title, text.rstrip("\n")


def prompt_sources():
    used = set()
    for d in ("data/prompts", "data/profile"):
        for f in sorted((ROOT / d).glob("*.jsonl")):
            for line in f.read_text(encoding="utf-8").splitlines():
                src = json.loads(line)["source"]
                source, _, rest = src.partition(" ")
                # "Genesis 37:23" -> the chapter "Genesis 37"; "x/y.py:117" -> the file "x/y.py"
                used.add((source, re.sub(r":\d+$", "", rest)))
    return used


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heldout", default=str(ROOT / "build/corpus/heldout.txt"))
    ap.add_argument("--out", default=str(ROOT / "data/context/heldout.txt"))
    ap.add_argument("--kjv", type=int, default=12)
    ap.add_argument("--python", type=int, default=6)
    a = ap.parse_args()
    used = prompt_sources()
    want = {"kjv": a.kjv, "python": a.python}
    picked = {"kjv": [], "python": []}
    for source, title, text in read_docs(a.heldout):
        if source in want and len(picked[source]) < want[source] and (source, title) not in used:
            picked[source].append(text)
    out = "\n\n".join(picked["kjv"] + picked["python"]) + "\n"
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(out, encoding="utf-8")
    print(f"{a.out}: {len(picked['kjv'])} KJV chapters, {len(picked['python'])} Python files, {len(out)} characters")


if __name__ == "__main__":
    main()
