#!/usr/bin/env python
"""Other confidences for selective rescoring (issue 37), measured in-sample on stored
NN costs: for each rule, the WER (percent) against the share of hypotheses the NN LM
scores, at the weights tuned on the whole set, printed as the rule's Pareto frontier
(each point scores fewer hypotheses than the next and has a higher WER). None of these
rules is shipped: ``score --prune-mass`` (the ``beam`` row) is the one kept, the others
reach no better frontier (docs/scoring.md, "Other confidences tried").

Rules (a hypothesis left out always gets
:func:`~nbest_rescore.rescoring.selective.fill_unscored`'s estimate, as ``score`` does):

- ``beam``: the first-pass posterior beam of mass E (``score --prune-mass E``);
- ``reweighted``: the beam of a posterior of the first-pass costs at another n-gram
  weight (``a`` times the LM weight), word insertion penalty and temperature ``T``;
- ``two-stage``: the beam E1, then every hypothesis inside the beam E2 of the posterior
  at the full weights with the left-out costs estimated optimistically (the list's mean
  NN - n-gram difference minus k standard deviations over the scored ones);
- ``disagree``: the beam E1, widened to the beam E2 in the lists whose 1-best at the
  full weights (scored beam) differs from the first-pass 1-best;
- ``cascade``: the posterior beam of a cheaper LM's combination (``--cheap-cost``, at its
  own weights tuned on the set, posterior scale ``T`` times its LM weight).

    python recipes/abc-nbest/local/selective_rules.py --nbest ../shared/data/abc-nbest/dev \\
        --ref ../shared/data/abc-nbest/dev/ref.txt \\
        --nn-cost exp/abc-nbest-cpu-converged/score_gru_first-pass/nn_cost \\
        --cheap-cost exp/abc-nbest-quick/score_dev/nn_cost --word-ins-penalty -0.629606
"""
from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import replace

import numpy as np

from nbest_rescore.api.inputs import load_references, open_nbest
from nbest_rescore.api.tune_job import read_tune_data
from nbest_rescore.errors import DataError
from nbest_rescore.evaluation.tuning import tune_grid
from nbest_rescore.options import SearchOptions
from nbest_rescore.rescoring.combine import flat_scores
from nbest_rescore.rescoring.selective import _outside, fill_unscored, hypothesis_posteriors

INTERPS = tuple(np.round(np.arange(0.0, 1.0001, 0.1), 2))
LM_WEIGHTS = tuple(np.arange(5.0, 14.0001, 0.5))
MASSES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)


def posteriors(data, weights, nn, scale):
    """float64 [H] softmax per list of the combined score at ``weights`` over ``scale``."""
    return softmax(data, flat_scores(data, weights, nn) / scale)


def softmax(data, s):
    """float64 [H] softmax of the scores ``s`` within each list of ``data``."""
    starts, sizes = data.offsets[:-1], np.diff(data.offsets)
    e = np.exp(s - np.repeat(np.maximum.reduceat(s, starts), sizes))
    return e / np.repeat(np.add.reduceat(e, starts), sizes)


def outcome(data, weights, out):
    """(share scored, WER) with the hypotheses ``out`` left out."""
    nn = fill_unscored(data.lm_cost, data.offsets, data.nn[0], out)
    best = replace(data, nn=nn[None]).one_best(weights)
    return float((~out).mean()), 100.0 * data.errors[best].sum() / data.ref_words


def beam(data, w, p1):
    for e in MASSES:
        yield f"E={e}", _outside(p1, data.offsets, e)


def reweighted(data, w, p1):
    for a, wip, t, e in itertools.product((0.25, 0.5, 0.75, 1.0, 1.25), (-2.0, -1.0, w.word_ins_penalty, 0.0, 1.0),
                                          (2.5, 5.0, 10.0, 20.0), MASSES):
        s = -w.acoustic_scale * data.ac_cost - a * w.lm_weight * (data.lm_cost + data.graph_cost) + wip * data.num_words
        yield f"a={a} wip={wip:g} T={t} E={e}", _outside(softmax(data, s / t), data.offsets, e)


def two_stage(data, w, p1):
    starts, sizes = data.offsets[:-1], np.diff(data.offsets)
    d = data.nn[0] - data.lm_cost
    for e1, e2, k in itertools.product((0.05, 0.1, 0.2, 0.3, 0.5), (0.01, 0.02, 0.05, 0.1, 0.2), (0.5, 1, 1.5, 2)):
        out = _outside(p1, data.offsets, e1)
        n = np.maximum(np.add.reduceat((~out).astype(float), starts), 1.0)
        mean = np.add.reduceat(np.where(out, 0.0, d), starts) / n
        sd = np.sqrt(np.maximum(np.add.reduceat(np.where(out, 0.0, d * d), starts) / n - mean ** 2, 0.0))
        hopeful = np.where(out, data.lm_cost + np.repeat(mean - k * sd, sizes), data.nn[0])
        yield f"E1={e1} E2={e2} k={k}", out & _outside(posteriors(data, w, hopeful, w.lm_weight), data.offsets, e2)


def disagree(data, w, p1):
    first = data.one_best(replace(w, interp=1.0))
    for e1, e2 in itertools.product((0.05, 0.1, 0.2, 0.3, 0.5), (0.001, 0.01, 0.03, 0.1)):
        out = _outside(p1, data.offsets, e1)
        nn = fill_unscored(data.lm_cost, data.offsets, data.nn[0], out)
        changed = replace(data, nn=nn[None]).one_best(w) != first
        yield f"E1={e1} E2={e2}", np.where(np.repeat(changed, np.diff(data.offsets)), out & _outside(
            p1, data.offsets, e2), out)


def cascade(data, cheap):
    def rule(data_, w, p1):
        wc = tune_grid(cheap, SearchOptions(interps=INTERPS, lm_weights=LM_WEIGHTS,
                                            word_ins_penalty=w.word_ins_penalty)).best_weights()
        for t, e in itertools.product((0.5, 1.0, 2.0, 4.0), MASSES):
            yield f"T={t} E={e}", _outside(posteriors(cheap, wc, cheap.nn[0], t * wc.lm_weight), data.offsets, e)
    return rule


def frontier(points):
    """The points (share, WER, label) no other point beats on both, by share."""
    out, best = [], np.inf
    for share, wer, label in sorted(points, key=lambda p: (p[0], p[1])):
        if wer < best - 1e-9:
            out.append((share, wer, label))
            best = wer
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nbest", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--nn-cost", required=True, help="costs of the LM (every hypothesis scored)")
    ap.add_argument("--cheap-cost", action="append", default=[], help="costs of a cheaper LM (repeatable)")
    ap.add_argument("--word-ins-penalty", type=float, default=0.0)
    args = ap.parse_args()
    refs = load_references(args.ref)
    paths = [args.nn_cost, *args.cheap_cost]
    both = read_tune_data(open_nbest(args.nbest), refs, paths, [f"lm{i}" for i in range(len(paths))], paths)
    rows = [replace(both, nn=both.nn[i:i + 1], names=(both.names[i],)) for i in range(len(paths))]
    data = rows[0]
    w = tune_grid(data, SearchOptions(interps=INTERPS, lm_weights=LM_WEIGHTS,
                                      word_ins_penalty=args.word_ins_penalty)).best_weights()
    p1 = hypothesis_posteriors(data, w)
    every = outcome(data, w, np.zeros(len(data), dtype=bool))[1]
    print(f"weights {w}; every hypothesis scored: WER {every:.2f}")
    rules = {"beam": beam, "reweighted": reweighted, "two-stage": two_stage, "disagree": disagree,
             **{f"cascade {p}": cascade(data, c) for p, c in zip(args.cheap_cost, rows[1:])}}
    for name, rule in rules.items():
        points = [(*outcome(data, w, out), label) for label, out in rule(data, w, p1)]
        print(f"{name}: " + "; ".join(f"{s:.1%} {wer:.2f} ({lab})" for s, wer, lab in frontier(points)))


if __name__ == "__main__":
    try:
        main()
    except (DataError, OSError) as e:  # a bad path or file: one line, no traceback
        sys.exit(f"selective_rules.py: {e}")
