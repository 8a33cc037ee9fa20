"""specdec.regime on committed bench JSON: the measured round shapes reproduce
the run, the break-even draft steps are where the speedup crosses, bad input
is refused, and the map is drawn."""
import os
import subprocess
import sys

import pytest

import specdec
from specdec import plot, regime

SOURCE = os.environ.get("SPECDEC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BENCH = os.path.join(SOURCE, "docs", "bench")
GREEDY = os.path.join(BENCH, "regime-greedy-f32-2026-11-29.json")
STEPS = os.path.join(BENCH, "gpu_model_h200_2026-11-27_6.json")


def records():
    return plot.load([GREEDY])


def decode_rate(rs):
    """Tokens per second of decoding, from the records' own clocks: the
    target's and the serial draft model's time, the wait for a concurrent
    draft, and the host's work, per round."""
    tokens = seconds = 0.0
    for r in rs:
        lag = r.get("lag") or {}
        tokens += r["tau"] * r["rounds"]
        seconds += r["target_model_seconds"] + r["overhead_per_round_us"] * 1e-6 * r["rounds"]
        if lag.get("rounds", 0) > 0:
            seconds += lag["target_wait_ms_per_round"] * 1e-3 * lag["rounds"]
        else:
            seconds += r["draft_model_seconds"]
    return tokens / seconds


def test_the_shapes_reproduce_the_measured_rounds():
    c, s, chain, shapes = regime.measure(records())
    assert chain == "chain:k=4"
    assert 0.0 < c < 1.0 and 0.0 <= s < 1.0
    base = shapes[chain]
    assert base.serial_drafts == pytest.approx(4.0) and base.slowdown == pytest.approx(1.0)
    assert base.verified_tokens == pytest.approx(5.0)
    assert regime.seed_methods(shapes) == [m for m in shapes if m.split(":")[0] in ("lyanna", "duo", "sv")]
    rs = records()
    chain_rate = decode_rate([r for r in rs if r["method"] == chain])
    for m in regime.seed_methods(shapes):
        measured = decode_rate([r for r in rs if r["method"] == m]) / chain_rate
        assert specdec.speedup_over(shapes[m], base, c, s) == pytest.approx(measured, rel=1e-9)
        # The runs' own tokens/s (prefills included) agree to within a tenth.
        tps = sum(r["tokens_per_second"] for r in rs if r["method"] == m) / sum(
            r["tokens_per_second"] for r in rs if r["method"] == chain)
        assert specdec.speedup_over(shapes[m], base, c, s) == pytest.approx(tps, rel=0.1)
    # A feature head drafts without the draft model: its drafting is fixed, not in draft steps.
    lyanna = next(v for m, v in shapes.items() if m.startswith("lyanna"))
    assert lyanna.serial_drafts == 0.0 and lyanna.fixed > base.fixed
    # DuoDecoding drafts beside the verification.
    duo = next(v for m, v in shapes.items() if m.startswith("duo"))
    assert duo.overlapped_drafts > 0.0 and duo.serial_drafts == 0.0


def test_break_even_and_goal_draft_steps_are_where_the_speedup_crosses():
    c, s, chain, shapes = regime.measure(records())
    base = shapes[chain]
    lyanna = next(v for m, v in shapes.items() if m.startswith("lyanna"))
    for ratio in (1.0, 1.2):
        x = regime.draft_step_for(lyanna, base, s, ratio)
        assert x is not None
        assert specdec.speedup_over(lyanna, base, x, s) == pytest.approx(ratio, rel=1e-6)
        assert specdec.speedup_over(lyanna, base, x * 0.9, s) < ratio < specdec.speedup_over(lyanna, base, x * 1.1, s)
    # DuoDecoding in its paper's setting: the verification at v(n), the drafting hidden.
    duo = next(v for m, v in shapes.items() if m.startswith("duo"))
    own = regime.on_own_hardware(duo)
    assert own.steps(0.3, s) == pytest.approx(1.0 + s * (duo.verified_tokens - 1.0) + duo.fixed)
    assert specdec.speedup_over(own, base, c, s) > specdec.speedup_over(duo, base, c, s)


def test_the_report_names_every_seed_method_and_point():
    text = regime.report(*regime.measure(records()), [("H200, batch 1", 0.348, 0.064)])
    for name in ("lyanna", "duo", "sv", "H200, batch 1", "this run", "own hardware"):
        assert name in text


def test_input_the_map_cannot_use_is_refused(tmp_path):
    rs = records()
    assert regime.can_map(rs)
    assert not regime.can_map(plot.load([os.path.join(BENCH, "greedy-all-methods-bf16-2026-11-26.json")]))
    assert not regime.can_map([r for r in rs if not r["method"].startswith(("lyanna", "duo", "sv"))])
    with pytest.raises(ValueError, match="autoregressive"):
        regime.measure([r for r in rs if r["method"] != "autoregressive"])
    with pytest.raises(ValueError, match="chain"):
        regime.measure([r for r in rs if not r["method"].startswith("chain")])
    for bad in ("H200:0.3", "x:a:0.1", ":0.3:0.1", "x:-0.1:0.1"):
        with pytest.raises(ValueError, match="point"):
            regime.parse_point(bad)
    out = subprocess.run([sys.executable, "-m", "specdec.regime", GREEDY, "--point", "nowhere"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "LABEL:C:S" in out.stderr
    lacking = tmp_path / "lacking.json"
    lacking.write_text('[{"method": "autoregressive", "tokens_per_second": 1.0, "rounds": 3}, '
                       '{"method": "chain:k=4", "tokens_per_second": 2.0, "rounds": 1}]')
    out = subprocess.run([sys.executable, "-m", "specdec.regime", str(lacking)], capture_output=True, text=True)
    assert out.returncode == 2 and "lacks" in out.stderr


def test_points_from_a_model_benchmarks_step_times(tmp_path):
    # The H200's steps (docs/RESULTS.md, "The CUDA model on a GPU, fourth session", run 6), in microseconds.
    points = regime.step_points(STEPS, "H200")
    assert [p[0] for p in points] == ["H200, batch 1", "H200, batch 64"]
    assert points[0][1] == pytest.approx(110.6 / 318.9, abs=1e-3) and points[0][2] == pytest.approx(
        (399.9 / 318.9 - 1) / 4, abs=1e-3)
    assert points[1][1] == pytest.approx(571.3 / 2300.5, abs=1e-3) and points[1][2] == pytest.approx(
        (10953.3 / 2300.5 - 1) / 4, abs=1e-3)
    assert regime.parse_steps([f"H200={STEPS}"]) == points
    assert regime.parse_steps([STEPS])[0][0] == "gpu_model_h200_2026-11-27_6.json, batch 1"
    empty = tmp_path / "empty.json"
    empty.write_text('{"benchmarks": [{"name": "BM_Other/1", "real_time": 1.0}]}')
    with pytest.raises(ValueError, match="no BM_Step"):
        regime.step_points(str(empty))


def test_the_map_is_drawn(tmp_path):
    out = subprocess.run([sys.executable, "-m", "specdec.plot", GREEDY, "--out", str(tmp_path), "--name", "r",
                          "--point", "H200, batch 1:0.348:0.064", "--steps", f"H200={STEPS}"],
                         capture_output=True, text=True, check=True)
    paths = out.stdout.split()
    assert os.path.basename(paths[-1]) == "r-regime.png"
    with open(paths[-1], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(paths[-1]) > 10000
