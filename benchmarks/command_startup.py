#!/usr/bin/env python
"""Wall time of the commands that only read and write lists (``split``, ``merge``,
``convert``, ``tune``, ``kaldi-score``) as ``python -m nbest_rescore`` processes, and
of ``python -c "import torch"``: what each would pay if it imported torch. With
``--baseline-tree`` the same command lines also run from another checkout of the
toolkit (e.g. the commit before these commands stopped importing torch), alternating
with this tree's runs, and the ratio is reported. Medians of ``--repeat`` runs.

The score folders ``merge`` and ``tune`` read are written once, by ``score`` with an
untrained GRU over the lists' words (its costs are meaningless; only the files matter).

Example (the commit before the change as the baseline)::

    git worktree add /tmp/nbest-rescore-old 265740e
    python -m benchmarks.command_startup --nbest ../shared/data/abc-nbest/ci --repeat 5 \\
        --baseline-tree /tmp/nbest-rescore-old --json command_startup.json
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import REPO, add_repeat, machine, median, run_main, run_measured, write_json


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nbest", required=True, help="a Kaldi N-best folder with ref.txt (e.g. abc-nbest/ci)")
    add_repeat(p, 5, "runs per command and tree (medians reported)")
    p.add_argument("--baseline-tree", help="another checkout of nbest-rescore to time the same commands from")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error(f"--repeat must be >= 1, got {args.repeat}")
    for path in (args.nbest, args.baseline_tree):
        if path and not os.path.isdir(path):
            p.error(f"{path}: no such folder")
    return args


def prepare(nbest: Path, work: Path) -> None:
    """Two score jobs (the lists split in two) of an untrained GRU and a Kaldi archive folder."""
    run = [sys.executable, "-m", "nbest_rescore"]
    with open(nbest / "text", encoding="utf-8") as f:  # the lists' words: <hyp-key> w1 w2 ...
        words = sorted({w for line in f for w in line.split()[1:]})
    (work / "vocab.txt").write_text("".join(w + "\n" for w in words), encoding="utf-8")
    subprocess.run([sys.executable, str(REPO / "examples" / "make_random_checkpoint.py"), "--vocab",
                    str(work / "vocab.txt"), "--model", "gru", "--hidden", "32", "--out", str(work / "gru.pt")],
                   check=True, capture_output=True)
    subprocess.run([*run, "split", "--nj", "2", str(nbest), str(work / "shards")], check=True, capture_output=True)
    for j in ("1", "2"):
        subprocess.run([*run, "score", "--lm", str(work / "gru.pt"), "--nbest", str(work / "shards" / j),
                        "--out", str(work / f"score.{j}"), "--no-progress"], check=True, capture_output=True)
    archive = work / "archive"
    archive.mkdir()
    for src, dst in (("text", "words_text"), ("ac_cost", "acwt"), ("lm_cost", "lmwt.interp")):
        shutil.copyfile(nbest / src, archive / dst)


def commands(nbest: Path, work: Path) -> dict:
    """Name -> the command's arguments (outputs under ``work/out``, removed before each run)."""
    ref, out = str(nbest / "ref.txt"), work / "out"
    return {
        "split --nj 3": ["split", "--nj", "3", str(nbest), str(out / "shards")],
        "convert --to jsonl": ["convert", "--nbest", str(nbest), "--to", "jsonl", "--out", str(out / "n.jsonl")],
        "merge (2 jobs)": ["merge", "--out", str(out / "merged"), "--ref", ref, str(work / "score.1"),
                           str(work / "score.2")],
        "tune": ["tune", "--nbest", str(work / "shards" / "1"), "--nn-cost", str(work / "score.1" / "nn_cost"),
                 "--ref", ref, "--out", str(out / "tuned")],
        "kaldi-score": ["kaldi-score", "--ref", ref, "--lm-cost", "lmwt.interp", "--out", str(out / "decode"),
                        str(work / "archive")],
        "python -c 'import torch'": None,
    }


def timed(args, tree: Path, work: Path) -> float:
    """Seconds of one run of ``python -m nbest_rescore ARGS`` with ``tree`` first on the path."""
    shutil.rmtree(work / "out", ignore_errors=True)
    (work / "out").mkdir()
    cmd = [sys.executable, "-c", "import torch"] if args is None else [sys.executable, "-m", "nbest_rescore", *args]
    res = run_measured(cmd, env={**os.environ, "PYTHONPATH": str(tree)}, cwd=work)
    if res["rc"]:
        sys.exit(f"error: {' '.join(cmd)} (from {tree}) failed: {res['stderr'].strip()[-500:]}")
    return res["seconds"]


def main():
    args = parse_args()
    nbest = Path(args.nbest).resolve()
    trees = {"this tree": REPO, **({"baseline": Path(args.baseline_tree).resolve()} if args.baseline_tree else {})}
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        prepare(nbest, work)
        for name, cmd in commands(nbest, work).items():
            runs = {t: [] for t in trees}
            for _ in range(args.repeat):  # the trees alternate, so a slower machine phase hits both
                for t, tree in trees.items():
                    runs[t].append(timed(cmd, tree, work))
            rows[name] = {t: median(v) for t, v in runs.items()}
    print(f"| command | this tree (s) |{' baseline (s) | ratio |' if args.baseline_tree else ''}")
    print(f"|---|---|{'---|---|' if args.baseline_tree else ''}")
    for name, r in rows.items():
        extra = f" {r['baseline']:.2f} | {r['baseline'] / r['this tree']:.1f}x |" if args.baseline_tree else ""
        print(f"| {name} | {r['this tree']:.2f} |{extra}")
    write_json(args.json, {"nbest": str(nbest), "repeat": args.repeat, "trees": {k: str(v) for k, v in trees.items()},
                           "machine": machine(),
                           "median_seconds": rows})


if __name__ == "__main__":
    run_main(main)
