#!/usr/bin/env python
"""Rescoring time when other busy processes share the cores (Kaldi's ``--nj`` jobs side
by side on a shared node), against the time on an idle machine, per OpenMP wait policy.

Each measurement runs the whole command ``nbest-rescore -v score --lm LM --nbest DIR
--history first-pass`` in a fresh process (start-up, reading and writing included)
while K busy processes (pure-Python spin loops, like ``yes > /dev/null``) run beside
it, for K in ``--busy`` (0 = idle). The settings differ only in ``OMP_WAIT_POLICY``,
the variable that tells the OpenMP runtime what its idle worker threads do between
parallel regions. torch's Linux CPU wheels use GNU OpenMP (libgomp, shipped as
``torch/lib/libgomp.so.1``), which reads the variable once, when it loads (the first
``import torch``). Its manual (GOMP_SPINCOUNT and OMP_WAIT_POLICY in the libgomp
documentation) describes three behaviours:

* ``unset``: the variable is not in the environment, what every version of this
  toolkit before its thread policy ran with and what a plain torch script gets.
  libgomp then lets an idle thread busy-wait for a bounded number of spins (300,000
  by default; only 100 when the process has more OpenMP threads than CPUs it may run
  on) and then sleep. The bound is a spin count, not a time: on the 2-core AMD EPYC
  of the README it came to roughly 10 ms of CPU per wait in a small probe, and idle
  scoring ran as fast as with ``ACTIVE``. The busy processes do not lower the count
  (libgomp compares its own threads with the CPUs of its affinity mask, not with the
  machine's load). The command line
  now sets ``PASSIVE`` whenever the variable is unset
  (:func:`nbest_rescore.threads.prefer_passive_wait`, run when
  ``nbest_rescore.cli`` is imported), so this setting starts the same command through
  a two-line launcher (:data:`UNSET_LAUNCHER`) that replaces that function with a
  no-op before importing ``nbest_rescore.cli``: nothing else of the command changes,
  the variable stays unset when torch loads, and ``-v`` logs the wait policy as
  unset. (Importing torch before ``nbest_rescore.cli`` would also leave libgomp with
  the variable unset, but the toolkit would then still set ``PASSIVE`` in
  ``os.environ`` and log it, which would not be what the runtime read.)
* ``PASSIVE``: the toolkit's default now: the variable is removed from the
  environment as for ``unset`` and the command line sets ``PASSIVE`` itself; libgomp
  uses a spin count of 0, so idle threads sleep at once (futex wait).
* ``ACTIVE``: ``OMP_WAIT_POLICY=ACTIVE`` in the environment (the toolkit keeps a value
  the user set); libgomp spins 30 billion times, i.e. practically forever, between
  parallel regions (1,000 times with more threads than CPUs).

``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and ``GOMP_SPINCOUNT`` are removed from the
environment in every setting, so each run uses the toolkit's thread count: the cores
of the CPU affinity (``--threads N`` passes ``--threads N`` to ``score`` instead). The
count is recorded, and per setting the wait policy the scorer logged and the spin
count libgomp reports it read (``OMP_DISPLAY_ENV=verbose``, set for every run, makes it
print its settings at load); a run that logged another wait policy or spin count than
its setting's (300,000 / 0 / 30 billion) is an error.

The settings take turns within each repeat, so that load from elsewhere on the machine
hits them alike. On a shared machine other people's processes distort such timings,
so each run also measures the cores that processes other than the benchmark's own
(itself, its busy processes, the scorer) used meanwhile, from ``/proc/stat``: before
each run the benchmark waits (up to ``--quiet-wait`` seconds) for them to drop to
``--max-other-cores``, a run during which they used more is run again (up to
``--retries`` times; then the least disturbed attempt is kept), and the JSON records
per run the other processes' cores, the hypervisor's steal time and the attempts;
every cell also gets the median of its undisturbed runs alone (``--from-json FILE``
summarises an earlier run again, e.g. with another ``--max-other-cores``).

Reported: median wall-clock seconds of ``--repeat`` runs per (setting, K), the ratio
to the same setting's idle median (the issue's target: at most 2.5x with two busy
processes on 2 cores), and the median CPU seconds (user + system) of the scoring
process, which show the spinning.

Example (the README's table; a 5,000-word vocabulary: the 4,998 most frequent words of
``lm_train.txt`` plus ``</s>`` and ``<unk>``, so that the NN is small and the wait
policy matters most)::

    tr -s ' \\t' '\\n\\n' < ../shared/data/abc-nbest/lm/lm_train.txt | grep -v '^$' | sort | uniq -c \\
        | sort -k1,1nr -k2 | head -4998 | awk '{print $2}' > vocab5k.txt
    python examples/make_random_checkpoint.py --vocab vocab5k.txt \\
        --model gru --hidden 64 --out /tmp/gru64_5k.pt
    python -m benchmarks.contention --lm /tmp/gru64_5k.pt --nbest ../shared/data/abc-nbest/dev \\
        --busy 0 1 2 --repeat 3 --json docs/benchmarks/contention_cpu.json
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from benchmarks.harness import add_repeat, machine, median, run_measured, wait_for_quiet, write_json

SETTINGS = ("unset", "PASSIVE", "ACTIVE")
SPIN = "while True: pass"
# Removed from the scorer's environment in every setting (see the module docstring).
CLEARED = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "GOMP_SPINCOUNT")
# The "unset" setting's launcher: nbest-rescore without its PASSIVE default, i.e. with
# OMP_WAIT_POLICY left unset when torch (and libgomp) load. ``python -c`` passes the
# command's arguments in sys.argv[1:], which click reads.
UNSET_PREAMBLE = "import nbest_rescore.threads as t; t.prefer_passive_wait = lambda environ=None: None\n"
UNSET_LAUNCHER = UNSET_PREAMBLE + "from nbest_rescore.cli import main; main(prog_name='nbest-rescore')"
POLICY_LOG = re.compile(r"OpenMP wait policy (\S+)")
# libgomp prints its settings at load with OMP_DISPLAY_ENV=verbose, the spin count among them
SPINCOUNT_LOG = re.compile(r"GOMP_SPINCOUNT = '(\d+)'")
# libgomp's spin count per setting (its manual; with no more threads than CPUs)
EXPECTED_SPINCOUNT = {"unset": 300_000, "PASSIVE": 0, "ACTIVE": 30_000_000_000}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lm", help="checkpoint to score with (required unless --from-json)")
    p.add_argument("--nbest", help="N-best directory (Kaldi layout; required unless --from-json)")
    p.add_argument("--busy", type=int, nargs="+", default=[0, 1, 2], help="numbers of busy processes beside it")
    p.add_argument("--settings", nargs="+", choices=SETTINGS, default=list(SETTINGS))
    add_repeat(p, 3, "runs per (setting, busy) pair (medians reported)")
    p.add_argument("--threads", type=int, help="score --threads N (default: the toolkit's choice, the CPU affinity)")
    p.add_argument("--max-other-cores", type=float, default=0.3,
                   help="a run during which other processes of the machine used more cores than this on average "
                        "is run again (see --retries)")
    p.add_argument("--retries", type=int, default=1,
                   help="extra attempts per run under load from elsewhere; then the least disturbed attempt is kept")
    p.add_argument("--quiet-wait", type=float, default=120.0,
                   help="before each attempt, wait up to this many seconds for the other processes to go below "
                        "--max-other-cores")
    p.add_argument("--json", help="write the results here too")
    p.add_argument("--from-json", metavar="FILE",
                   help="measure nothing: summarise the runs of an earlier --json FILE again (with this "
                        "--max-other-cores), print the table and write --json")
    return p.parse_args(argv)


def setting_env(setting: str) -> dict:
    """The environment of the scoring process for a setting: this process's
    environment without :data:`CLEARED`, plus ``OMP_WAIT_POLICY=ACTIVE`` for ``ACTIVE``.
    ``unset`` and ``PASSIVE`` get the same environment; they differ in the launcher
    (:func:`scorer_command`)."""
    if setting not in SETTINGS:
        raise ValueError(f"unknown setting {setting!r}; choose from {SETTINGS}")
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    if setting == "ACTIVE":
        env["OMP_WAIT_POLICY"] = "ACTIVE"
    return env


def scorer_command(setting: str, score_args) -> list:
    """The command line of the scorer for a setting: ``python -m nbest_rescore ARGS``,
    or for ``unset`` ``python -c UNSET_LAUNCHER ARGS``."""
    launcher = ["-c", UNSET_LAUNCHER] if setting == "unset" else ["-m", "nbest_rescore"]
    return [sys.executable, *launcher, *score_args]


def expected_policy(setting: str) -> str:
    """The first word of the wait policy the scorer logs (``ThreadPolicy.describe``)."""
    return {"unset": "unset", "PASSIVE": "PASSIVE", "ACTIVE": "ACTIVE"}[setting]


def check_logs(setting: str, stderr: str):
    """(the toolkit's thread-policy log line, libgomp's spin count or None) from a
    scorer's stderr. Raises RuntimeError when the toolkit logged another wait policy
    than the setting's, or libgomp (when it printed its settings: GNU OpenMP) reports
    another spin count than :data:`EXPECTED_SPINCOUNT` (the count for a process with no
    more OpenMP threads than CPUs; beyond that libgomp uses a smaller count that it does
    not print)."""
    line = next((ln for ln in stderr.splitlines() if POLICY_LOG.search(ln)), "")
    m = POLICY_LOG.search(line)
    if not m or m.group(1) != expected_policy(setting):
        raise RuntimeError(f"setting {setting}: the scorer logged {line.strip()!r}, expected wait policy "
                           f"{expected_policy(setting)}")
    spins = SPINCOUNT_LOG.search(stderr)
    spins = int(spins.group(1)) if spins else None
    if spins is not None and spins != EXPECTED_SPINCOUNT[setting]:
        raise RuntimeError(f"setting {setting}: libgomp reports GOMP_SPINCOUNT {spins}, expected "
                           f"{EXPECTED_SPINCOUNT[setting]}")
    return line.split(": ", 1)[-1].strip(), spins


def time_score(args, setting: str, out_dir: str, hog_pids=()):
    """One whole ``nbest-rescore score`` process (with ``OMP_DISPLAY_ENV=verbose``, so
    that libgomp prints the settings it read): ``{"wall", "cpu"}`` seconds, the logged
    policy ``line``, libgomp's ``spins``, and the ``other_cores`` / ``steal_cores`` of
    :class:`benchmarks.harness.OtherLoad` meanwhile. Raises CalledProcessError when it fails,
    RuntimeError from :func:`check_logs`."""
    score = ["-v", "score", "--lm", args.lm, "--nbest", args.nbest, "--history", "first-pass",
             "--out", out_dir, "--no-progress"]
    if args.threads:
        score += ["--threads", str(args.threads)]
    env = {**setting_env(setting), "OMP_DISPLAY_ENV": "verbose"}
    cmd = scorer_command(setting, score)
    res = run_measured(cmd, env=env, load_pids=list(hog_pids))
    if res["rc"]:
        sys.stderr.write(res["stderr"])
        raise subprocess.CalledProcessError(res["rc"], cmd, stderr=res["stderr"])
    line, spins = check_logs(setting, res["stderr"])
    return {"wall": res["seconds"], "cpu": res["cpu_seconds"], "line": line, "spins": spins,
            "other_cores": res["other_cores"], "steal_cores": res["steal_cores"]}


def run_once(args, setting: str, hog_pids):
    """One measurement: up to ``1 + args.retries`` attempts of :func:`time_score`, each
    after :func:`wait_for_quiet`, until one ran with other processes below
    ``args.max_other_cores``; else the least disturbed attempt. Adds ``attempts``."""
    best = None
    for attempt in range(1 + max(0, args.retries)):
        wait_for_quiet(hog_pids, args.max_other_cores, args.quiet_wait)
        with tempfile.TemporaryDirectory() as tmp:
            r = time_score(args, setting, os.path.join(tmp, "out"), hog_pids)
        r["attempts"] = attempt + 1
        if best is None or (r["other_cores"] or 0) < (best["other_cores"] or 0):
            best = {**r}
        best["attempts"] = attempt + 1
        if r["other_cores"] is None or r["other_cores"] <= args.max_other_cores:
            return r
        if attempt < args.retries:
            print(f"  {setting}: other processes used {r['other_cores']:.2f} cores ({r['wall']:.1f} s); "
                  f"running it again", file=sys.stderr)
    return best


def summarize(results: dict, max_other: float) -> None:
    """Add to every (setting, busy) cell of ``results`` its ``vs_idle`` ratio and the
    same over the undisturbed runs only (other processes at most ``max_other`` cores,
    or not measured): ``undisturbed_runs_s``, ``undisturbed_median_s`` (None if no run
    was) and ``undisturbed_vs_idle``."""
    for per in results.values():
        for row in per.values():
            other = row.get("other_cores") or [None] * len(row["runs_s"])
            row["undisturbed_runs_s"] = [r for r, o in zip(row["runs_s"], other) if o is None or o <= max_other]
            u = row["undisturbed_runs_s"]
            row["undisturbed_median_s"] = round(median(u), 2) if u else None
        idle = per.get("0", {})
        for row in per.values():
            for key, ratio in (("median_s", "vs_idle"), ("undisturbed_median_s", "undisturbed_vs_idle")):
                ok = idle.get(key) and row[key] is not None
                row[ratio] = round(row[key] / idle[key], 2) if ok else None


def print_table(out: dict, busy) -> None:
    """The markdown table: per setting and busy count, the median of all runs (its
    ratio to idle; the scorer's CPU seconds) and, where some runs were disturbed by
    other processes, the median of the undisturbed ones."""
    print("| setting | " + " | ".join(f"{b} busy" for b in busy) + " |")
    print("|---|" + "---:|" * len(busy))
    for setting, per in out["seconds"].items():
        cells = []
        for row in (per[str(b)] for b in busy):
            ratio = f"{row['vs_idle']:.2f}x; " if row["vs_idle"] is not None else ""
            cell = f"{row['median_s']:.1f} s ({ratio}CPU {row['median_cpu_s']:.1f} s)"
            n, u = len(row["undisturbed_runs_s"]), row["undisturbed_median_s"]
            if n < len(row["runs_s"]):
                uratio = f", {row['undisturbed_vs_idle']:.2f}x" if row["undisturbed_vs_idle"] is not None else ""
                cell += f"; undisturbed {n}/{len(row['runs_s'])}: " + (f"{u:.1f} s{uratio}" if n else "-")
            cells.append(cell)
        print(f"| {setting}, {out['threads']} threads | " + " | ".join(cells) + " |")


def measure(args) -> dict:
    """``{setting: {busy: {"runs_s": [...], "median_s": s, "vs_idle": ratio, "cpu_s": [...],
    "median_cpu_s": s}}}``: wall-clock and CPU seconds of the scorer per run with ``busy``
    spin loops beside it (killed afterwards; the CPU seconds are the scorer's own,
    from :func:`benchmarks.harness.run_measured`), the settings taking turns within each repeat; ``vs_idle`` is the
    median over the same setting's idle median (None without an idle row);
    ``other_cores``, ``steal_cores`` and ``attempts`` per run (:func:`run_once`); under
    "logged", per setting, the toolkit's thread-policy log line and libgomp's spin
    count (:func:`check_logs`)."""
    results, logged = {}, {}
    for busy in args.busy:
        hogs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(busy)]
        try:
            time.sleep(0.5 if busy else 0)
            runs = {s: [] for s in args.settings}
            for i in range(args.repeat):
                for setting in args.settings:  # interleaved, so load from elsewhere hits all settings alike
                    r = run_once(args, setting, [h.pid for h in hogs])
                    runs[setting].append(r)
                    logged[setting] = {"toolkit": r["line"], "gomp_spincount": r["spins"]}
                    print(f"{setting:8s} busy {busy} run {i + 1}: {r['wall']:.2f} s, CPU {r['cpu']:.2f} s, "
                          f"other processes {r['other_cores']} cores, steal {r['steal_cores']}, "
                          f"attempt {r['attempts']}", file=sys.stderr)
            for setting in args.settings:
                walls, cpus = [r["wall"] for r in runs[setting]], [r["cpu"] for r in runs[setting]]
                results.setdefault(setting, {})[str(busy)] = {
                    "runs_s": [round(x, 2) for x in walls], "median_s": round(median(walls), 2),
                    "cpu_s": [round(x, 2) for x in cpus], "median_cpu_s": round(median(cpus), 2),
                    "other_cores": [r["other_cores"] for r in runs[setting]],
                    "steal_cores": [r["steal_cores"] for r in runs[setting]],
                    "attempts": [r["attempts"] for r in runs[setting]]}
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    summarize(results, args.max_other_cores)
    return {"seconds": results, "logged": logged}


def main(argv=None):
    args = parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            out = json.load(f)
        out["max_other_cores"] = args.max_other_cores
        summarize(out["seconds"], args.max_other_cores)
        print_table(out, sorted({int(b) for per in out["seconds"].values() for b in per}))
        write_json(args.json, out)
        return
    if not (args.lm and args.nbest):
        raise SystemExit("contention.py: --lm and --nbest are required (unless --from-json)")
    cores = len(os.sched_getaffinity(0))
    load = os.getloadavg()
    measured = measure(args)
    out = {"cores": cores, "threads": args.threads or cores, "machine": machine(args.threads or cores),
           "lm": args.lm, "nbest": args.nbest,
           "repeat": args.repeat, "max_other_cores": args.max_other_cores,
           "loadavg_before_after": [round(load[0], 2), round(os.getloadavg()[0], 2)],
           "settings": {s: {"OMP_WAIT_POLICY": {"unset": None, "PASSIVE": "PASSIVE (set by the toolkit)",
                                                "ACTIVE": "ACTIVE"}[s],
                            "launcher": "python -c UNSET_LAUNCHER" if s == "unset" else "python -m nbest_rescore",
                            **(measured["logged"].get(s) or {})} for s in args.settings},
           "seconds": measured["seconds"]}
    print_table(out, args.busy)
    write_json(args.json, out)


if __name__ == "__main__":
    main()
