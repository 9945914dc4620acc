#!/usr/bin/env python
"""Rescoring time when other busy processes share the cores (Kaldi's ``--nj`` jobs side
by side on a shared node), against the time on an idle machine.

Each measurement runs the whole command ``nbest-rescore score --lm LM --nbest DIR
--history first-pass`` in a fresh process (start-up, reading and writing included)
while K busy processes (pure-Python spin loops, like ``yes > /dev/null``) run beside
it, for K in ``--busy`` (0 = idle). Two settings:

* ``default``: the toolkit's defaults (its thread policy: threads from the CPU
  affinity or ``OMP_NUM_THREADS``, idle OpenMP threads sleep; :mod:`nbest_rescore.threads`);
* ``spinning``: what the defaults were before that policy, and what a plain torch
  script gets: ``OMP_WAIT_POLICY=ACTIVE`` (idle OpenMP threads spin) with one thread
  per core.

Reported: median wall-clock seconds of ``--repeat`` runs per (setting, K) and the ratio
to the same setting's idle median (the issue's target: at most 2.5x with two busy
processes on 2 cores).

Example::

    python benchmarks/make_random_checkpoint.py --vocab ../shared/data/abc-nbest/lm/vocab.txt \\
        --model gru --hidden 64 --out /tmp/gru64.pt
    python benchmarks/contention.py --lm /tmp/gru64.pt --nbest ../shared/data/abc-nbest/dev \\
        --busy 0 1 2 --repeat 3 --json /tmp/contention.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SETTINGS = ("default", "spinning")
SPIN = "while True: pass"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lm", required=True, help="checkpoint to score with")
    p.add_argument("--nbest", required=True, help="N-best directory (Kaldi layout)")
    p.add_argument("--busy", type=int, nargs="+", default=[0, 1, 2], help="numbers of busy processes beside it")
    p.add_argument("--settings", nargs="+", choices=SETTINGS, default=list(SETTINGS))
    p.add_argument("--repeat", type=int, default=3, help="runs per (setting, busy) pair; the median is reported")
    p.add_argument("--json", help="write the results here too")
    return p.parse_args(argv)


def setting_env(setting: str) -> dict:
    """The environment of the scoring process for a setting."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if setting == "spinning":
        env["OMP_WAIT_POLICY"] = "ACTIVE"
        env["OMP_NUM_THREADS"] = str(len(os.sched_getaffinity(0)))
    return env


def time_score(args, setting: str, out_dir: str) -> float:
    """Wall-clock seconds of one whole ``nbest-rescore score`` process."""
    cmd = [sys.executable, "-m", "nbest_rescore", "score", "--lm", args.lm, "--nbest", args.nbest,
           "--history", "first-pass", "--out", out_dir, "--no-progress"]
    t0 = time.perf_counter()
    subprocess.run(cmd, env=setting_env(setting), check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def measure(args) -> dict:
    """``{setting: {busy: {"runs_s": [...], "median_s": s, "vs_idle": ratio}}}``: wall-clock
    seconds per run with ``busy`` spin loops beside the scorer (killed afterwards);
    ``vs_idle`` is the median over the same setting's idle median (None without an idle
    row). Raises CalledProcessError when a scoring run fails."""
    results = {}
    for busy in args.busy:
        hogs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(busy)]
        try:
            time.sleep(0.5 if busy else 0)
            for setting in args.settings:
                runs = []
                for i in range(args.repeat):
                    with tempfile.TemporaryDirectory() as tmp:
                        runs.append(time_score(args, setting, os.path.join(tmp, "out")))
                results.setdefault(setting, {})[str(busy)] = {"runs_s": [round(r, 2) for r in runs],
                                                               "median_s": round(statistics.median(runs), 2)}
                print(f"{setting:9s} busy {busy}: median {statistics.median(runs):.2f} s {runs}", file=sys.stderr)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    for setting, per in results.items():
        idle = per.get("0", {}).get("median_s")
        for row in per.values():
            row["vs_idle"] = round(row["median_s"] / idle, 2) if idle else None
    return results


def main(argv=None):
    args = parse_args(argv)
    out = {"cores": len(os.sched_getaffinity(0)), "lm": args.lm, "nbest": args.nbest, "repeat": args.repeat,
           "seconds": measure(args)}
    print("| setting | " + " | ".join(f"{b} busy" for b in args.busy) + " |")
    print("|---|" + "---:|" * len(args.busy))
    for setting, per in out["seconds"].items():
        cells = [f"{per[str(b)]['median_s']:.1f} s ({per[str(b)]['vs_idle']:.1f}x)" for b in args.busy]
        print(f"| {setting} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
