"""benchmarks/output_layer.py: a tiny run writes the issue's JSON rows; bad values end
in a one-line usage error. The fused_softmax training option refuses a non-boolean."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nbest_rescore.config import OptimConfig
from nbest_rescore.errors import DataError

REPO = Path(__file__).resolve().parents[2]
SCRIPT = ["-m", "benchmarks.output_layer"]


def test_tiny_run_writes_rows_with_the_fused_path_equal_to_log_softmax(tmp_path):
    out = tmp_path / "o.json"
    res = subprocess.run([sys.executable, *SCRIPT, "--vocab-size", "3000", "--hidden", "16", "--rows", "8",
                          "--repeat", "1", "--json", str(out)], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(r["H"], r["N"]) for r in rows] == [(16, 8)]
    assert rows[0]["fused_gflops"] > 0 and rows[0]["max_abs_diff_nats"] < 1e-5


@pytest.mark.parametrize("args", [["--hidden", "abc"], ["--rows", "0"]])
def test_bad_values_are_one_line_usage_errors(args):
    res = subprocess.run([sys.executable, *SCRIPT, *args], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "expected comma-separated" in res.stderr or "must be >= 1" in res.stderr


def test_fused_softmax_must_be_a_boolean():
    with pytest.raises(DataError, match="fused_softmax"):
        OptimConfig(fused_softmax="maybe")
