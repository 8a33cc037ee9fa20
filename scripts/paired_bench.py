#!/usr/bin/env python3
"""Paired A/B runs of `specdec bench`: two or more builds (or settings) in
turn, round after round, and per method and prompt set the median tokens/s
of each and the median of the per-round ratios to the first. A drift of the
machine's speed between rounds moves both sides of a pair alike, so the
ratios hold where absolute figures do not.

Each configuration is BINARY[,THREADS[,ENV=VALUE...]]:

  python3 scripts/paired_bench.py --rounds 4 --dtype bf16 \\
      old/bin/specdec,2 build/bin/specdec,2 build/bin/specdec,0
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import tempfile

METHODS = ["chain:k=4", "tree", "dynamic", "ngram", "lyanna", "eagle", "sv"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("configs", nargs="+", help="BINARY[,THREADS[,ENV=VALUE...]]; the first is the reference")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--prompts", action="append", help="prompt sets (default prose and code)")
    p.add_argument("--num-prompts", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--method", action="append", help=f"methods besides autoregressive (default {' '.join(METHODS)})")
    args = p.parse_args()
    prompts = args.prompts or ["data/prompts/prose.jsonl", "data/prompts/code.jsonl"]
    methods = args.method or METHODS

    tps = collections.defaultdict(lambda: collections.defaultdict(list))
    differ = collections.Counter()
    for r in range(args.rounds):
        for c in args.configs:
            binary, *rest = c.split(",")
            threads = rest[0] if rest else "0"
            env = dict(os.environ)
            for kv in rest[1:]:
                k, v = kv.split("=", 1)
                env[k] = v
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
                out = f.name
            cmd = [binary, "bench", "--num-prompts", str(args.num_prompts), "--max-new-tokens", str(args.max_new_tokens),
                   "--dtype", args.dtype, "--threads", threads, "--json", out]
            for s in prompts:
                cmd += ["--prompts", s]
            for m in methods:
                cmd += ["--method", m]
            subprocess.run(cmd, env=env, capture_output=True, check=True)
            with open(out) as f:
                records = json.load(f)
            os.unlink(out)
            for rec in records:
                if "method" not in rec:
                    continue
                tps[(rec["method"], rec["prompt_set"])][c].append(rec["tokens_per_second"])
                differ[c] += rec.get("outputs_differing_from_autoregressive", 0)
        print(f"round {r + 1}/{args.rounds} done", flush=True)

    ref = args.configs[0]
    print(f"\nmedian tokens/s over {args.rounds} rounds ({args.dtype}); ratio = median of per-round ratios to {ref}")
    print(f"{'method':40s} {'set':12s} " + " | ".join(f"{c[-30:]:>30s}" for c in args.configs))
    for (method, pset), by in sorted(tps.items()):
        cells = [f"{statistics.median(by[ref]):9.1f}"]
        for c in args.configs[1:]:
            ratios = [b / a for a, b in zip(by[ref], by[c])]
            cells.append(f"{statistics.median(by[c]):9.1f} ({statistics.median(ratios):.3f})")
        print(f"{method[:40]:40s} {pset:12s} " + " | ".join(f"{x:>30s}" for x in cells))
    print("greedy outputs differing from autoregressive: " + ", ".join(f"{c}: {differ[c]}" for c in args.configs))


if __name__ == "__main__":
    main()
