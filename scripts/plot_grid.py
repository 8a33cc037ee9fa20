#!/usr/bin/python3
"""Heat maps of a `specdec bench --batch ... --context ...` grid, as SPIRe's
Figure 4 draws them (arXiv 2504.06419): for each method, the measured
decode-throughput multiplier over autoregressive decoding by batch and
context, beside the performance model's (docs/methods.md).

  /usr/bin/python3 scripts/plot_grid.py docs/bench/magicdec-grid-bf16-2026-11-27.json \
      docs/bench/magicdec-grid-bf16-2026-11-27.png [--model measured|spire]

Needs python3-matplotlib (Debian).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("png")
    ap.add_argument("--model", choices=["measured", "spire"], default="measured",
                    help="the model with measured costs, or SPIRe's max(compute, memory)")
    a = ap.parse_args()
    records = json.load(open(a.json))
    key = "measured_cost_multiplier" if a.model == "measured" else "multiplier_at_occupancy"
    methods = sorted({r["method"] for r in records if "performance_model" in r})
    batches = sorted({r["batch"] for r in records})
    contexts = sorted({r["context"] for r in records})
    fig, axes = plt.subplots(len(methods), 2, figsize=(9, 3.6 * len(methods)), squeeze=False)
    for row, method in enumerate(methods):
        cells = {(r["context"], r["batch"]): r for r in records if r["method"] == method}
        for col, (title, value) in enumerate([("measured", lambda r: r["decode_speedup"]),
                                              ("model" if a.model == "spire" else "model (measured costs)",
                                               lambda r: r["performance_model"][key])]):
            grid = [[value(cells[(c, b)]) for b in batches] for c in contexts]
            ax = axes[row][col]
            im = ax.imshow(grid, origin="lower", cmap="RdYlGn", vmin=0.0, vmax=2.5, aspect="auto")
            for i, c in enumerate(contexts):
                for j, b in enumerate(batches):
                    ax.text(j, i, f"{grid[i][j]:.2f}", ha="center", va="center", fontsize=9)
            ax.set_xticks(range(len(batches)), [str(b) for b in batches])
            ax.set_yticks(range(len(contexts)), [str(c) for c in contexts])
            ax.set_xlabel("batch B")
            ax.set_ylabel("context L")
            ax.set_title(f"{method.split(':')[0]}: {title}", fontsize=10)
            fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle("decode throughput over autoregressive decoding", fontsize=11)
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)
    print(f"wrote {a.png}")


if __name__ == "__main__":
    main()
