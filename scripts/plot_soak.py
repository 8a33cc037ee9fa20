#!/usr/bin/python3
"""Resident memory over a `specdec bench --soak` run, from its --soak-rss
CSV (seconds, rss_bytes, requests): RSS in MB against time, the finished
requests on a second axis, the warm-up mark and the growth after it from
the run's --json summary when given.

  /usr/bin/python3 scripts/plot_soak.py rss.csv rss.png [--json soak.json]

Needs python3-matplotlib (Debian).
"""
import argparse
import csv
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("png")
    ap.add_argument("--json", help="the soak's --json summary (warm-up mark, growth, requests)")
    a = ap.parse_args()
    rows = list(csv.DictReader(open(a.csv)))
    minutes = [float(r["seconds"]) / 60 for r in rows]
    rss = [int(r["rss_bytes"]) / 1e6 for r in rows]
    requests = [int(r["requests"]) for r in rows]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(minutes, rss, color="tab:blue", lw=1.2, label="resident memory")
    ax.set_xlabel("minutes")
    ax.set_ylabel("resident memory (MB)", color="tab:blue")
    ax.set_ylim(0, max(rss) * 1.15)
    ax2 = ax.twinx()
    ax2.plot(minutes, requests, color="tab:gray", lw=1, ls="--", label="requests finished")
    ax2.set_ylabel("requests finished", color="tab:gray")
    title = "specdec bench --soak"
    if a.json:
        s = json.load(open(a.json))["soak"]
        if s.get("warm_seconds", -1) >= 0:
            ax.axvline(s["warm_seconds"] / 60, color="tab:red", lw=0.8, ls=":")
            ax.text(s["warm_seconds"] / 60, max(rss) * 1.05, " warm", color="tab:red", fontsize=8)
        title += (f": {s['requests']:,} requests ({s['aborted']:,} aborted), {s['checked']:,} checked, "
                  f"{len(s['mismatches'])} differing; RSS {s['rss_growth_percent']:+.2f}% after warm-up")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(a.png, dpi=120)


if __name__ == "__main__":
    main()
