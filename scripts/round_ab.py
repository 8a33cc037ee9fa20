#!/usr/bin/env python3
"""Paired before/after runs of `specdec bench` for chain:k=4 at temperature 0
and 1: per round, each build in turn; reports medians of tokens/s, speedup
over each build's own autoregressive run, and host overhead per round."""
import json, statistics, subprocess, sys, tempfile, os
builds = {"before": sys.argv[1], "after": sys.argv[2]}
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
out_json = sys.argv[4] if len(sys.argv) > 4 else None
rows = {}
for r in range(rounds):
    for t in ("0", "1"):
        for name, binary in builds.items():
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
                path = f.name
            cmd = [binary, "bench", "--prompts", "data/prompts/prose.jsonl", "--prompts", "data/prompts/code.jsonl",
                   "--num-prompts", "8", "--max-new-tokens", "96", "--dtype", "bf16", "--method", "chain:k=4",
                   "--temperature", t, "--json", path]
            subprocess.run(cmd, capture_output=True, check=True)
            recs = json.load(open(path)); os.unlink(path)
            for rec in recs:
                key = (name, t, rec["prompt_set"], rec["method"])
                d = rows.setdefault(key, {"tps": [], "speedup": [], "ovh_us": []})
                d["tps"].append(rec["tokens_per_second"]); d["speedup"].append(rec["speedup"])
                d["ovh_us"].append(rec["overhead_per_round_us"])
summary = []
for (name, t, s, m), d in sorted(rows.items()):
    line = {"build": name, "temperature": float(t), "prompt_set": s, "method": m,
            "median_tokens_per_second": statistics.median(d["tps"]),
            "median_speedup": statistics.median(d["speedup"]),
            "median_overhead_per_round_us": statistics.median(d["ovh_us"]), "runs": d}
    summary.append(line)
    print(f"{name:6s} T={t} {s:6s} {m:16s} tok/s {line['median_tokens_per_second']:8.1f} "
          f"speedup {line['median_speedup']:.2f} ovh/round {line['median_overhead_per_round_us']:6.1f} us")
if out_json:
    json.dump(summary, open(out_json, "w"), indent=1)
