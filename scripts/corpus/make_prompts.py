#!/usr/bin/env python3
"""Writes evaluation prompt sets from the corpus HELD-OUT split only.

  python3 scripts/corpus/make_prompts.py [--heldout build/corpus/heldout.txt]
      [--train build/corpus/train.txt] [--out data/prompts] [--n 40]
      [--tag profile --exclude data/prompts]   (another selection, sharing no source with the bench's)

data/prompts/{prose,code,definitions}.jsonl, one {"id", "task", "prompt", "source"}
per line, 100-400 characters each, cut where a writer would pause:
  prose        1-3 whole KJV verses or the first sentences of a fortune
  code         a Python function's signature + docstring, or its first lines
  definitions  a GCIDE headword, part of speech and the start of its definition,
               cut after a ';' or ',' (the rest of the definition is left to write)
Prompts end without trailing whitespace or just after a newline, never inside
a run of spaces, so the first generated token is not a fragment of the prompt's
last one. Selection is deterministic (fixed seed, sorted inputs).
"""
import argparse
import ast
import json
import random
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEED = 20240601
MIN, MAX = 100, 400


def norm(s):
    return re.sub(r"\s+", " ", s).strip()


def read_docs(path):
    docs = []
    for chunk in re.split(r"^<\|doc\|> ", Path(path).read_text(encoding="utf-8"), flags=re.M)[1:]:
        header, _, text = chunk.partition("\n")
        source, _, title = header.partition(" ")
        docs.append((source, title, text.rstrip("\n")))
    return docs


def kjv_prompt(rng, title, text):
    verses = text.split("\n")[2:]  # after "Book N" and a blank line
    if len(verses) < 4:
        return None
    start = rng.randrange(0, len(verses) - 3)
    prompt = ""
    for v in verses[start:start + 3]:
        cand = f"{prompt}\n{v}" if prompt else v
        if len(cand) > MAX:
            break
        prompt = cand
        if len(prompt) >= MIN:
            return prompt, f"kjv {title}:{start + 1}"
    return None


def fortune_prompt(rng, title, text):
    lines = text.split("\n")
    # prose only: no chat logs, dialogue scripts, verse or ASCII layout
    if any(re.match(r"^\s*[<*>|(]|^\s{4,}|^[A-Z][\w ]{0,15}:", ln) for ln in lines):
        return None
    if sum(map(len, lines)) < 50 * len(lines):  # short lines: verse, lyrics, lists
        return None
    body = re.sub(r"\n-- .*$", "", text, flags=re.S)  # drop the attribution
    ends = [m.end() for m in re.finditer(r"[.!?][\"')]?(?=\s)", body)]
    for k, e in enumerate(ends[:3]):
        if MIN <= e <= MAX and len(body) - e >= 40:
            return body[:e], f"fortunes {title}"
    return None


def code_prompt(rng, title, text):
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    lines = text.split("\n")
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    rng.shuffle(funcs)
    for f in funcs:
        first, last = f.lineno - 1, f.end_lineno  # 0-based [first, last)
        body = f.body
        if body[0].lineno - 1 <= first:  # one-liner
            continue
        has_doc = (isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                   and isinstance(body[0].value.value, str))
        # signature (maybe several lines) + docstring, or + whole first statements;
        # a compound statement contributes only its header ("for x in y:")
        end = body[0].end_lineno if has_doc else body[0].lineno - 1
        for stmt in body[1 if has_doc else 0:]:
            if len(textwrap.dedent("\n".join(lines[first:end]))) + 1 >= MIN:
                break
            inner = getattr(stmt, "body", None)
            if isinstance(inner, list) and inner:
                end = inner[0].lineno - 1
                break
            end = stmt.end_lineno
        snippet = textwrap.dedent("\n".join(lines[first:end])) + "\n"
        rest = [ln for ln in lines[end:last] if ln.strip()]
        if MIN <= len(snippet) <= MAX and rest and "\t" not in snippet:
            return snippet, f"python {title}:{f.lineno}"
    return None


def definition_prompt(rng, title, text):
    first = text.split("\n")[0]
    m = re.match(r"^([A-Z][a-z]+(?:[- ][a-z]+)?), ((?:[a-z]{1,5}\.\s?)+)\s*(?:\([A-Z][\w. ]*\)\s*)?(?=[A-Z0-9])", first)
    if not m or len(first) < MIN + 40 or re.search(r"[?\[\]]", first[:MAX]) or "See " in first[:60]:
        return None
    lo, hi = max(MIN, m.end() + 30), min(MAX - 100, len(first) - 40)
    for punct in ("; ", ", "):
        cuts = [i + 1 for i in range(lo, hi) if first.startswith(punct, i)]
        if cuts:
            return first[:cuts[0]], f"gcide {title}"
    return None


TASKS = {
    "prose": [("kjv", kjv_prompt), ("fortunes", fortune_prompt)],
    "code": [("python", code_prompt)],
    "definitions": [("gcide", definition_prompt)],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heldout", default=str(ROOT / "build/corpus/heldout.txt"))
    ap.add_argument("--train", default=str(ROOT / "build/corpus/train.txt"))
    ap.add_argument("--out", default=str(ROOT / "data/prompts"))
    ap.add_argument("--n", type=int, default=40, help="prompts per task")
    ap.add_argument("--tag", default="", help="another selection (a different seed), e.g. 'profile'")
    ap.add_argument("--exclude", default="",
                    help="a directory of prompt sets whose sources this selection must not reuse")
    a = ap.parse_args()
    excluded = set()
    if a.exclude:
        for f in sorted(Path(a.exclude).glob("*.jsonl")):
            for line in f.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    excluded.add(json.loads(line)["source"])
    docs = read_docs(a.heldout)
    # held-out documents can still quote training text (a Bible verse in a
    # fortune, boilerplate code): such candidates are skipped
    train = norm(Path(a.train).read_text(encoding="utf-8"))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for task, makers in TASKS.items():
        rng = random.Random(f"{SEED}:{task}" + (f":{a.tag}" if a.tag else ""))
        picked = []
        for k, (source, make) in enumerate(makers):
            want = a.n // len(makers) + (k < a.n % len(makers))
            pool = [d for d in docs if d[0] == source]
            rng.shuffle(pool)
            got = 0
            for _, title, text in pool:
                if got == want:
                    break
                r = make(rng, title, text)
                if r and norm(r[0])[:80] not in train and r[1] not in excluded:
                    picked.append(r)
                    got += 1
            if got < want:
                raise SystemExit(f"{task}: only {got} of {want} prompts from {source}")
        with open(out / f"{task}.jsonl", "w", encoding="utf-8") as f:
            for i, (prompt, src) in enumerate(picked, 1):
                assert MIN <= len(prompt) <= MAX, (task, src, len(prompt))
                rec = {"id": f"{task}-{i:03d}", "task": task, "prompt": prompt, "source": src}
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        print(f"{task}: {len(picked)} prompts -> {out / (task + '.jsonl')}")


if __name__ == "__main__":
    main()
