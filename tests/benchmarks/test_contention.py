"""benchmarks/contention.py on the ci lists: one busy process beside the scorer; the JSON
has a median and a ratio to idle per setting, and the ``spinning`` setting really runs
with OpenMP's active wait. Times are recorded, never asserted."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import contention  # noqa: E402


def test_settings_differ_only_in_the_wait_policy_and_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    assert "OMP_NUM_THREADS" not in contention.setting_env("default")
    assert "OMP_WAIT_POLICY" not in contention.setting_env("default")
    spin = contention.setting_env("spinning")
    assert spin["OMP_WAIT_POLICY"] == "ACTIVE" and int(spin["OMP_NUM_THREADS"]) >= 1


def test_contention_benchmark_on_ci(DATA, tiny_lm, tmp_path):
    out = tmp_path / "contention.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "contention.py"), "--lm", str(tiny_lm), "--nbest",
           str(DATA / "ci"), "--busy", "0", "1", "--repeat", "1", "--json", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    d = json.loads(out.read_text())
    for setting in ("default", "spinning"):
        per = d["seconds"][setting]
        assert per["0"]["vs_idle"] == 1.0 and per["1"]["median_s"] > 0 and per["1"]["vs_idle"] > 0
    assert "| default |" in res.stdout
