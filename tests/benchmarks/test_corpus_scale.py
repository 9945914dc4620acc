"""benchmarks/corpus_scale.py at two tiny sizes: the corpora hold the words asked for
(counted here, independently), the stores are a little over 2 bytes a word (uint16 ids,
one end per sentence and one start per document), train runs on each store, and under
torchrun both ranks train on the larger one. Times and memory are recorded, never asserted."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_two_sizes_prepared_trained_and_under_torchrun(DATA, tmp_path):
    out = tmp_path / "r.json"
    res = subprocess.run([sys.executable, "-m", "benchmarks.corpus_scale", "--sizes", "20000,40000", "--baseline-sizes",
                          "", "--torchrun-size", "40000", "--train-seconds", "2", "--jobs", "1", "--lm",
                          str(DATA / "lm"), "--work", str(tmp_path / "w"), "--json", str(out), "--plot",
                          str(tmp_path / "p.png")], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    d = json.loads(out.read_text())
    for row, size in zip(d["rows"], (20000, 40000)):
        text = Path(row["corpus"]["path"]).read_text(encoding="utf-8")
        words = len(text.split())
        assert words == row["corpus"]["words"] == row["wc"]["words"] and words >= size
        assert row["corpus"]["documents"] == sum(1 for doc in text.split("\n\n") if doc.strip())
        lines = sum(1 for line in text.splitlines() if line.strip())
        assert row["prepare"]["tokens"] == words + lines + row["corpus"]["documents"]
        assert 2.0 < row["prepare"]["bytes_per_word"] < 4.5
        assert row["train"]["steps"] > 0 and row["train"]["peak_rss_mb"] > 0
    tr = d["torchrun"]
    assert sorted(r["rank"] for r in tr["ranks"]) == [0, 1] and all(r["rc"] == 0 and r["steps"] > 0 for r in tr["ranks"])
    assert (tmp_path / "p.png").stat().st_size > 0
