"""Figures from `specdec bench --json` output (matplotlib, PNG).

    python3 -m specdec.plot BENCH.json [BENCH.json ...] --out DIR [--name PREFIX]

writes, for what the files hold:
  PREFIX-throughput.png  tokens/s by method and prompt set, speedup over
                         autoregressive decoding (measured in the same run) on each bar
  PREFIX-acceptance.png  tau (tokens per round) by method and prompt set, and the
                         acceptance rate by draft depth
  PREFIX-time.png        where a decode's time goes, method by method: drafting,
                         verification (target forward and acceptance), the rest
  PREFIX-batch.png       tokens/s against batch size (runs with --batch), one
                         panel per context length
  PREFIX-regime.png      where lyanna, duo and sv beat the chain method of the same
                         run, against a draft step's cost and a verified token's
                         (specdec.regime; --point LABEL:C:S or --steps MODEL_BENCH.json
                         marks other machines)
and prints the paths. Records are the JSON objects `specdec bench` writes, one
per method and prompt set (or per method, batch and context).
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from . import regime  # noqa: E402


def load(paths):
    """The records of every file (each a JSON list of records, or one record)."""
    records = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        records += data if isinstance(data, list) else [data]
    for r in records:
        if "method" not in r or "tokens_per_second" not in r:
            raise ValueError("not a specdec bench record (no method or tokens_per_second): "
                             + ", ".join(sorted(r)[:8]))
    return records


def label(method, width=26):
    """A method spec short enough for an axis: its name and first options."""
    return method if len(method) <= width else method[:width - 1] + "\u2026"


def _methods(records):
    seen = []
    for r in records:
        if r["method"] not in seen:
            seen.append(r["method"])
    return seen


def _grouped_bars(ax, records, key, sets, methods, annotate=None):
    width = 0.8 / max(1, len(sets))
    for i, s in enumerate(sets):
        xs, ys, notes = [], [], []
        for j, m in enumerate(methods):
            match = [r for r in records if r["method"] == m and r.get("prompt_set") == s]
            if match:
                xs.append(j + (i - (len(sets) - 1) / 2) * width)
                ys.append(match[0][key])
                notes.append(annotate(match[0]) if annotate else None)
        bars = ax.bar(xs, ys, width, label=s)
        for bar, note in zip(bars, notes):
            if note:
                ax.annotate(note, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                            va="bottom", fontsize=6, rotation=90, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(range(len(methods)))
    ax.set_xticklabels([label(m) for m in methods], rotation=35, ha="right", fontsize=7)
    if len(sets) > 1:
        ax.legend(fontsize=7, title="prompt set", title_fontsize=7)


def _title(records, what):
    r = records[0]
    return (f"{what} ({r.get('dtype', '?')}, T = {r.get('temperature', '?')}, "
            f"{r.get('max_new_tokens', '?')} new tokens)")


def throughput(records, path):
    sets = sorted({r.get("prompt_set") for r in records})
    methods = _methods(records)
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(methods) + 2), 4.2))
    _grouped_bars(ax, records, "tokens_per_second", sets, methods, lambda r: f"{r.get('speedup', 0):.2f}\u00d7")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.12)  # room for the labels
    ax.set_ylabel("tokens / s")
    ax.set_title(_title(records, "Throughput; speedup over autoregressive on each bar"), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def acceptance(records, path):
    sets = sorted({r.get("prompt_set") for r in records})
    methods = [m for m in _methods(records) if m != "autoregressive"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(max(9, 0.6 * len(methods) + 6), 4.2))
    _grouped_bars(left, [r for r in records if r["method"] in methods], "tau", sets, methods)
    left.set_ylabel("tau: tokens per round")
    left.set_title("Tokens per target forward", fontsize=9)
    for m in methods:
        rows = [r.get("acceptance_by_depth") or [] for r in records if r["method"] == m]
        depth = max((len(a) for a in rows), default=0)
        if depth == 0:
            continue
        mean = [sum(a[d] for a in rows if len(a) > d) / sum(1 for a in rows if len(a) > d) for d in range(depth)]
        right.plot(range(1, depth + 1), mean, marker="o", label=label(m))
    right.set_xlabel("draft depth")
    right.set_ylabel("acceptance rate (mean over prompt sets)")
    right.set_ylim(0, 1.02)
    right.legend(fontsize=6)
    right.set_title("Acceptance by depth", fontsize=9)
    fig.suptitle(_title(records, "Acceptance"), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def time_split(records, path):
    methods = _methods(records)
    parts = {"drafting": [], "verification": [], "the rest (host, prefill)": []}
    for m in methods:
        rs = [r for r in records if r["method"] == m]
        total = sum(r.get("seconds") or _decode_seconds(r) for r in rs)
        draft = sum(r.get("draft_seconds", 0.0) for r in rs)
        verify = sum(r.get("verify_seconds", 0.0) for r in rs)
        parts["drafting"].append(draft / total if total else 0)
        parts["verification"].append(verify / total if total else 0)
        parts["the rest (host, prefill)"].append(max(0.0, 1 - (draft + verify) / total) if total else 0)
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(methods) + 2.0))
    left = [0.0] * len(methods)
    for name, shares in parts.items():
        ax.barh(range(len(methods)), shares, left=left, label=name)
        left = [a + b for a, b in zip(left, shares)]
    ax.set_yticks(range(len(methods)))
    ax.set_yticklabels([label(m) for m in methods], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the decode's wall time")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=3)
    ax.set_title(_title(records, "Where the time goes"), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _decode_seconds(r):
    """A run's wall time from its tokens and rate (records without "seconds")."""
    tokens = r.get("prompts", 1) * r.get("max_new_tokens", 0)
    return tokens / r["tokens_per_second"] if r["tokens_per_second"] else 0.0


def batch_curves(records, path):
    contexts = sorted({r.get("context", 0) for r in records})
    fig, axes = plt.subplots(1, len(contexts), figsize=(4.2 * len(contexts), 3.8), squeeze=False)
    for ax, c in zip(axes[0], contexts):
        for m in _methods(records):
            pts = sorted((r["batch"], r["tokens_per_second"]) for r in records if r["method"] == m and r.get("context", 0) == c)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label(m))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch (requests at once)")
        ax.set_ylabel("tokens / s")
        ax.set_title(f"context {c}" if c else "tokens / s by batch", fontsize=9)
    axes[0][0].legend(fontsize=6)
    fig.suptitle(_title(records, "Batched decoding"), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def plot(records, out_dir, name, points=()):
    """Writes the figures the records allow; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    written = []
    batched = [r for r in records if "batch" in r]
    single = [r for r in records if "batch" not in r]
    figures = []
    if single:
        figures += [("throughput", throughput, single), ("acceptance", acceptance, single),
                    ("time", time_split, single)]
    if batched:
        figures += [("batch", batch_curves, batched), ("time", time_split, batched)]
    if single and regime.can_map(single):
        figures += [("regime", lambda rs, path: regime.figure(rs, path, points), single)]
    for kind, draw, rs in figures:
        path = os.path.join(out_dir, f"{name}-{kind}.png")
        if path in written:
            continue
        draw(rs, path)
        written.append(path)
    return written


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m specdec.plot", description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="+", help="specdec bench --json files")
    ap.add_argument("--out", default=".", help="directory for the PNGs")
    ap.add_argument("--name", default=None, help="file name prefix (default: the first JSON's name)")
    ap.add_argument("--point", action="append", default=[],
                    help="LABEL:C:S, another machine's draft step and verification slope on the regime map")
    ap.add_argument("--steps", action="append", default=[], metavar="[LABEL=]JSON",
                    help="regime map points from a model benchmark's step times (cuda_model_bench)")
    a = ap.parse_args(argv)
    name = a.name or os.path.splitext(os.path.basename(a.json[0]))[0]
    try:
        records = load(a.json)
        points = [regime.parse_point(p) for p in a.point] + regime.parse_steps(a.steps)
    except (OSError, ValueError) as e:
        print(f"specdec.plot: error: {e}", file=sys.stderr)
        return 2
    for path in plot(records, a.out, name, points):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
