"""Time and WER of the exact line search (``tune --search line``) against the exhaustive
grid (K <= 2 neural LMs only) on stored NN costs; no neural LM is run.

    python -m benchmarks.tune_line_search --nbest ../shared/data/abc-nbest/dev \\
        --ref ../shared/data/abc-nbest/dev/ref.txt --nn-cost a/nn_cost.a --nn-cost b/nn_cost.b --json F
"""
from __future__ import annotations

import argparse
import time

from benchmarks.harness import clocked, machine, run_main, write_json


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nbest", required=True, help="Kaldi N-best folder")
    ap.add_argument("--ref", required=True, help="references (Kaldi text)")
    ap.add_argument("--nn-cost", action="append", required=True, help="NN cost ark; repeat per LM")
    ap.add_argument("--restarts", type=int, default=5, help="line search restarts (default 5)")
    ap.add_argument("--seed", type=int, default=0, help="line search seed (default 0)")
    ap.add_argument("--interps", default="0:1:0.1", help="grid: n-gram weight spacing")
    ap.add_argument("--lm-weights", default="5:14:0.5", help="grid: LM weights")
    ap.add_argument("--json", default=None, help="write the result here")
    args = ap.parse_args()

    import nbest_rescore as nr
    from nbest_rescore.options.parse import parse_grid
    from nbest_rescore.api.tune_job import cost_file_names
    from nbest_rescore.io.score_ark import read_cost_ark

    t0 = time.perf_counter()
    nbest, refs = nr.load_nbest(args.nbest), nr.load_references(args.ref)
    costs = [read_cost_ark(p) for p in args.nn_cost]
    names = cost_file_names(args.nn_cost)
    load_s = time.perf_counter() - t0
    out = {"nbest": args.nbest, "utterances": len(nbest), "hypotheses": sum(len(u) for u in nbest.utterances),
           "nn_cost": args.nn_cost, "names": list(names), "load_seconds": round(load_s, 3), "machine": machine()}
    runs = [("line", {})]
    if len(costs) <= 2:
        runs.append(("grid", {"interps": parse_grid(args.interps, "interps"),
                              "lm_weights": parse_grid(args.lm_weights, "lm_weights")}))
    for search, grid in runs:
        res, wall, _ = clocked(lambda: nr.tune(nbest, refs, costs, search=search, names=names,
                                               restarts=args.restarts, seed=args.seed, **grid))
        out[search] = {"wer": res.best.wer, "weights": res.weights_block(), "evaluations": res.evaluations,
                       "hypotheses_visited": res.hypotheses, "seconds": round(wall, 3)}
        print(f"{search}: WER {res.best.wer:.2f}% at {res.describe(res.best)}; {res.evaluations} "
              f"{'line minimisations' if search == 'line' else 'points'}, {res.hypotheses} hypotheses, "
              f"{wall:.2f} s")
    write_json(args.json, out)


if __name__ == "__main__":
    run_main(main)
