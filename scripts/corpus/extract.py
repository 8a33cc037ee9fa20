#!/usr/bin/env python3
"""Turn the unpacked Debian packages into train.txt / heldout.txt / stats.txt.

Called by build_corpus.sh (stdlib only). Output format, shared by both splits:
every document is introduced by one separator line "<|doc|> SOURCE TITLE" and
followed by one blank line, so a reader can split documents exactly (and a
window-sampler that ignores the markers still sees a visible boundary).
Sources are written one after another, so windows rarely cross sources.

A document goes to held-out when crc32(source:key) % 20 == 0: ~5%, and the
decision for a document never changes when other documents come or go (a new
package version does not reshuffle the split).
"""
import argparse
import gzip
import hashlib
import os
import re
import sys
import unicodedata
import zlib
from pathlib import Path

SEP = "<|doc|>"
HELDOUT_MOD = 20


def clean_text(s, max_blank):
    """UTF-8/NFC, no control chars or trailing blanks, at most max_blank blank lines in a row."""
    s = unicodedata.normalize("NFC", s.replace("\r\n", "\n").replace("\r", "\n"))
    s = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", "", s)  # keeps \t and \n only
    lines = [ln.rstrip() for ln in s.split("\n")]
    lines = [ln for ln in lines if not ln.startswith(SEP)]  # never forge a separator
    s = "\n".join(lines).strip("\n")
    return re.sub(r"\n{%d,}" % (max_blank + 2), "\n" * (max_blank + 1), s)


def decode(b):
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:  # a few GCIDE entries and fortunes are cp1252
        return b.decode("cp1252", errors="replace")


# ---------------------------------------------------------------- KJV Bible
def kjv_docs(path):
    """`bible -l 100000` output: "Book N" header lines, then "  V text" verses (one per line)."""
    title, verses = None, []
    for line in Path(path).read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        m = re.match(r"^\s+\d+ (.*)$", line)
        if m:
            verses.append(m.group(1).strip())
            continue
        if not re.match(r"^\S.* \d+$", line):
            sys.exit(f"kjv: unexpected line {line[:80]!r}")
        if title:
            yield title, title, title + "\n\n" + "\n".join(verses)
        title, verses = line.strip(), []
    if title:
        yield title, title, title + "\n\n" + "\n".join(verses)


# ---------------------------------------------------------------- fortunes
def fortune_docs(dirs):
    skip = {"ascii-art"}  # pictures, not prose
    seen = set()
    files = sorted({p for d in dirs for p in Path(d).iterdir()
                    if p.is_file() and not p.is_symlink() and p.suffix not in (".dat", ".u8")
                    and p.name not in skip}, key=lambda p: p.name)
    for f in files:
        for n, raw in enumerate(re.split(r"\n%\n", decode(f.read_bytes()))):
            text = re.sub(r".\x08", "", raw)  # nroff overstrike (bold/underline)
            # tab-indented attributions / paragraph indents: drop the tabs, keep spaces
            text = "\n".join(re.sub(r"^\t+", "", ln).expandtabs(8) for ln in text.split("\n"))
            text = clean_text(text, 1)
            # the same quote recurs in several files, rewrapped or repunctuated
            key = re.sub(r"[^a-z0-9]", "", text.lower())[:120]
            if len(key) < 16 or key in seen:
                continue
            seen.add(key)
            yield key, f"{f.name}/{n}", text


# ---------------------------------------------------------------- GCIDE
B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}


def b64num(s):
    n = 0
    for c in s:
        n = n * 64 + B64[c]
    return n


# GCIDE spells non-ASCII letters as [xx] entities; map the ones that survive in
# definitions (pronunciations and etymologies, where most live, are dropped).
ENT = {"ae": "æ", "AE": "Æ", "oe": "œ", "OE": "Œ", "eth": "ð", "thorn": "þ", "yogh": "ȝ",
       "deg": "°", "sect": "§", "pounds": "£", "root": "√", "frac12": "½", "frac14": "¼",
       "frac34": "¾", "imac": "ī", "aum": "ä", "add": "ä", "udd": "ü", "ng": "ŋ", "cced": "ç",
       "prime": "′", "bprime": "″", "times": "×", "divide": "÷", "middot": "·", "llig": "ll",
       "eacute": "é", "egrave": "è", "uum": "ü", "oum": "ö", "ntil": "ñ"}
ACCENT = {"^": "\u0306", "'": "\u0301", "`": "\u0300", "=": "\u0304", ".": "\u0323",
          '"': "\u0308", "~": "\u0303", ",": "\u0327"}
CIRC = "\u0302"
GREEK = {n.lower(): n for n in ["Alpha", "Beta", "Gamma", "Delta", "Epsilon", "Zeta", "Eta",
                                "Theta", "Iota", "Kappa", "Lambda", "Mu", "Nu", "Xi", "Omicron",
                                "Pi", "Rho", "Sigma", "Tau", "Upsilon", "Phi", "Chi", "Psi", "Omega"]}
# a bracket made only of these words is a provenance tag like "[1913 Webster +PJC]"
SRC_WORD = re.compile(r"^(Webster|WordNet|Suppl\.|Century|Dict\.?,?|sense|\d+(\.\d+)?\.?|[\d,]+|PJC\.?|[A-Z]{2,5}\d*|break|#here)$")


def entity(m):
    e = m.group(1)
    if e in ENT:
        return ENT[e]
    if e in (GREEK.get(e.lower()), e.lower()) and e.lower() in GREEK:  # "alpha" / "Alpha"
        case = "SMALL" if e.islower() else "CAPITAL"
        return unicodedata.lookup(f"GREEK {case} LETTER {e.upper().replace('LAMBDA', 'LAMDA')}")
    if len(e) == 2 and e[1] == "^" and e[0].isalpha():
        return unicodedata.normalize("NFC", e[0] + ACCENT["^"])
    if len(e) == 2 and e[0] in ACCENT and e[1].isalpha():
        return unicodedata.normalize("NFC", e[1] + ACCENT[e[0]])
    if len(e) == 2 and e[0] == "^" and e[1].isalpha():
        return unicodedata.normalize("NFC", e[1] + CIRC)
    if len(e) == 2 and e[0] == "-" and e[1].isalpha():
        return e[1]
    return m.group(0)


def drop_tag(m):
    words = [w for w in re.split(r"[\s+]+", m.group(1)) if w]
    return "" if all(SRC_WORD.match(w) for w in words) else m.group(0)


def skip_brackets(s, i, open_="[", close="]"):
    """Index just past the balanced group starting at s[i] == open_."""
    depth = 0
    for j in range(i, len(s)):
        depth += (s[j] == open_) - (s[j] == close)
        if depth == 0:
            return j + 1
    return len(s)


HEAD = re.compile(r'(?:(?:or\s+)?([^\\\n,]+?)\s*\\[^\\\n]*\\\s*(?:\([^)]{0,200}\))?\s*,?\s*)+')
SENSE = re.compile(r"^(\d+\.|\([a-z]\)|Syn:|Note:|Usage:)\s")


def gcide_entry(block):
    """'Word \\pro*nun"ci*a`tion\\ (...), n. [etym] (Field.)\\n   1. Sense...' -> 'Word, n. (Field.) 1. Sense...'"""
    m = HEAD.match(block)
    if not m:
        return None, None
    heads = [h.strip() for h in re.findall(r'(?:or\s+)?([^\\\n,]+?)\s*\\[^\\\n]*\\', m.group(0))]
    rest = block[m.end():]
    pos = re.match(r"[^\[\n(]*", rest).group(0).strip()  # part of speech, e.g. "v. t."
    i = len(re.match(r"[^\[\n(]*", rest).group(0))
    more = re.match(r"\n[ \t]+((?:(?:[a-z]{1,6}\.|&)[ \t]*)+)(?=[\[(\n])", rest[i:])
    if more:  # "prop. n.\n   pl. [NL. ..." - the part of speech wrapped
        pos, i = f"{pos} {more.group(1).strip()}", i + more.end()
    while True:  # etymology / inflection brackets, possibly over several lines
        while i < len(rest) and rest[i] in " \n":
            i += 1
        if rest.startswith("[", i):
            i = skip_brackets(rest, i)
        else:
            break
    body = rest[i:]
    # entities first: "[AE]" is a letter, "[AS]" a provenance tag
    body = re.sub(r"\[([A-Za-z][A-Za-z0-9]{1,6}|[\^'`=.\"~,\-][A-Za-z]|[A-Za-z]\^)\]", entity, body)
    # a tag line sometimes drags the next headword along ("[1913 Webster] Anagrammatic")
    body = re.sub(r"^\s*\[([^\[\]\n]*)\].*$", lambda t: drop_tag(t) and t.group(0), body, flags=re.M)
    body = re.sub(r"\[([^\[\]]*)\]", drop_tag, body)  # tags may wrap lines
    body = re.sub(r"[ \t]*\[(WordNet|1913 Webster|PJC)[^\]\n]*$", "", body, flags=re.M)  # unclosed
    # {cross refs} and {Syl*la"bi`fied} forms lose their braces and syllable marks
    body = re.sub(r"\{([^{}]*)\}", lambda b: re.sub(r'(?<=\w)[*"`]|\*', "", b.group(1)), body)
    out = []
    for para in re.split(r"\n\s*\n", body):
        lines = [ln.strip() for ln in para.split("\n") if ln.strip()]
        cur = ""
        for ln in (re.sub(r"\s+", " ", x) for x in lines):
            if cur and SENSE.match(ln):
                out.append(cur)
                cur = ln
            else:
                cur = f"{cur} {ln}".strip()
        if cur:
            out.append(cur)
    head = ", ".join(dict.fromkeys(h for h in heads if h))
    first = f"{head}, {pos}".rstrip(", ") if pos else head
    if out:
        first = f"{first} {out[0]}"
        out = out[1:]
    text = "\n".join([first] + out)
    return heads[0] if heads else None, text


def gcide_docs(index, dictdz):
    data = gzip.open(dictdz).read()  # dictzip is gzip with random-access extras
    spans = set()
    for line in Path(index).read_text(encoding="utf-8", errors="replace").split("\n"):
        parts = line.split("\t")
        if len(parts) == 3 and not parts[0].startswith("00-"):
            spans.add((b64num(parts[1]), b64num(parts[2])))
    # entries of the same headword are adjacent: one document per headword, so
    # "Abandon, v." and "Abandon, n." never straddle the split
    cur_key, cur = None, []
    for off, ln in sorted(spans):
        head, text = gcide_entry(decode(data[off:off + ln]))
        if not head or len(text) < len(head) + 8:
            continue
        key = head.lower()
        if key != cur_key and cur:
            yield cur_key, cur[0].split(",")[0], clean_text("\n\n".join(cur), 1)
            cur = []
        cur_key = key
        cur.append(text)
    if cur:
        yield cur_key, cur[0].split(",")[0], clean_text("\n\n".join(cur), 1)


# ---------------------------------------------------------------- Python code
def python_docs(roots):
    """roots: (dir, excluded path fragments); titles are paths relative to dir."""
    seen = set()
    for root, excludes in roots:
        root = Path(root)
        for f in sorted(root.rglob("*.py")):
            rel = f.relative_to(root).as_posix()
            if any(x in "/" + rel for x in excludes):
                continue
            raw = f.read_bytes()
            if len(raw) < 200 or len(raw) > 300_000:  # empty __init__s, generated blobs
                continue
            try:
                src = raw.decode("utf-8")
            except UnicodeDecodeError:  # a few latin-1 test fixtures
                continue
            if "Python Character Mapping Codec" in src[:600]:  # generated codec tables
                continue
            digest = hashlib.sha1(raw).digest()
            if digest in seen:
                continue
            seen.add(digest)
            yield rel, rel, clean_text(src, 2)


# ---------------------------------------------------------------- driver
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pkgs", required=True, help="dir with one unpacked tree per package")
    ap.add_argument("--kjv", required=True, help="text dumped by `bible -l 100000`")
    ap.add_argument("--pyver", default="3.11")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    P = Path(a.pkgs)
    pylib = f"usr/lib/python{a.pyver}"
    dist = "usr/lib/python3/dist-packages"
    std_ex = ["/site-packages/", "/dist-packages/", "/config-", "/_sysconfigdata", "/pydoc_data/",
              "/tests/data/", "/__pycache__/"]
    sources = [
        ("kjv", kjv_docs(a.kjv)),
        ("fortunes", fortune_docs([P / "fortunes-min/usr/share/games/fortunes",
                                   P / "fortunes/usr/share/games/fortunes"])),
        ("gcide", gcide_docs(P / "dict-gcide/usr/share/dictd/gcide.index",
                             P / "dict-gcide/usr/share/dictd/gcide.dict.dz")),
        ("python", python_docs([
            (P / f"libpython{a.pyver}-minimal" / pylib, std_ex),
            (P / f"libpython{a.pyver}-stdlib" / pylib, std_ex),
            (P / "python3-django" / dist, ["/conf/locale/", "/__pycache__/"]),
            (P / "python3-networkx" / dist, ["/__pycache__/"]),
        ])),
    ]
    out = Path(a.out)
    files = {s: open(out / f"{s}.txt.tmp", "w", encoding="utf-8", newline="\n") for s in ("train", "heldout")}
    stats = []
    for name, docs in sources:
        acc = {s: [0, 0, 0, 0] for s in files}  # docs, bytes, lines, words
        for key, title, text in docs:
            if not text.strip():
                continue
            split = "heldout" if zlib.crc32(f"{name}:{key}".encode()) % HELDOUT_MOD == 0 else "train"
            chunk = f"{SEP} {name} {title}\n{text}\n\n"
            files[split].write(chunk)
            st = acc[split]
            st[0] += 1
            st[1] += len(chunk.encode())
            st[2] += chunk.count("\n")
            st[3] += len(text.split())
        if acc["train"][0] == 0:
            sys.exit(f"source {name}: no documents (package layout changed?)")
        stats += [(name, s, *acc[s]) for s in files]
    for s, f in files.items():
        f.close()
        os.replace(out / f"{s}.txt.tmp", out / f"{s}.txt")
    with open(out / "stats.txt", "w") as f:
        f.write(f"{'source':10} {'split':8} {'docs':>8} {'bytes':>12} {'lines':>10} {'words':>11}\n")
        for row in stats:
            f.write("%-10s %-8s %8d %12d %10d %11d\n" % row)
        for s in files:
            tot = [sum(r[i] for r in stats if r[1] == s) for i in range(2, 6)]
            f.write("%-10s %-8s %8d %12d %10d %11d\n" % ("TOTAL", s, *tot))


if __name__ == "__main__":
    main()
