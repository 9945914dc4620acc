"""benchmarks/checkpoint_interval.py on a tiny GRU: one run per interval, the baseline
(off) writes no mid-epoch state, a step interval writes one every N updates, each
timed and sized. Times are recorded, never asserted."""
import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_one_run_per_interval_and_the_writes_counted(DATA, tmp_path):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": "gru", "model_config": {"embedding_dim": 16, "hidden_size": 16},
        "data": {"train": str(DATA / "lm" / "lm_train.txt"), "max_words": 4000},
        "vocab": {"max_size": 1000}, "optim": {"batch_size": 8, "bptt": 10, "max_epochs": 1}}))
    out = tmp_path / "r.json"
    res = subprocess.run([sys.executable, "-m", "benchmarks.checkpoint_interval", "--config", str(cfg), "--seconds", "30",
                          "--intervals", "off,10steps", "--json", str(out)], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    d = json.loads(out.read_text())
    off, steps = d["runs"]
    assert off["interval"] == "off" and off["mid_epoch_writes"] == 0 and off["speed_vs_first"] == 1.0
    # 4000 words in 8 streams of 10: about 50 updates, a write before updates 10, 20, 30, 40
    assert steps["interval"] == "10steps" and 3 <= steps["mid_epoch_writes"] <= 5
    assert steps["median_write_s"] > 0 and steps["last_pt_mb"] > 0
    assert d["default_interval_cost"] == steps["median_write_s"] / 300
