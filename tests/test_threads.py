"""The CPU thread policy (nbest_rescore.threads): how many threads, and sleeping OpenMP workers."""
import os
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from nbest_rescore.cli import main
from nbest_rescore.errors import DataError
from nbest_rescore.threads import available_cores, prefer_passive_wait, thread_policy


def test_threads_option_wins_over_the_environment():
    p = thread_policy(3, {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"})
    assert (p.threads, p.source, p.wait_policy) == (3, "--threads", "PASSIVE")


@pytest.mark.parametrize("env,threads,source", [
    ({"OMP_NUM_THREADS": "1"}, 1, "OMP_NUM_THREADS=1"),
    ({"MKL_NUM_THREADS": "4"}, 4, "MKL_NUM_THREADS=4"),
    ({"OMP_NUM_THREADS": "2,1", "MKL_NUM_THREADS": "4"}, 2, "OMP_NUM_THREADS=2,1"),  # OpenMP's nested list
    ({"OMP_NUM_THREADS": " "}, None, "CPU affinity"),  # empty: ignored
])
def test_job_runner_variables_set_the_default(env, threads, source):
    p = thread_policy(None, env)
    assert p.threads == (threads or len(os.sched_getaffinity(0)))
    assert p.source.startswith(source)


def test_default_is_the_cpu_affinity_not_the_machine():
    assert available_cores() == len(os.sched_getaffinity(0))
    code = ("import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); "
            "from nbest_rescore.threads import thread_policy; print(thread_policy(None, {}).threads)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1"  # as under taskset -c 0 or a one-core cgroup


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_malformed_thread_variable_is_a_clear_error(value):
    with pytest.raises(DataError, match=f"OMP_NUM_THREADS='{value}'.*integer >= 1.*export OMP_NUM_THREADS=1"):
        thread_policy(None, {"OMP_NUM_THREADS": value})


def test_passive_wait_is_a_default_the_user_can_override():
    env = {}
    prefer_passive_wait(env)
    assert env == {"OMP_WAIT_POLICY": "PASSIVE"}
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    prefer_passive_wait(env)
    assert env == {"OMP_WAIT_POLICY": "ACTIVE"}


def test_command_line_sets_passive_wait_before_torch_loads():
    code = ("import sys, os; import nbest_rescore.cli; "
            "print('torch' in sys.modules, os.environ.get('OMP_WAIT_POLICY'))")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.split() == ["False", "PASSIVE"]


def test_ppl_logs_and_applies_the_policy(tiny_lm, DATA, monkeypatch):
    old = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    try:
        res = CliRunner().invoke(main, ["-v", "ppl", "--lm", str(tiny_lm), "--text",
                                        str(DATA / "lm" / "lm_valid.txt"), "--max-words", "200"])
        assert res.exit_code == 0, res.output
        assert "1 CPU thread (OMP_NUM_THREADS=1)" in res.stderr and torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "many")
        res = CliRunner().invoke(main, ["ppl", "--lm", str(tiny_lm), "--text", str(DATA / "lm" / "lm_valid.txt")])
        assert res.exit_code == 1 and "OMP_NUM_THREADS='many'" in res.output and "Traceback" not in res.output
    finally:
        torch.set_num_threads(old)
