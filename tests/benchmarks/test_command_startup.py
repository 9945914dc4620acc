"""benchmarks/command_startup.py on the ci lists: every list command timed from this
tree and from a baseline tree (here this tree again, so the ratio only has to exist);
bad arguments end in one line. Times are recorded, never asserted."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = ["-m", "benchmarks.command_startup"]


def bench(*args, cwd):
    """The benchmark from another working folder: the repository on PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *SCRIPT, *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.slow  # about 25 s: a score run, then every command twice
def test_every_command_timed_from_both_trees(DATA, tmp_path):
    out = tmp_path / "startup.json"
    res = bench("--nbest", DATA / "ci", "--repeat", 1, "--baseline-tree", REPO, "--json", out, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    d = json.loads(out.read_text())
    assert list(d["median_seconds"]) == ["split --nj 3", "convert --to jsonl", "merge (2 jobs)", "tune", "kaldi-score",
                                         "python -c 'import torch'"]
    assert all(r["this tree"] > 0 and r["baseline"] > 0 for r in d["median_seconds"].values())
    rows = [line for line in res.stdout.splitlines() if line.startswith("| ")]
    assert rows[0] == "| command | this tree (s) | baseline (s) | ratio |" and len(rows) == 1 + 6


def test_bad_arguments_end_in_one_line(tmp_path):
    for args, said in ((["--nbest", tmp_path / "none"], "no such folder"),
                       (["--nbest", tmp_path, "--repeat", 0], "--repeat must be >= 1"),
                       (["--nbest", tmp_path, "--baseline-tree", tmp_path / "old"], "no such folder")):
        res = bench(*args, cwd=tmp_path)
        assert res.returncode == 2 and said in res.stderr.splitlines()[-1] and "Traceback" not in res.stderr, res.stderr
