"""benchmarks/rescore_speed.py on the ci lists: the three exact paths agree within
1e-4 nats (each path is computed in its own process) and the JSON has the fields the
README tables are built from. Times are recorded, never asserted."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_rescore_speed_paths_agree_on_ci(DATA, tiny_lm, tmp_path):
    out = tmp_path / "speed.json"
    cmd = [sys.executable, "-m", "benchmarks.rescore_speed", "--lm", str(tiny_lm),
           "--nbest", str(DATA / "ci"), "--max-utts", "4", "--nbest-size", "20", "--repeat", "1",
           "--threads", "1", "--paths", "one_at_a_time,padded_batch,default,default_int8", "--json", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    d = json.loads(out.read_text())
    paths = d["paths"]
    assert set(paths) == {"one_at_a_time", "padded_batch", "default", "default_int8"}
    for name in ("padded_batch", "default"):
        assert paths[name]["max_abs_diff_vs_one_at_a_time"] <= 1e-4
        assert paths[name]["hypotheses"] == 80
    # int8 changes the costs, but by little per word; the exact paths by nothing
    assert 0 < paths["default_int8"]["mean_abs_diff_per_word_vs_default"] < 0.1
    # the tree holds fewer LM positions than the padded batches compute
    assert paths["default"]["lm_positions"] < paths["padded_batch"]["lm_positions"]
    for r in paths.values():
        assert r["words_per_s"] > 0 and r["hyps_per_s"] > 0 and r["peak_rss_mb"] > 0
        assert r["peak_cuda_mb"] is None
    assert set(d["speedup_words_per_s"]) >= {"default/one_at_a_time", "default/padded_batch"}


def test_rescore_speed_rejects_unknown_paths_int8_on_cuda_and_float16_on_cpu(DATA, tiny_lm):
    base = [sys.executable, "-m", "benchmarks.rescore_speed", "--lm", str(tiny_lm),
            "--nbest", str(DATA / "ci")]
    res = subprocess.run(base + ["--paths", "default_int8", "--device", "cuda"], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 2 and "CPU only" in res.stderr
    res = subprocess.run(base + ["--paths", "default_float16"], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 2 and "CUDA only" in res.stderr
    res = subprocess.run(base + ["--paths", "nonsense"], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 2 and "unknown" in res.stderr
