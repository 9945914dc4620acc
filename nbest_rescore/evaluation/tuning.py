"""Search of the combination weights (LM weight, the n-gram and K neural LM weights, word
insertion penalty) by the WER of the re-ranked N-best lists: an exhaustive grid
(:func:`tune_grid`) or Och's exact line search (:func:`tune_line`).

The score of every hypothesis is :func:`nbest_rescore.rescoring.combine.combine` (costs
are negated natural-log values); the per-hypothesis word errors are computed once, so a
grid point costs one vectorised ``combine`` + ``segment_argmax`` over all hypotheses.
WER is in percent.
"""
from __future__ import annotations

import time
from itertools import product
from typing import Optional, Sequence, Tuple

import numpy as np

from ..errors import DataError
from ..options import SearchOptions
from ..rescoring.combine import Weights, overflow_error
from .line_search import LinearScores, box, initial_point, och_search, split_point
from .tune_data import TuneData
from .tune_result import TunePoint, TuneResult

#: Bound of the line search: ``0 <= delta * w_k <= LINE_LIMIT`` and ``|wip| <= LINE_LIMIT``.
LINE_LIMIT = 100.0


def _simplex(interps: Tuple[float, ...], k: int):
    """``(w_0, (w_1 .. w_K))`` with w_0 .. w_{K-1} from ``interps`` and
    ``w_K = 1 - sum >= 0``, in lexicographic grid order (K >= 2)."""
    for head in product(interps, repeat=k):
        rest = round(1.0 - sum(head), 10)
        if rest >= -1e-9:
            yield head[0], (*head[1:], max(rest, 0.0))


def tune_grid(data: TuneData, options: SearchOptions, interps: Optional[Sequence[float]] = None) -> TuneResult:
    """WER of every grid point of ``options`` (checked on construction); pick the best.

    One neural LM (or none): every (interp, lm_weight, word_ins_penalty). K >= 2 LMs:
    the weights ``(w_0 .. w_{K-1})`` each from ``interps`` with ``w_K = 1 - sum >= 0``
    (the simplex at that spacing), times lm_weights, times penalties.

    Args:
        data: the lists' :class:`TuneData` (:func:`~.tune_data.tune_data`).
        options: ``interps`` (n-gram weights lambda, w_0), ``lm_weights`` (delta),
            ``word_ins_penalties`` (nats per word; None: ``word_ins_penalty`` alone),
            ``acoustic_scale``.
        interps: the lambda grid searched instead of ``options.interps`` (``tune``'s
            n-gram-only and total-score cases).
    Returns:
        TuneResult; WER in percent; best = lowest WER, ties to the first in grid order
        (interp outermost, word_ins_penalty innermost).
    Raises:
        DataError: no NN costs while some interp < 1.
    """
    t0 = time.perf_counter()
    interps = options.interps if interps is None else tuple(interps)
    if data.nn is None and any(v != 1.0 for v in interps):
        raise DataError("tune: NN costs are needed when an interp (lambda) is < 1; give neural LM costs "
                        "(--nn-cost) or search interps 1 alone")
    k, scale = len(data.names), float(options.acoustic_scale)
    weights = list(_simplex(interps, k)) if k >= 2 else [(lam, None) for lam in interps]
    points = []
    for (lam, ws), delta, wip in product(weights, options.lm_weights,
                                         options.word_ins_penalties or (options.word_ins_penalty,)):
        w = Weights(acoustic_scale=scale, lm_weight=delta, interp=lam, word_ins_penalty=wip, nn_weights=ws)
        wer = float(data.errors[data.one_best(w)].sum()) / data.ref_words * 100.0
        points.append(TunePoint(interp=w.interp, lm_weight=w.lm_weight, word_ins_penalty=w.word_ins_penalty, wer=wer,
                                nn_weights=w.nn_weights))
    best = min(points, key=lambda p: p.wer)  # min keeps the first of equal WERs
    return TuneResult(points=tuple(points), best=best, acoustic_scale=scale, names=data.names, search="grid",
                      evaluations=len(points), hypotheses=len(points) * len(data.errors),
                      seconds=time.perf_counter() - t0)


def linear_scores(flat, nn: Optional[np.ndarray], errors, offsets, acoustic_scale: float) -> LinearScores:
    """The scores as ``base + F @ [a_0 .. a_K, wip]`` with ``a_k = delta * w_k``:
    base = -acoustic_scale * ac_cost, F = [-ngram - graph, -nn_k - graph, num_words]
    (equal to :func:`~nbest_rescore.rescoring.combine.combine` up to rounding).
    Raises DataError when a score inside the search's box could overflow float64."""
    graph = np.asarray(flat.graph_cost, dtype=np.float64)
    cols = [-np.asarray(flat.lm_cost, np.float64) - graph]
    cols += [-c - graph for c in (nn if nn is not None else [])]
    cols.append(np.asarray(flat.num_words, dtype=np.float64))
    with np.errstate(over="ignore", invalid="ignore"):
        base, features = -float(acoustic_scale) * np.asarray(flat.ac_cost, np.float64), np.column_stack(cols)
        reach = np.abs(base).max(initial=0) + LINE_LIMIT * np.abs(features).max(axis=0, initial=0).sum()
    if not reach < 1e300:  # (the largest score any point in the search's box can give)
        raise overflow_error(f"a score of the line search (weights up to {LINE_LIMIT:g})", flat.ac_cost, flat.lm_cost)
    return LinearScores(base=base, features=features, offsets=np.asarray(offsets), errors=np.asarray(errors))


def tune_line(data: TuneData, options: SearchOptions) -> TuneResult:
    """Exact line search (Och 2003) of ``a_k = delta * w_k`` (k = 0 .. K) and the
    penalty at a fixed acoustic scale (``options``, checked on construction), from
    ``delta = options.lm_weight``, equal weights ``w_k = 1 / (K + 1)`` and
    ``options.word_ins_penalty``, plus ``options.restarts`` random starts around it
    seeded by ``options.seed`` (``a_k`` spread by ``delta / (K + 1)``, the penalty by 1
    nat). Bounds: ``0 <= a_k <= LINE_LIMIT``, ``|wip| <= LINE_LIMIT``.

    Returns:
        TuneResult with ``search="line"``: one point per start (WER in percent, weights
        normalised: ``lm_weight = delta = sum a``, ``interp = w_0``), the best, the line
        minimisations (``evaluations``), hypotheses visited and seconds.
    Raises:
        DataError: a score in the search's box could overflow (:func:`linear_scores`).
    """
    t0 = time.perf_counter()
    k, delta0, scale = len(data.names), float(options.lm_weight), float(options.acoustic_scale)
    problem = linear_scores(data, data.nn, data.errors, data.offsets, scale)
    x0 = initial_point(k, delta0, float(options.word_ins_penalty))
    lower, upper = box(k, LINE_LIMIT)
    spread = np.r_[np.full(k + 1, delta0 / (k + 1)), 1.0]
    res = och_search(problem, x0, lower, upper, restarts=options.restarts, seed=options.seed, spread=spread)
    points = []
    for run in res.runs:
        delta, w, wip = split_point(run.x, k)
        points.append(TunePoint(interp=w[0], lm_weight=delta, word_ins_penalty=wip,
                                wer=run.errors / data.ref_words * 100.0,
                                nn_weights=tuple(w[1:]) if k >= 2 else None))
    return TuneResult(points=tuple(points), best=points[res.best], acoustic_scale=scale, names=data.names,
                      search="line", evaluations=res.line_minimizations, hypotheses=res.visited,
                      seconds=time.perf_counter() - t0, seed=options.seed)
