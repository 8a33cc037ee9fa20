#!/usr/bin/env python3
"""Decoding speed when other work takes the cores (docs/RESULTS.md, "When
other work takes the cores").

Runs `specdec bench` quiet, beside one and two busy processes of its own
(plain `while :; do :; done` loops, each in a session of its own, at normal
priority or --busy-nice), and quiet again, for
each thread setting, in rounds that interleave the loads, so a drift of the
machine's speed shows in every column alike. Then one busy process beside
DuoDecoding (its draft worker on a core of its own). The busy processes are
stopped whatever happens (an error, Ctrl-C). Prints tokens/s per cell, the
medians over rounds, the ratios to quiet and to one thread under the same
load, and the goals of issue 26; --json writes every run.

  python3 scripts/contention_bench.py                       # defaults below
  python3 scripts/contention_bench.py --rounds 5 --json build/contention.json
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

LOADS = ["quiet", "busy1", "busy2", "quiet_again"]


def start_busy(n, nice=0):
    # Each in a session of its own, as another program would be (Linux's
    # autogroups then share the cores between sessions, not threads).
    return [subprocess.Popen(["nice", "-n", str(nice), "sh", "-c", "while :; do :; done"], start_new_session=True)
            for _ in range(n)]


def stop_busy(procs):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def run_bench(args, threads, methods, busy):
    """One `specdec bench` beside `busy` busy processes: {method: record}."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [args.specdec, "bench", "--prompts", args.prompts, "--num-prompts", str(args.num_prompts),
           "--max-new-tokens", str(args.max_new_tokens), "--dtype", args.dtype, "--threads", str(threads),
           "--json", out]
    for m in methods:
        cmd += ["--method", m]
    procs = start_busy(busy, args.busy_nice)
    try:
        time.sleep(0.2)  # the loops are running before the bench starts
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=args.timeout)
    finally:
        stop_busy(procs)
    with open(out) as f:
        records = json.load(f)
    os.unlink(out)
    # Records are named by the full spec (duo's carries its parameters).
    return {r["method"].split(":")[0] if r["method"].startswith("duo") else r["method"]: r
            for r in records if "method" in r}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--specdec", default="build/bin/specdec")
    p.add_argument("--prompts", default="data/prompts/prose.jsonl")
    p.add_argument("--num-prompts", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--method", action="append", help="method(s) besides autoregressive (default chain:k=4)")
    p.add_argument("--threads", default="0,2,1", help="thread settings, comma-separated (0 = the default)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-duo", action="store_true", help="skip the DuoDecoding case")
    p.add_argument("--busy-nice", type=int, default=0, help="nice value of the busy processes (19: the lowest priority)")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--json", help="write every run here")
    p.add_argument("--check", action="store_true",
                   help="exit 1 if decoding collapses under load (below 0.1 of quiet with more than one thread; "
                        "the collapse of issue 26 was 0.003-0.02) or does not recover (quiet again below 0.5 of quiet): "
                        "a guard with a wide margin, for CI")
    args = p.parse_args()
    methods = args.method or ["chain:k=4"]
    names = ["autoregressive"] + methods
    threads = [int(t) for t in args.threads.split(",")]
    busy_of = {"quiet": 0, "busy1": 1, "busy2": 2, "quiet_again": 0}

    runs = []  # {round, threads, load, method, tokens_per_second, contention}
    for r in range(args.rounds):
        for t in threads:
            for load in LOADS:
                recs = run_bench(args, t, methods, busy_of[load])
                for name in names:
                    rec = recs[name]
                    runs.append({"round": r, "threads": t, "load": load, "method": name,
                                 "tokens_per_second": rec["tokens_per_second"], "contention": rec.get("contention")})
                print(f"round {r + 1}/{args.rounds} threads={t} {load:11s} " +
                      " ".join(f"{n} {recs[n]['tokens_per_second']:.0f}" for n in names), flush=True)
    duo = []
    if not args.no_duo:
        for r in range(args.rounds):
            for load in ["quiet", "busy1"]:
                recs = run_bench(args, 0, ["duo"], busy_of[load])
                for name in ["autoregressive", "duo"]:
                    duo.append({"round": r, "load": load, "method": name,
                                "tokens_per_second": recs[name]["tokens_per_second"],
                                "contention": recs[name].get("contention")})
                print(f"round {r + 1}/{args.rounds} duo {load:11s} autoregressive "
                      f"{recs['autoregressive']['tokens_per_second']:.0f} duo {recs['duo']['tokens_per_second']:.0f}",
                      flush=True)

    def med(rows, **key):
        v = [x["tokens_per_second"] for x in rows if all(x[k] == w for k, w in key.items())]
        return statistics.median(v) if v else float("nan")

    print(f"\nmedian tokens/s over {args.rounds} rounds ({args.dtype}, {args.prompts}, "
          f"{args.num_prompts} prompts x {args.max_new_tokens} tokens)")
    print(f"{'method':24s} {'threads':>7s} " + " ".join(f"{l:>11s}" for l in LOADS) +
          "  busy1/quiet busy2/quiet  vs 1 thread (busy1, busy2)")
    summary = []
    for name in names:
        for t in threads:
            m = {l: med(runs, method=name, threads=t, load=l) for l in LOADS}
            quiet = (m["quiet"] + m["quiet_again"]) / 2
            one = {l: med(runs, method=name, threads=1, load=l) for l in LOADS} if 1 in threads else None
            row = {"method": name, "threads": t, **{l: m[l] for l in LOADS},
                   "busy1_over_quiet": m["busy1"] / quiet, "busy2_over_quiet": m["busy2"] / quiet}
            if one:
                row["busy1_over_one_thread"] = m["busy1"] / one["busy1"]
                row["busy2_over_one_thread"] = m["busy2"] / one["busy2"]
            summary.append(row)
            vs1 = f"  {row['busy1_over_one_thread']:.2f} {row['busy2_over_one_thread']:.2f}" if one else ""
            print(f"{name:24s} {t:7d} " + " ".join(f"{m[l]:11.1f}" for l in LOADS) +
                  f"  {row['busy1_over_quiet']:11.2f} {row['busy2_over_quiet']:11.2f}{vs1}")
    if duo:
        for name in ["autoregressive", "duo"]:
            q, b = med(duo, method=name, load="quiet"), med(duo, method=name, load="busy1")
            print(f"duo run: {name:16s} quiet {q:8.1f} busy1 {b:8.1f} busy1/quiet {b / q:.2f}")
    print("\ngoals (issue 26): busy1/quiet >= 0.625, busy2/quiet >= 0.333, never below one thread under load")
    for row in summary:
        if row["threads"] == 1:
            continue
        ok1 = row["busy1_over_quiet"] >= 1 / 1.6
        ok2 = row["busy2_over_quiet"] >= 1 / 3
        ok3 = "busy1_over_one_thread" not in row or (row["busy1_over_one_thread"] >= 1.0 and
                                                     row["busy2_over_one_thread"] >= 1.0)
        print(f"  {row['method']:24s} threads={row['threads']}: busy1 {'met' if ok1 else 'MISSED'}, "
              f"busy2 {'met' if ok2 else 'MISSED'}, vs one thread {'met' if ok3 else 'MISSED'}")
    failures = []
    for row in summary:
        if row["threads"] == 1:
            continue
        for load in ["busy1", "busy2"]:
            if row[f"{load}_over_quiet"] < 0.1:
                failures.append(f"{row['method']} threads={row['threads']}: {load} at {row[f'{load}_over_quiet']:.2f} "
                                "of quiet (a collapse)")
        if row["quiet_again"] < 0.5 * row["quiet"]:
            failures.append(f"{row['method']} threads={row['threads']}: quiet again at "
                            f"{row['quiet_again'] / row['quiet']:.2f} of quiet (no recovery)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "duo": duo, "summary": summary,
                       "settings": {k: v for k, v in vars(args).items()}}, f, indent=2)
        print(f"wrote {args.json}")
    if args.check:
        for f in failures:
            print(f"check failed: {f}")
        if failures:
            sys.exit(1)
        print("check passed: no collapse under load, speed recovered")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
