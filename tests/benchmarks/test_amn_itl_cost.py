"""benchmarks/amn_itl_cost.py on a tiny CPU setting: every row is timed, the ratios are
to the AMN without the ITL, and a missing text is one usage line. Times are recorded,
never asserted."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = "-m", "benchmarks.amn_itl_cost"


def test_rows_and_ratios(DATA, tmp_path):
    out = tmp_path / "cost.json"
    r = subprocess.run([sys.executable, *BENCH, "--text", str(DATA / "lm" / "lm_train.txt"), "--max-words", "8000",
                        "--vocab-size", "500", "--hidden", "8", "--gru-hidden", "10", "--batch-size", "4",
                        "--bptt", "5", "--warmup", "1", "--steps", "2", "--repeat", "2", "--json", str(out)],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    assert set(d["models"]) == {"amn (no ITL)", "amn + ITL spread", "amn + ITL experts", "gru 10"}
    assert d["models"]["amn (no ITL)"]["relative_to_amn"] == 1.0
    for row in d["models"].values():
        assert len(row["all_words_per_s"]) == 2 and row["words_per_s"] > 0
    bad = subprocess.run([sys.executable, *BENCH, "--text", str(tmp_path / "none.txt")], capture_output=True,
                         text=True, cwd=REPO, timeout=120)
    assert bad.returncode == 2 and "--text" in bad.stderr and "Traceback" not in bad.stderr
