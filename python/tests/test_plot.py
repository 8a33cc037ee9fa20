"""python3 -m specdec.plot on committed bench JSON: a single-batch grid (every
method on three prompt sets) and a batch x context grid."""
import os
import subprocess
import sys

import pytest

from specdec import plot

SOURCE = os.environ.get("SPECDEC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BENCH = os.path.join(SOURCE, "docs", "bench")
PNG = b"\x89PNG\r\n\x1a\n"


def is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == PNG and os.path.getsize(path) > 10000


def test_every_figure_of_a_method_grid(tmp_path):
    out = subprocess.run([sys.executable, "-m", "specdec.plot", os.path.join(BENCH, "greedy-all-methods-bf16-2026-11-26.json"),
                          "--out", str(tmp_path), "--name", "grid"], capture_output=True, text=True, check=True)
    paths = out.stdout.split()
    # Written before bench records had the regime map's fields: no map.
    assert [os.path.basename(p) for p in paths] == ["grid-throughput.png", "grid-acceptance.png", "grid-time.png"]
    assert all(is_png(p) for p in paths)


def test_batch_curves_of_a_batch_grid(tmp_path):
    paths = plot.plot(plot.load([os.path.join(BENCH, "magicdec-grid-bf16-2026-11-27.json")]), str(tmp_path), "b")
    assert [os.path.basename(p) for p in paths] == ["b-batch.png", "b-time.png"]
    assert all(is_png(p) for p in paths)


def test_a_file_that_is_not_bench_json_is_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"x": 1}]')
    with pytest.raises(ValueError, match="not a specdec bench record"):
        plot.load([str(bad)])
    out = subprocess.run([sys.executable, "-m", "specdec.plot", str(bad), "--out", str(tmp_path)],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "specdec.plot: error" in out.stderr
