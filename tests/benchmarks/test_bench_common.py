"""Bad input to the benchmark scripts this round added or changed ends in a one-line
error, never a traceback: a missing checkpoint or N-best directory is a usage error
(exit 2) before any work; a file that is not a checkpoint, and an out-of-range option,
are named in one line."""
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"


def run(script, *args):
    return subprocess.run([sys.executable, str(BENCH / script), *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


@pytest.mark.parametrize("script", ["score_end_to_end.py", "kaldi_step_jobs.py", "rescore_speed.py"])
def test_missing_inputs_are_usage_errors(DATA, tiny_lm, tmp_path, script):
    res = run(script, "--lm", tmp_path / "nope.pt", "--nbest", DATA / "ci")
    assert res.returncode == 2 and "--lm" in res.stderr and "no such checkpoint file" in res.stderr
    res = run(script, "--lm", tiny_lm, "--nbest", tmp_path / "nodir")
    assert res.returncode == 2 and "no such N-best directory" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_file_that_is_not_a_checkpoint_and_bad_options(DATA, tiny_lm, tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_text("not a checkpoint\n")
    res = run("score_end_to_end.py", "--lm", bad, "--nbest", DATA / "ci", "--threads", "1")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [res.stderr.strip()] and "not a readable torch checkpoint" in res.stderr
    res = run("score_end_to_end.py", "--lm", tiny_lm, "--nbest", DATA / "ci", "--repeat", "0")
    assert res.returncode == 2 and "--repeat and --threads must be >= 1" in res.stderr
    res = run("score_end_to_end.py", "--lm", tiny_lm, "--nbest", DATA / "ci", "--history", "best")
    assert res.returncode == 2 and "invalid choice: 'best'" in res.stderr
    res = run("kaldi_step_jobs.py", "--lm", tiny_lm, "--nbest", DATA / "ci", "--nj", "0")
    assert res.returncode == 2 and "--nj, --num-threads and --repeat must be >= 1" in res.stderr
