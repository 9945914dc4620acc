#!/usr/bin/env python
"""Peak memory of ``nbest-rescore convert`` against the size of the N-best set: the
lists copied K times (``--scale``, e.g. 1 4), converted to each format of ``--to``.

The copies are those of ``benchmarks/score_memory.py`` (:func:`benchmarks.score_memory.copy_lists`:
K = 1 is the directory itself; copy c > 1 has ``_c<c>`` after every utterance and
document id), written to a temporary folder. Each run is the real command line,
``python -m nbest_rescore convert --nbest DIR --to FORMAT --out OUT``, measured by
:func:`benchmarks.harness.run_measured`: its wall-clock time and peak resident set size
(the command's own ``ru_maxrss``: reading, converting and writing included). ``--code DIR`` runs the package found in DIR (``PYTHONPATH=DIR``,
e.g. a ``git archive`` of an older commit, for a before/after table).

Reported per format and K: hypotheses, the median peak RSS (MB) and seconds of
``--repeat`` runs and the ratio of the peak RSS to the smallest K's. The target of
issue 38: at K = 4 at most 1.2x the peak RSS of K = 1 (``convert`` holds one span of
whole documents, not the set).

Example (docs/performance.md)::

    nice python -m benchmarks.convert_memory --nbest ../shared/data/abc-nbest/dev \\
        --scale 1 4 --repeat 3 --to jsonl kaldi plain --json /tmp/convert_memory.json
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from benchmarks.harness import REPO, add_repeat, machine, median, run_measured, write_json
from benchmarks.score_memory import copy_lists

FORMATS = ("kaldi", "jsonl", "plain")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nbest", required=True, help="Kaldi N-best directory (e.g. abc-nbest/dev)")
    p.add_argument("--scale", type=int, nargs="+", default=[1, 4], metavar="K",
                   help="copies of the lists (default: 1 4; ratios are to the smallest)")
    add_repeat(p, 3, "runs per format and K (medians reported)")
    p.add_argument("--to", nargs="+", default=["jsonl"], choices=FORMATS, help="output formats (default: jsonl)")
    p.add_argument("--code", default=str(REPO), help="folder whose nbest_rescore package runs (default: this repo)")
    p.add_argument("--work", default=None, help="folder for the copies and outputs (default: a temporary one)")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    if not os.path.isdir(args.nbest):
        p.error(f"--nbest {args.nbest}: no such N-best directory (e.g. ../shared/data/abc-nbest/dev)")
    if min(args.scale) < 1 or args.repeat < 1:
        p.error("--scale and --repeat take integers >= 1")
    return args


def run_once(code: str, lists: str, to: str, out: str) -> dict:
    """One measured ``convert`` run: seconds and peak RSS (MB)."""
    cmd = [sys.executable, "-m", "nbest_rescore", "convert", "--nbest", lists, "--to", to, "--out", out]
    env = {**os.environ, "PYTHONPATH": os.path.abspath(code)}
    r = run_measured(cmd, env=env, cwd=tempfile.gettempdir())
    if r["rc"] != 0:
        sys.exit(f"convert failed (exit {r['rc']}): {r['stderr'][-2000:]}")
    return {"seconds": r["seconds"], "peak_rss_mb": r["peak_rss_mb"]}


def hypotheses(lists: str) -> int:
    """Lines of the ``text`` file (one per hypothesis)."""
    with open(os.path.join(lists, "text"), "rb") as f:
        return sum(1 for _ in f)


def rows_of(runs: dict) -> list:
    """Per (format, K): the medians and the peak RSS ratio to the format's smallest K."""
    rows = []
    for (to, k), rs in sorted(runs.items(), key=lambda item: (FORMATS.index(item[0][0]), item[0][1])):
        rows.append({"to": to, "k": k, "hypotheses": rs[0]["hypotheses"], "runs": len(rs),
                     "peak_rss_mb": median(r["peak_rss_mb"] for r in rs),
                     "seconds": median(r["seconds"] for r in rs)})
    for row in rows:
        base = min((r for r in rows if r["to"] == row["to"]), key=lambda r: r["k"])
        row["rss_vs_smallest"] = row["peak_rss_mb"] / base["peak_rss_mb"]
    return rows


def format_table(out: dict) -> str:
    lines = [f"code: {out['code']}; lists {out['nbest']} copied K times; {out['repeat']} run(s) each, medians",
             "| --to | K | hypotheses | peak RSS MB | seconds | RSS vs smallest K |", "|---|---:|---:|---:|---:|---:|"]
    for r in out["rows"]:
        lines.append(f"| {r['to']} | {r['k']} | {r['hypotheses']:,} | {r['peak_rss_mb']:,.0f} | {r['seconds']:.1f} | "
                     f"{r['rss_vs_smallest']:.2f}x |")
    for r in out["rows"]:
        if r["k"] == max(out["scale"]) and len(out["scale"]) > 1:
            ok = "met" if r["rss_vs_smallest"] <= 1.2 else "NOT met"
            lines.append(f"verdict --to {r['to']}: peak RSS at K={r['k']} is {r['rss_vs_smallest']:.2f}x "
                         f"K={min(out['scale'])} (target <= 1.2x: {ok})")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    out = {"nbest": args.nbest, "code": os.path.abspath(args.code), "scale": sorted(set(args.scale)),
           "repeat": args.repeat, "to": args.to, "machine": machine(), "runs": {}}
    runs = {}
    with tempfile.TemporaryDirectory(dir=args.work) as work:
        for k in out["scale"]:
            lists = os.path.abspath(args.nbest if k == 1 else os.path.join(work, f"lists_x{k}"))
            if k != 1:
                copy_lists(args.nbest, lists, k)
            n = hypotheses(lists)
            for to in args.to:
                for i in range(args.repeat):
                    target = os.path.join(work, f"out_{to}_x{k}_{i}" + (".jsonl" if to == "jsonl" else ""))
                    t = time.perf_counter()
                    r = {**run_once(args.code, lists, to, target), "hypotheses": n}
                    print(f"[--to {to} K={k} run {i + 1}/{args.repeat}] {r['seconds']:.1f} s, peak RSS "
                          f"{r['peak_rss_mb']:.0f} MB ({time.perf_counter() - t:.1f} s)", file=sys.stderr, flush=True)
                    runs.setdefault((to, k), []).append(r)
                    if os.path.isdir(target):
                        shutil.rmtree(target)
                    else:
                        os.remove(target)
    out["runs"] = {f"{to} x{k}": rs for (to, k), rs in runs.items()}
    out["rows"] = rows_of(runs)
    print(format_table(out))
    write_json(args.json, out)


if __name__ == "__main__":
    main()
