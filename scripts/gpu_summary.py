#!/usr/bin/env python3
"""Summarises cuda_kernels_bench JSON against the GPU round goals.

For each shape (V, batch, k): the median time of each kernel, the time to
read the round's target logits once (a device-to-device copy moving as many
bytes), and the ratios the goals name:
  - warp + verify (chain speculative sampling) over the read-once time: <= 2
    at batch 64, k = 4, V = 128k; both as two launches (warp_rows, then the
    rule over the rows) and fused (chain_speculative_sampling_from_logits);
  - warp + verify at batch 1, k = 4, V = 128k: <= 15 us;
  - each rule kernel over the read-once time: <= 1.5.
Usage: gpu_summary.py cuda_kernels_bench.json
"""
import json
import re
import sys


def main(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:  # a benchmark run cut off by its time limit
        print(f"{path}: no complete results ({e})")
        return 1
    ctx = data.get("context", {})
    times = {}  # (kernel, V, batch, k) -> median microseconds
    for b in data["benchmarks"]:
        if b.get("aggregate_name", "median") != "median" or "error_occurred" in b:
            continue
        m = re.match(r"BM_(\w+?)(?:/(\w+))?/V:(\d+)/batch:(\d+)/k:(\d+)", b["name"])
        if not m:
            continue
        kernel = m.group(1) + ("/" + m.group(2) if m.group(2) else "")
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3}[b.get("time_unit", "us")]
        times[(kernel, int(m.group(3)), int(m.group(4)), int(m.group(5)))] = b["real_time"] * scale
    if not times:
        print("no benchmark results (no device?)")
        return 1
    print(f"host {ctx.get('host_name', '?')}, {ctx.get('date', '?')}; median of repetitions, microseconds")
    cols = ["ReadLogitsOnce", "Warp/temperature", "Warp/top_k_50", "Warp/top_p_0_9", "GreedyVerification",
            "Chain/speculative_sampling", "RecursiveRejectionSampling", "Chain/block_verification",
            "TypicalAcceptance", "ChainFromLogits", "TraversalVerification"]
    short = ["read", "warp", "warp_k", "warp_p", "greedy", "chain", "rrs", "block", "typical", "fused", "traversal", "w+c/read", "fused/read",
             "chain/read", "greedy/read"]
    print(f"{'V':>7} {'batch':>5} {'k':>2} " + " ".join(f"{c:>10}" for c in short))
    shapes = sorted({key[1:] for key in times})
    for v, batch, k in shapes:
        t = [times.get((c, v, batch, k)) for c in cols]
        read, warp, chain, greedy = t[0], t[1], t[5], t[4]
        ratio = lambda a, b: f"{a / b:10.2f}" if a is not None and b else f"{'-':>10}"
        w_c = warp + chain if warp is not None and chain is not None else None
        cells = [f"{x:10.1f}" if x is not None else f"{'-':>10}" for x in t]
        print(f"{v:>7} {batch:>5} {k:>2} " + " ".join(cells) + ratio(w_c, read) + ratio(t[9], read) +
              ratio(chain, read) + ratio(greedy, read))
    print()
    def get(c, v, b, k):
        return times.get((c, v, b, k))
    w, c, r = get("Warp/temperature", 128256, 64, 4), get("Chain/speculative_sampling", 128256, 64, 4), \
        get("ReadLogitsOnce", 128256, 64, 4)
    if None not in (w, c, r):
        print(f"goal batch 64, k 4, V 128k: warp + verify {w + c:.1f} us = {(w + c) / r:.2f} x read-once "
              f"({r:.1f} us); goal <= 2: {'met' if w + c <= 2 * r else 'missed'}")
    w1, c1 = get("Warp/temperature", 128256, 1, 4), get("Chain/speculative_sampling", 128256, 1, 4)
    if None not in (w1, c1):
        print(f"goal batch 1, k 4, V 128k: warp + verify {w1 + c1:.1f} us; goal <= 15 us: "
              f"{'met' if w1 + c1 <= 15 else 'missed'}")
    f, f1 = get("ChainFromLogits", 128256, 64, 4), get("ChainFromLogits", 128256, 1, 4)
    if None not in (f, r):
        print(f"goal batch 64, k 4, V 128k, fused: {f:.1f} us = {f / r:.2f} x read-once; goal <= 2: "
              f"{'met' if f <= 2 * r else 'missed'}")
    if f1 is not None:
        print(f"goal batch 1, k 4, V 128k, fused: {f1:.1f} us; goal <= 15 us: {'met' if f1 <= 15 else 'missed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
