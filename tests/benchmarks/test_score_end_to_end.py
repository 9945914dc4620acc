"""benchmarks/score_end_to_end.py on the ci lists: every phase of ``score`` is timed,
the phases add up to the total, and the run is a real one (all 6,000 hypotheses, the
WER of the reference file). Times are recorded, never asserted."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_score_end_to_end_on_ci(DATA, tiny_lm, tmp_path):
    out = tmp_path / "e2e.json"
    cmd = [sys.executable, "-m", "benchmarks.score_end_to_end", "--lm", str(tiny_lm), "--nbest",
           str(DATA / "ci"), "--threads", "1", "--profile", "5", "--json", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    assert "cumulative" in res.stderr  # the profile of the score phase
    d = json.loads(out.read_text())
    assert d["hypotheses"] == 6000 and d["utterances"] == 60 and d["history"] == "first-pass"
    med = d["median_seconds"]
    phases = ("read_nbest", "read_ref", "load_lm", "score", "write")
    assert abs(med["total"] - sum(med[p] for p in phases)) < 1e-6
    assert 0 < med["nn_seconds"] <= med["score"]
    assert set(d["wer"]) >= {"first_pass", "rescored", "oracle"}
    assert d["wer"]["oracle"] < d["wer"]["first_pass"]
