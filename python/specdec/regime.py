"""Where Lyanna, DuoDecoding and Speculative Verification beat chain speculation.

    python3 -m specdec.regime BENCH.json [--point LABEL:C:S ...] [--steps [LABEL=]MODEL_BENCH.json ...]

Each method's round is measured once, by `specdec bench --json` beside
autoregressive decoding and a `chain:` method, and stated as a
specdec.RoundShape in target steps (policy/round_shape.hpp). The map then
varies the two costs the hardware sets: c, one draft-model step, and s, what
each further verified token adds to a verification (v(n) = 1 + s (n - 1)).
This prints each shape, the measured (c, s), each method's predicted speedup
over the chain at every point, and the draft step where it breaks even;
`python3 -m specdec.plot` draws the map (PREFIX-regime.png). docs/regime.md
explains the model and where the measured machines sit.
"""
import argparse
import json
import os
import sys

from ._specdec import RoundShape, break_even_draft_step, speedup_over

SEED_METHODS = ("lyanna", "duo", "sv")
"""The methods the map is drawn for (by the name before the first colon)."""


FIELDS = ("rounds", "tau", "target_model_seconds", "draft_model_seconds", "overhead_per_round_us",
          "verified_nodes_per_round")
"""What every record needs for the map (older `specdec bench --json` files may lack some)."""


def can_map(records):
    """Whether the records hold a map: autoregressive decoding, a chain and a
    seed method, measured one request at a time, each with FIELDS."""
    rs = [r for r in records if "batch" not in r]
    families = {_family(r["method"]) for r in rs}
    return ({"autoregressive", "chain"} <= families and bool(families & set(SEED_METHODS))
            and all(f in r for r in rs for f in FIELDS))


def _family(method):
    return method.split(":", 1)[0]


def _pool(records):
    """A method's rounds summed over its prompt sets."""
    p = dict(rounds=0, tokens=0.0, target=0.0, serial=0.0, overlapped=0.0, wait=0.0, host=0.0, nodes=0.0,
             head=False)
    for r in records:
        rounds = r["rounds"]
        lag = r.get("lag") or {}
        p["rounds"] += rounds
        p["tokens"] += r["tau"] * rounds
        p["target"] += r["target_model_seconds"]
        p["host"] += r["overhead_per_round_us"] * 1e-6 * rounds
        p["nodes"] += r["verified_nodes_per_round"] * rounds
        if lag.get("rounds", 0) > 0:  # DuoDecoding: drafting on a worker, beside the target's forward
            p["overlapped"] += lag["draft_ms_per_round"] * 1e-3 * lag["rounds"]
            p["wait"] += lag["target_wait_ms_per_round"] * 1e-3 * lag["rounds"]
        else:
            p["serial"] += r["draft_model_seconds"]
        # A feature head (EAGLE, Lyanna) drafts with its own layer and LM head, not the draft model.
        p["head"] |= r.get("draft_layer_seconds", 0.0) > 0 or r.get("draft_head_seconds", 0.0) > 0
    if p["rounds"] == 0:
        raise ValueError(f"no rounds recorded for {records[0]['method']}")
    return p


def measure(records):
    """(c, s, chain method, {method: RoundShape}) from one run's records.

    Records of the first record's dtype and temperature are used, pooled over
    prompt sets. t1, the target's step, is autoregressive decoding's target
    time per round; c is the chain's draft-model time per draft step and s its
    verification's time per further token, both in t1. Each method's shape
    reproduces its measured decode time per round at (c, s): its draft-model
    time in draft steps (serial, or overlapped for DuoDecoding's worker), its
    verification's slowdown against v(n), and the rest (host work, the wait
    for a concurrent draft, and a feature head's drafting, which does not run
    the draft model) in target steps as `fixed`.
    """
    if not records:
        raise ValueError("no records")
    first = records[0]
    rs = [r for r in records if r.get("dtype") == first.get("dtype") and r.get("temperature") == first.get("temperature")
          and "batch" not in r]
    by_method = {}
    for r in rs:
        by_method.setdefault(r["method"], []).append(r)
    if "autoregressive" not in by_method:
        raise ValueError("the regime map needs autoregressive decoding's records (specdec bench writes them)")
    chains = [m for m in by_method if _family(m) == "chain"]
    if not chains:
        raise ValueError("the regime map needs a chain: method in the same run, its baseline")
    chain = next((m for m in chains if ":rule=" not in m), chains[0])
    ar = _pool(by_method["autoregressive"])
    t1 = ar["target"] / ar["rounds"]
    ch = _pool(by_method[chain])
    k = ch["nodes"] / ch["rounds"]
    c = ch["serial"] / ch["rounds"] / k / t1
    s = (ch["target"] / ch["rounds"] / t1 - 1.0) / k
    if not (c > 0 and s >= 0):
        raise ValueError(f"{chain}: no draft time or a verification cheaper than a step (c = {c:.4g}, s = {s:.4g})")
    shapes = {}
    for method, group in by_method.items():
        if method == "autoregressive":
            continue
        p = _pool(group)
        per_round = lambda key: p[key] / p["rounds"] / t1  # noqa: E731
        n = p["nodes"] / p["rounds"] + 1.0
        verify = per_round("target")
        serial = 0.0 if p["head"] else per_round("serial") / c
        overlapped = per_round("overlapped") / c
        total = per_round("target") + per_round("serial") + per_round("wait") + per_round("host")
        # A draft longer than the verification makes the target wait; its
        # time then holds that wait, so the rest is never below zero.
        fixed = max(0.0, total - serial * c - max(verify, overlapped * c))
        shapes[method] = RoundShape(tokens=p["tokens"] / p["rounds"], serial_drafts=serial,
                                    overlapped_drafts=overlapped, verified_tokens=n,
                                    slowdown=verify / (1.0 + s * (n - 1.0)), fixed=fixed)
    return c, s, chain, shapes


def seed_methods(shapes):
    """The measured methods the map is drawn for, in SEED_METHODS order."""
    return [m for f in SEED_METHODS for m in shapes if _family(m) == f]


def on_own_hardware(shape):
    """A concurrent drafter's shape in DuoDecoding's setting (GPU target, CPU
    draft): the target keeps its hardware (verification at v(n)), and the
    drafting hides behind it, as the hardware-aware budget sizes it to; the
    tokens per round stay as measured."""
    return RoundShape(tokens=shape.tokens, serial_drafts=shape.serial_drafts, overlapped_drafts=0.0,
                      verified_tokens=shape.verified_tokens, slowdown=1.0, fixed=shape.fixed)


def parse_point(text):
    """'LABEL:C:S' -> (label, c, s)."""
    try:
        label, c, s = text.rsplit(":", 2)
        c, s = float(c), float(s)
    except ValueError:
        raise ValueError(f"a point is LABEL:C:S, e.g. 'H200, batch 1:0.348:0.064' (got {text!r})") from None
    if not label or c < 0 or s < 0:
        raise ValueError(f"a point needs a label, c >= 0 and s >= 0 (got {text!r})")
    return label, c, s


def draft_step_for(shape, base, s, ratio, c_max=1.0):
    """The draft step in [0, c_max] at which `shape` decodes `ratio` times as
    fast as `base` at slope s (None if it does not cross it there)."""
    slower = RoundShape(tokens=shape.tokens / ratio, serial_drafts=shape.serial_drafts,
                        overlapped_drafts=shape.overlapped_drafts, verified_tokens=shape.verified_tokens,
                        slowdown=shape.slowdown, fixed=shape.fixed)
    return break_even_draft_step(slower, base, s, c_max)


def step_points(path, label=None, target="target", draft="draft"):
    """Points from a model benchmark's step times (Google Benchmark JSON of
    cuda_model_bench: BM_Step/<model>/batch:B/tokens:T): at each batch B with
    the target's 1- and 5-token steps and the draft's 1-token step,
    c = draft step / target step and s = (5-token step / step - 1) / 4."""
    with open(path) as f:
        data = json.load(f)
    times = {}
    for b in data.get("benchmarks", []):
        parts = b.get("run_name", b["name"]).split("/")
        if len(parts) < 4 or parts[0] != "BM_Step" or b.get("run_type", "iteration") != "iteration":
            continue
        try:
            batch, tokens = int(parts[2].split(":")[1]), int(parts[3].split(":")[1])
        except (IndexError, ValueError):
            continue
        times[(parts[1], batch, tokens)] = b["real_time"]
    label = label or os.path.basename(path)
    points = []
    for batch in sorted({k[1] for k in times}):
        t1, t5, d1 = (times.get((target, batch, 1)), times.get((target, batch, 5)), times.get((draft, batch, 1)))
        if t1 and t5 and d1:
            points.append((f"{label}, batch {batch}", d1 / t1, (t5 / t1 - 1.0) / 4.0))
    if not points:
        raise ValueError(f"{path}: no BM_Step/{target} 1- and 5-token steps with BM_Step/{draft} at one batch")
    return points


def parse_steps(args):
    """'[LABEL=]JSON' arguments -> their step points."""
    points = []
    for arg in args:
        label, _, path = arg.rpartition("=") if "=" in arg and not os.path.exists(arg) else ("", "", arg)
        points += step_points(path, label or None)
    return points


def report(c, s, chain, shapes, points, c_max=1.0, ratios=(1.0, 1.2)):
    """The text main() prints."""
    lines = [f"measured: c = {c:.4f} (a draft step, in target steps), s = {s:.4f} (per further verified token); "
             f"baseline {chain}"]
    for m, sh in shapes.items():
        lines.append(f"  {m}: {sh!r}")
    pts = [("this run", c, s)] + list(points)
    for m in seed_methods(shapes):
        sh = shapes[m]
        variants = [(m, sh)]
        if sh.overlapped_drafts > 0 and sh.slowdown != 1.0:
            variants.append((m + " (draft on its own hardware, hidden)", on_own_hardware(sh)))
        for name, v in variants:
            lines.append(f"{name}:")
            for label, pc, ps in pts:
                at = []
                for ratio in ratios:
                    x = draft_step_for(v, shapes[chain], ps, ratio, c_max)
                    at.append(f"{ratio:g}x at c = {x:.3f}" if x is not None else f"{ratio:g}x at no c <= {c_max:g}")
                lines.append(f"  {label} (c {pc:.3f}, s {ps:.3f}): {speedup_over(v, shapes[chain], pc, ps):.3f}x "
                             f"{chain}; at this s: " + ", ".join(at))
    return "\n".join(lines)


def figure(records, path, points=(), c_max=0.6, s_max=0.5):
    """The map, one panel per seed method: its speedup over the chain at every
    (c, s), the break-even line, and the measured machines. DuoDecoding's
    panel is its paper's setting (on_own_hardware); the legend also gives its
    speedup as measured on the run's own machine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    from .plot import label

    c, s, chain, shapes = measure(records)
    methods = seed_methods(shapes)
    if not methods:
        raise ValueError("no lyanna, duo or sv records: nothing to map")
    pts = [("this run", c, s)] + list(points)
    c_max = max(c_max, 1.1 * max(p[1] for p in pts))  # every point on the map
    s_max = max(s_max, 1.1 * max(p[2] for p in pts))
    steps = 61
    cs = [c_max * i / (steps - 1) for i in range(steps)]
    ss = [s_max * j / (steps - 1) for j in range(steps)]
    base = shapes[chain]
    fig, axes = plt.subplots(1, len(methods), figsize=(4.0 * len(methods) + 1.2, 4.4), squeeze=False,
                             constrained_layout=True)
    norm = TwoSlopeNorm(vmin=0.3, vcenter=1.0, vmax=2.0)
    for n, (ax, m) in enumerate(zip(axes[0], methods)):
        measured = shapes[m]
        own = measured.overlapped_drafts > 0 and measured.slowdown != 1.0
        sh = on_own_hardware(measured) if own else measured
        grid = [[speedup_over(sh, base, x, y) for x in cs] for y in ss]
        im = ax.pcolormesh(cs, ss, grid, cmap="RdBu", norm=norm, shading="auto")
        if min(map(min, grid)) < 1.0 < max(map(max, grid)):
            ax.contour(cs, ss, grid, levels=[1.0], colors="k", linewidths=1.2)
        for i, (name, pc, ps) in enumerate(pts):
            text = f"{name}: {speedup_over(sh, base, pc, ps):.2f}\u00d7"
            if own and i == 0:
                text += f" ({speedup_over(measured, base, pc, ps):.2f}\u00d7 as measured)"
            ax.plot(pc, ps, marker="o^sD"[i % 4], color="k", markerfacecolor="w", linestyle="none", label=text)
        ax.set_xlim(0, c_max)
        ax.set_ylim(0, s_max)
        ax.set_xlabel("c: a draft step / a target step")
        if n == 0:
            ax.set_ylabel("s: each further verified token / a step")
        setting = "\ndraft on its own hardware, hidden" if own else ""
        ax.set_title(f"{label(m, 30)}{setting}\ntau {sh.tokens:.2f} vs {base.tokens:.2f}", fontsize=8)
        ax.legend(fontsize=6, loc="upper right")
    fig.colorbar(im, ax=axes[0].tolist(), label=f"speedup over {chain} (1: the black line)")
    r = records[0]
    fig.suptitle(f"Where each method beats {chain} ({r.get('dtype', '?')}, T = {r.get('temperature', '?')}; "
                 "rounds measured in this run; docs/regime.md)", fontsize=9)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m specdec.regime", description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="+", help="specdec bench --json files of one run")
    ap.add_argument("--point", action="append", default=[], help="LABEL:C:S, another machine's measured (c, s)")
    ap.add_argument("--steps", action="append", default=[], metavar="[LABEL=]JSON",
                    help="points from a model benchmark's step times (cuda_model_bench --benchmark_out)")
    a = ap.parse_args(argv)
    try:
        records = []
        for path in a.json:
            with open(path) as f:
                data = json.load(f)
            records += data if isinstance(data, list) else [data]
        points = [parse_point(p) for p in a.point] + parse_steps(a.steps)
        print(report(*measure(records), points))
    except (OSError, ValueError) as e:
        print(f"specdec.regime: error: {e}", file=sys.stderr)
        return 2
    except KeyError as e:
        print(f"specdec.regime: error: a record lacks {e} (not specdec bench --json output?)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
