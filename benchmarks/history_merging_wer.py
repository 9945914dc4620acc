#!/usr/bin/env python
"""History merging (``score --max-ngram-order K``) against exact scoring by WER: for a
trained checkpoint, the N-best lists are scored exactly and at each order K (LM positions
read and scoring seconds from each run's wer.json), and each set of costs is tuned with
cross-validation (``tune --folds F`` at each ``--fold-seeds`` seed: the cross-validated
WER and its bootstrap interval); then ``tune --order-budget B`` picks K by folds at each
seed. Everything runs through the toolkit's own jobs (``ScoreJob``, ``TuneJob``), as the
command lines would.

Example (the two GRUs of docs/performance.md, "History merging")::

    python -m benchmarks.history_merging_wer --lm exp/abc-nbest-quick/tiny.pt \\
        --nbest ../shared/data/abc-nbest/dev --out /tmp/hm_quick --json hm_quick.json
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np

from benchmarks.harness import clocked, machine, run_main, write_json

FIRST_PASS_WIP = -0.629606  # the benchmark decoder's word insertion penalty (recipes/abc-nbest/run.sh)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lm", required=True, help="checkpoint (.pt)")
    p.add_argument("--nbest", required=True, help="N-best directory with ref.txt (e.g. abc-nbest/dev)")
    p.add_argument("--out", required=True, help="folder for the score and tune outputs (reused when present)")
    p.add_argument("--orders", default="2,3,4,5,6,7,8", help="the orders K (comma-separated)")
    p.add_argument("--fold-seeds", default="0,1,2", help="tune --fold-seed values")
    p.add_argument("--folds", type=int, default=2)
    p.add_argument("--budget", type=float, default=0.05, help="tune --order-budget (WER points)")
    p.add_argument("--history", default="first-pass")
    p.add_argument("--interps", default="0:1:0.1")
    p.add_argument("--lm-weights", default="5:15:0.5")
    p.add_argument("--word-ins-penalty", type=float, default=FIRST_PASS_WIP)
    p.add_argument("--replications", type=int, default=1000, help="bootstrap replications of each tune")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    args.orders = [int(k) for k in args.orders.split(",")]
    args.fold_seeds = [int(s) for s in args.fold_seeds.split(",")]
    return args


def score(args, order):
    """Score the lists at ``order`` (None: exact) into OUT/score_k<order>; wer.json's record."""
    from nbest_rescore.api import ScoreJob

    out = os.path.join(args.out, f"score_k{order or 'exact'}")
    if not os.path.exists(os.path.join(out, "wer.json")):
        job = ScoreJob(lm=args.lm, nbest=args.nbest, ref=os.path.join(args.nbest, "ref.txt"), out=out,
                       history=args.history, interp=0.5, word_ins_penalty=args.word_ins_penalty,
                       max_ngram_order=order, threads=args.threads)
        _, seconds, _ = clocked(job.run)
        print(f"scored K={order or 'exact'} in {seconds:.1f} s", flush=True)
    with open(os.path.join(out, "wer.json")) as f:
        return out, json.load(f)


def tune(args, cost, seed, **extra):
    """The tune report at ``--fold-seed seed`` on the costs ``cost`` (TuneResult)."""
    from nbest_rescore.api import TuneJob

    return TuneJob(nbest=args.nbest, ref=os.path.join(args.nbest, "ref.txt"), nn_cost=cost, interps=args.interps,
                   lm_weights=args.lm_weights, word_ins_penalty=args.word_ins_penalty, folds=args.folds,
                   fold_seed=seed, replications=args.replications, seed=seed, **extra).run()


def measure(args) -> dict:
    os.makedirs(args.out, exist_ok=True)
    rows, exact_dir = {}, None
    for order in [None, *args.orders]:
        folder, rec = score(args, order)
        exact_dir = exact_dir or folder
        cv = []
        for seed in args.fold_seeds:
            res = tune(args, os.path.join(folder, "nn_cost"), seed)
            boot = res.report.bootstrap["cross_validated"]
            cv.append({"fold_seed": seed, "cv_wer": res.report.cross_validation.wer, "low": boot.low,
                       "high": boot.high, "dev_tuned_wer": res.best.wer})
        rows["exact" if order is None else str(order)] = {
            "lm_positions": rec["nn_lm_positions"], "seconds": rec["seconds"], "per_seed": cv,
            "cv_wer_mean": float(np.mean([c["cv_wer"] for c in cv]))}
    exact = rows["exact"]
    for row in rows.values():
        row["positions_vs_exact"] = exact["lm_positions"] / row["lm_positions"]
        row["cv_wer_minus_exact"] = row["cv_wer_mean"] - exact["cv_wer_mean"]
    chosen = []
    for seed in args.fold_seeds:
        res = tune(args, os.path.join(exact_dir, "nn_cost"), seed,
                   order_cost=tuple(f"{k}={os.path.join(args.out, f'score_k{k}', 'nn_cost')}" for k in args.orders),
                   order_budget=args.budget)
        chosen.append({"fold_seed": seed, **res.report.history_merging.to_dict()})
    return {"lm": args.lm, "nbest": args.nbest, "history": args.history, "folds": args.folds,
            "fold_seeds": args.fold_seeds, "threads": args.threads, "machine": machine(args.threads), "orders": rows,
            "order_budget": chosen}


def table(out: dict) -> str:
    lines = [f"{out['lm']} on {out['nbest']}, history {out['history']}, {out['folds']} folds, fold seeds "
             f"{out['fold_seeds']}",
             "| K | LM positions | fewer than exact | scoring s | CV WER (mean) | per seed | 95% interval (seed "
             f"{out['fold_seeds'][0]}) | CV - exact |", "|---|---:|---:|---:|---:|---|---|---:|"]
    for k, r in out["orders"].items():
        first = r["per_seed"][0]
        seeds = ", ".join(f"{c['cv_wer']:.2f}" for c in r["per_seed"])
        lines.append(f"| {k} | {r['lm_positions']:,} | {r['positions_vs_exact']:.2f}x | {r['seconds']:.1f} | "
                     f"{r['cv_wer_mean']:.2f} | {seeds} | "
                     f"[{first['low']:.2f}, {first['high']:.2f}] | {r['cv_wer_minus_exact']:+.3f} |")
    for c in out["order_budget"]:
        cv = c["cross_validation"]
        lines.append(f"tune --order-budget {c['order_budget']:g} --fold-seed {c['fold_seed']}: K = "
                     f"{c['max_ngram_order']}, per fold {cv['per_fold_max_ngram_order']}, CV WER {cv['wer']:.2f} "
                     f"(exact {cv['wer_exact']:.2f})")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    out = measure(args)
    print(table(out))
    write_json(args.json, out)


if __name__ == "__main__":
    run_main(main)
