"""benchmarks/convert_memory.py: peak RSS of the real convert command on the lists
copied K times, a table with the ratio to the smallest K and a verdict per format;
bad arguments are usage errors."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def bench(*args):
    return subprocess.run([sys.executable, "-m", "benchmarks.convert_memory", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO)


def test_table_and_verdict_on_ci(DATA, tmp_path):
    res = bench("--nbest", DATA / "ci", "--scale", 1, 2, "--repeat", 1, "--to", "jsonl", "--json", tmp_path / "m.json")
    assert res.returncode == 0, res.stderr
    assert "| jsonl | 1 | 6,000 |" in res.stdout and "| jsonl | 2 | 12,000 |" in res.stdout, res.stdout
    assert "verdict --to jsonl: peak RSS at K=2 is " in res.stdout and (tmp_path / "m.json").is_file()


def test_bad_arguments_are_usage_errors(tmp_path):
    res = bench("--nbest", tmp_path / "missing")
    assert res.returncode == 2 and "no such N-best directory" in res.stderr and "Traceback" not in res.stderr
