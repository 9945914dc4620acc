"""benchmarks/contention.py: its three settings give the scorer the intended OpenMP
wait policy (``unset``: no ``OMP_WAIT_POLICY`` and no ``PASSIVE`` from the toolkit,
so libgomp uses its default spin count; ``PASSIVE``: the toolkit's default;
``ACTIVE``), checked in the environment, in the toolkit's log and in the spin count
libgomp reports it read; and on a third of the ci lists (``ci_shard``) with one busy process beside the scorer
the JSON has a median and a ratio to idle (for the default setting). Times are recorded,
never asserted."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
from benchmarks import contention


def test_setting_environments_differ_only_in_the_wait_policy(monkeypatch):
    for name, value in [("OMP_WAIT_POLICY", "PASSIVE"), ("OMP_NUM_THREADS", "7"), ("MKL_NUM_THREADS", "3"),
                        ("GOMP_SPINCOUNT", "5")]:
        monkeypatch.setenv(name, value)
    envs = {s: contention.setting_env(s) for s in contention.SETTINGS}
    for s, env in envs.items():
        assert not set(contention.CLEARED) & set(env) - {"OMP_WAIT_POLICY"}, s
    assert "OMP_WAIT_POLICY" not in envs["unset"] and "OMP_WAIT_POLICY" not in envs["PASSIVE"]
    assert envs["ACTIVE"]["OMP_WAIT_POLICY"] == "ACTIVE"
    assert envs["unset"] == envs["PASSIVE"] == {k: v for k, v in envs["ACTIVE"].items() if k != "OMP_WAIT_POLICY"}
    # unset bypasses the toolkit's PASSIVE default through the launcher; the others run the command as is
    assert contention.scorer_command("unset", ["score"])[1:] == ["-c", contention.UNSET_LAUNCHER, "score"]
    for s in ("PASSIVE", "ACTIVE"):
        assert contention.scorer_command(s, ["score"])[1:] == ["-m", "nbest_rescore", "score"]
    with pytest.raises(ValueError, match="unknown setting"):
        contention.setting_env("spinning")


@pytest.mark.parametrize("setting,env_value,spins", [("unset", None, 300_000), ("PASSIVE", "PASSIVE", 0),
                                                     ("ACTIVE", "ACTIVE", 30_000_000_000)])
@pytest.mark.slow
def test_each_setting_reaches_the_openmp_runtime(setting, env_value, spins, tiny_lm, DATA):
    """The real launcher of each setting, on ``ppl`` (which loads torch and logs the
    policy): what the process's environment holds once the toolkit and torch are
    loaded, what the toolkit logs, and the spin count libgomp prints at load."""
    # the setting's own command line
    cmd = contention.scorer_command(setting, ["-v", "ppl", "--lm", str(tiny_lm), "--text",
                                              str(DATA / "lm" / "lm_valid.txt"), "--max-words", "200"])
    env = {**contention.setting_env(setting), "OMP_DISPLAY_ENV": "verbose"}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    assert res.returncode == 0, res.stderr
    line, gomp = contention.check_logs(setting, res.stderr)
    if setting == "unset":
        assert "OpenMP wait policy unset (" in line and "PASSIVE" not in line
    else:
        assert line.endswith(f"OpenMP wait policy {env_value}")
    # the environment after importing the command line and torch, with the same launcher prefix
    prefix = contention.UNSET_PREAMBLE if setting == "unset" else ""
    code = prefix + "import os, nbest_rescore.cli, torch; print(os.environ.get('OMP_WAIT_POLICY'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=contention.setting_env(setting), cwd=REPO).stdout.split()
    assert out == [str(env_value)]
    if gomp is None:
        pytest.skip("torch's OpenMP runtime printed no GOMP_SPINCOUNT (not GNU OpenMP)")
    assert gomp == spins == contention.EXPECTED_SPINCOUNT[setting]


def test_check_logs_rejects_the_wrong_policy_or_spin_count():
    ok = "2025 INFO nbest_rescore: 2 CPU threads (CPU affinity: 2 cores), OpenMP wait policy PASSIVE\n"
    assert contention.check_logs("PASSIVE", ok + "  GOMP_SPINCOUNT = '0'\n")[1] == 0
    assert contention.check_logs("PASSIVE", ok) == (ok.split(": ", 1)[1].strip(), None)  # not GNU OpenMP
    with pytest.raises(RuntimeError, match="expected wait policy unset"):
        contention.check_logs("unset", ok)
    with pytest.raises(RuntimeError, match="GOMP_SPINCOUNT 300000, expected 0"):
        contention.check_logs("PASSIVE", ok + "  GOMP_SPINCOUNT = '300000'\n")


def test_summary_keeps_the_undisturbed_runs_apart(capsys, tmp_path):
    seconds = {"PASSIVE": {"0": {"runs_s": [10.0, 30.0, 12.0], "median_s": 12.0, "median_cpu_s": 11.0,
                                 "other_cores": [0.0, 0.9, 0.1]},
                           "2": {"runs_s": [20.0, 24.0, 60.0], "median_s": 24.0, "median_cpu_s": 11.0,
                                 "other_cores": [0.2, None, 1.0]}}}
    contention.summarize(seconds, 0.3)
    idle, busy = seconds["PASSIVE"]["0"], seconds["PASSIVE"]["2"]
    assert idle["undisturbed_runs_s"] == [10.0, 12.0] and idle["undisturbed_median_s"] == 11.0
    assert busy["undisturbed_runs_s"] == [20.0, 24.0] and busy["undisturbed_median_s"] == 22.0
    assert busy["vs_idle"] == 2.0 and busy["undisturbed_vs_idle"] == 2.0 and idle["vs_idle"] == 1.0
    contention.print_table({"threads": 2, "seconds": seconds}, [0, 2])
    out = capsys.readouterr().out
    assert "| PASSIVE, 2 threads | 12.0 s (1.00x; CPU 11.0 s); undisturbed 2/3: 11.0 s, 1.00x |" in out
    # --from-json summarises an earlier run again, here with a stricter threshold
    src, dst = tmp_path / "run.json", tmp_path / "again.json"
    src.write_text(json.dumps({"threads": 2, "seconds": seconds}))
    contention.main(["--from-json", str(src), "--max-other-cores", "0.05", "--json", str(dst)])
    again = json.loads(dst.read_text())
    assert again["max_other_cores"] == 0.05 and again["seconds"]["PASSIVE"]["0"]["undisturbed_runs_s"] == [10.0]
    assert "undisturbed 1/3: 10.0 s" in capsys.readouterr().out


@pytest.mark.slow
def test_contention_benchmark_on_ci(ci_shard, tiny_lm, tmp_path):
    """The whole benchmark for one setting (the toolkit's default, PASSIVE; what each
    setting does to the OpenMP runtime is the test above), idle and with one busy
    process: medians, ratios to idle and the machine's other cores in the JSON, the
    setting's spin count and log line, its row in the table."""
    out = tmp_path / "contention.json"
    cmd = [sys.executable, "-m", "benchmarks.contention", "--lm", str(tiny_lm), "--nbest",
           str(ci_shard), "--busy", "0", "1", "--settings", "PASSIVE", "--repeat", "1", "--retries", "0",
           "--quiet-wait", "0", "--json", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    d = json.loads(out.read_text())
    assert d["threads"] == d["cores"] >= 1
    assert set(d["seconds"]) == set(d["settings"]) == {"PASSIVE"}
    per = d["seconds"]["PASSIVE"]
    assert per["0"]["vs_idle"] == 1.0 and per["1"]["median_s"] > 0 and per["1"]["vs_idle"] > 0
    assert per["1"]["median_cpu_s"] > 0 and per["1"]["attempts"] == [1]
    assert "undisturbed_median_s" in per["1"] and "undisturbed_vs_idle" in per["1"]
    assert all(x is None or x >= 0 for x in per["1"]["other_cores"] + per["0"]["steal_cores"])
    assert d["settings"]["PASSIVE"]["gomp_spincount"] == contention.EXPECTED_SPINCOUNT["PASSIVE"]
    assert d["settings"]["PASSIVE"]["toolkit"].endswith("OpenMP wait policy PASSIVE")
    assert "| PASSIVE, " in res.stdout and "| ACTIVE, " not in res.stdout
