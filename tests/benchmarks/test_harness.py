"""benchmarks/harness.py: a child's peak RSS and CPU seconds are its own, timed calls
and the machine description; and bad input to the benchmark scripts ends in a one-line
error, never a traceback: a missing checkpoint or N-best directory is a usage error
(exit 2) before any work; a file that is not a checkpoint, and an out-of-range option,
are named in one line. No benchmark module patches ``sys.path``."""
import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import harness

REPO = Path(__file__).resolve().parents[2]
#: Allocates and touches about 200 MB, then uses CPU for about 0.3 s.
HOG = "b = bytearray(200 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nimport time\nt = time.process_time()\n" \
      "while time.process_time() - t < 0.3: pass\nprint('done')"


def run(script, *args):
    return subprocess.run([sys.executable, "-m", f"benchmarks.{script}", *map(str, args)], capture_output=True,
                          text=True, cwd=REPO, timeout=300)


def test_run_measured_reports_the_child_alone():
    ballast = bytearray(300 << 20)  # this process larger than any measured child: not carried over to them
    ballast[::4096] = b"x" * len(ballast[::4096])
    small = harness.run_measured([sys.executable, "-c", "print('hi')"])
    big = harness.run_measured([sys.executable, "-c", HOG], load_pids=[])
    assert small["rc"] == big["rc"] == 0 and small["stdout"] == "hi\n" and big["stdout"] == "done\n"
    assert big["peak_rss_mb"] > 200 > small["peak_rss_mb"]  # each its own peak, not the largest so far
    assert big["cpu_seconds"] >= 0.3 and big["seconds"] >= big["cpu_seconds"] * 0.5
    assert set(big) >= {"other_cores", "steal_cores"} and "other_cores" not in small
    fail = harness.run_measured([sys.executable, "-c", "import sys; sys.exit('no')"])
    assert fail["rc"] == 1 and fail["stderr"] == "no\n"
    missing = harness.run_measured(["no-such-program-here"])
    assert missing["rc"] == 127 and "no-such-program-here" in missing["stderr"]
    del ballast


def test_time_calls_and_machine():
    calls = []
    times = harness.time_calls(lambda: calls.append(1), 3, warmup=2)
    assert len(times) == 3 and len(calls) == 5 and all(t >= 0 for t in times)
    assert harness.median([3, 1, 2]) == 2.0
    m = harness.machine(2, "cpu", extra=1)
    assert m["threads"] == 2 and m["device"] == "cpu" and m["extra"] == 1
    assert {"cpu", "cpu_count", "python", "torch", "load_average_at_start"} <= set(m)
    json.dumps(m)


def test_no_module_patches_sys_path():
    for path in (REPO / "benchmarks").glob("*.py"):
        tree = ast.parse(path.read_text())
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "path"
                 and isinstance(n.value, ast.Name) and n.value.id == "sys"]
        assert not calls, f"{path.name} uses sys.path"


@pytest.mark.parametrize("script", ["score_end_to_end", "kaldi_step_jobs", "rescore_speed"])
def test_missing_inputs_are_usage_errors(DATA, tiny_lm, tmp_path, script):
    res = run(script, "--lm", tmp_path / "nope.pt", "--nbest", DATA / "ci")
    assert res.returncode == 2 and "--lm" in res.stderr and "no such checkpoint file" in res.stderr
    res = run(script, "--lm", tiny_lm, "--nbest", tmp_path / "nodir")
    assert res.returncode == 2 and "no such N-best directory" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_file_that_is_not_a_checkpoint_and_bad_options(DATA, tiny_lm, tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_text("not a checkpoint\n")
    res = run("score_end_to_end", "--lm", bad, "--nbest", DATA / "ci", "--threads", "1")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [res.stderr.strip()] and "not a readable torch checkpoint" in res.stderr
    res = run("score_end_to_end", "--lm", tiny_lm, "--nbest", DATA / "ci", "--repeat", "0")
    assert res.returncode == 2 and "--repeat and --threads must be >= 1" in res.stderr
    res = run("score_end_to_end", "--lm", tiny_lm, "--nbest", DATA / "ci", "--history", "best")
    assert res.returncode == 2 and "invalid choice: 'best'" in res.stderr
    res = run("kaldi_step_jobs", "--lm", tiny_lm, "--nbest", DATA / "ci", "--nj", "0")
    assert res.returncode == 2 and "--nj, --num-threads and --repeat must be >= 1" in res.stderr
