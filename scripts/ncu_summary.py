#!/usr/bin/env python3
"""Sums Nsight Compute's per-kernel times (ncu --csv --metrics
gpu__time_duration.sum) of a run of decode steps: per step (a step starts at
each embedding launch), the time of each kernel, grouped by kernel and grid.
Usage: ncu_summary.py ncu.csv
"""
import csv
import re
import sys
from collections import OrderedDict


def short(name):
    """'void specdec::...::linear_kernel<unsigned short, (LinearKind)1>(...)' -> 'linear_kernel<unsigned short, 1>'"""
    name = name.removeprefix("void ").replace("<unnamed>::", "").replace("(anonymous namespace)::", "")
    name = re.sub(r"\([\w:]+\)", "", name)  # enum casts: (LinearKind)1 -> 1
    m = re.match(r"([^<(]*)(<[^(]*>)?", name)
    base = m.group(1).split("::")[-1]
    args = re.sub(r"[\w:]+::", "", m.group(2) or "")
    return base + args


def main(path):
    launches = []  # (kernel, grid, microseconds)
    with open(path) as f:
        lines = [l for l in f if l.startswith('"')]
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[row["Metric Unit"]]
        launches.append((short(row["Kernel Name"]), row.get("Grid Size", ""), value * scale))
    starts = [i for i, l in enumerate(launches) if l[0].startswith("embed_kernel")]
    if len(starts) < 2:
        print(f"{path}: {len(launches)} launches, no whole step between two embeddings")
        return 1
    steps = [launches[a:b] for a, b in zip(starts, starts[1:])]
    step = min(steps, key=lambda s: sum(t for _, _, t in s))  # the quickest whole step
    groups = OrderedDict()
    for kernel, grid, t in step:
        g = groups.setdefault((kernel, grid), [0, 0.0])
        g[0] += 1
        g[1] += t
    total = sum(t for _, _, t in step)
    print(f"{len(steps)} whole steps; the quickest: {len(step)} launches, {total:.1f} us of kernels")
    print(f"{'kernel':<48} {'grid':<16} {'launches':>8} {'us':>9} {'share':>6}")
    for (kernel, grid), (n, t) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"{kernel[:48]:<48} {grid:<16} {n:>8} {t:>9.1f} {100 * t / total:>5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
