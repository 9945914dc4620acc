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
from typing import Mapping, Optional, Sequence, Tuple

import numpy as np

from ..rescoring.combine import Weights, overflow_error
from ..types import NbestSet
from .line_search import LinearScores, box, initial_point, och_search, split_point
from .tune_data import NnCosts, TuneData, tune_data
from .tune_result import TunePoint, TuneResult

#: Bound of the line search: ``0 <= delta * w_k <= LINE_LIMIT`` and ``|wip| <= LINE_LIMIT``.
LINE_LIMIT = 100.0


def _floats(name: str, values) -> Tuple[float, ...]:
    vals = tuple(float(v) for v in np.atleast_1d(np.asarray(values, dtype=np.float64)))
    if not vals:
        raise ValueError(f"tune_grid: {name} is empty; give at least one value")
    if not all(np.isfinite(v) for v in vals):
        raise ValueError(f"tune_grid: {name} must be finite, got {vals}")
    return vals


def _simplex(interps: Tuple[float, ...], k: int):
    """``(w_0, (w_1 .. w_K))`` with w_0 .. w_{K-1} from ``interps`` and
    ``w_K = 1 - sum >= 0``, in lexicographic grid order (K >= 2)."""
    for head in product(interps, repeat=k):
        rest = round(1.0 - sum(head), 10)
        if rest >= -1e-9:
            yield head[0], (*head[1:], max(rest, 0.0))


def tune_grid(nbest: NbestSet, refs: Mapping[str, Sequence[str]], nn_cost: NnCosts,
              interps: Sequence[float], lm_weights: Sequence[float],
              word_ins_penalties: Optional[Sequence[float]] = None,
              acoustic_scale: float = 1.0, *, names: Optional[Sequence[str]] = None,
              labels: Optional[Sequence[str]] = None) -> TuneResult:
    """WER of every grid point; pick the best.

    One neural LM (or none): every (interp, lm_weight, word_ins_penalty). K >= 2 LMs:
    the weights ``(w_0 .. w_{K-1})`` each from ``interps`` with ``w_K = 1 - sum >= 0``
    (the simplex at that spacing), times lm_weights, times penalties.

    Args:
        nbest: the N-best lists (H hypotheses), or their :class:`TuneData` (then
            ``refs``, ``nn_cost``, ``names`` and ``labels`` are not used).
        refs: utterance id -> reference words.
        nn_cost: hypothesis key -> neural LM cost (negated natural log, ``</s>``
            included), or K such maps, each covering every key; None only when
            every interp is 1.
        interps: n-gram weights lambda (w_0) in [0, 1]; lm_weights: delta.
        word_ins_penalties: nats per word (negative penalises words); None: the
            default penalty of :class:`~nbest_rescore.rescoring.combine.Weights` (0).
        names: the LM names (default ``nn``, ``nn_2``, ...); labels: how error
            messages name each cost map (default from the names).
    Returns:
        TuneResult; WER in percent; best = lowest WER, ties to the first in grid order
        (interp outermost, word_ins_penalty innermost).
    Raises:
        DataError: missing references / empty references, nn_cost missing hypothesis
            keys (a few listed), or non-finite costs.
        ValueError: empty or non-finite grid values, interp outside [0, 1], or
            ``nn_cost`` None while some interp < 1.
    """
    t0 = time.perf_counter()
    no_nn = nbest.nn is None if isinstance(nbest, TuneData) else nn_cost is None
    interps_t, lms_t, wips_t = _grid_values(interps, lm_weights, word_ins_penalties, acoustic_scale, no_nn)
    prep = tune_data(nbest, refs, nn_cost, names, labels)
    k = len(prep.names)
    weights = list(_simplex(interps_t, k)) if k >= 2 else [(lam, None) for lam in interps_t]
    points = [_grid_point(prep, Weights(acoustic_scale=float(acoustic_scale), lm_weight=delta, interp=lam,
                                        word_ins_penalty=wip, nn_weights=ws))
              for lam, ws in weights for delta in lms_t for wip in wips_t]
    best = min(points, key=lambda p: p.wer)  # min keeps the first of equal WERs
    return TuneResult(points=tuple(points), best=best, acoustic_scale=float(acoustic_scale),
                      names=prep.names, search="grid", evaluations=len(points),
                      hypotheses=len(points) * len(prep.errors), seconds=time.perf_counter() - t0)


def _grid_values(interps, lm_weights, word_ins_penalties, acoustic_scale: float, no_nn: bool):
    """(interps, lm_weights, word_ins_penalties) of :func:`tune_grid` as float tuples,
    the penalty defaulting to :class:`Weights`'s. Raises ValueError as it says."""
    interps_t = _floats("interps", interps)
    lms_t = _floats("lm_weights", lm_weights)
    if word_ins_penalties is None:
        word_ins_penalties = (Weights.word_ins_penalty,)
    wips_t = _floats("word_ins_penalties", word_ins_penalties)
    bad = [v for v in interps_t if not 0.0 <= v <= 1.0]
    if bad:
        raise ValueError(f"tune_grid: interps must lie in [0, 1], got {bad}")
    if no_nn and any(v != 1.0 for v in interps_t):
        raise ValueError("tune_grid: nn_cost is needed when an interp (lambda) is < 1; "
                         "give neural LM costs or use interps=[1.0]")
    return interps_t, lms_t, wips_t


def _grid_point(prep: TuneData, w: Weights) -> TunePoint:
    """The WER (percent) of the 1-best under ``w`` as a :class:`TunePoint`."""
    wer = float(prep.errors[prep.one_best(w)].sum()) / prep.ref_words * 100.0
    return TunePoint(interp=w.interp, lm_weight=w.lm_weight, word_ins_penalty=w.word_ins_penalty, wer=wer,
                     nn_weights=w.nn_weights)


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


def tune_line(nbest: NbestSet, refs: Mapping[str, Sequence[str]], nn_cost: NnCosts, *,
              lm_weight: float = Weights.lm_weight, word_ins_penalty: Optional[float] = None,
              acoustic_scale: float = Weights.acoustic_scale,
              restarts: int = 5, seed: int = 0, names: Optional[Sequence[str]] = None,
              labels: Optional[Sequence[str]] = None) -> TuneResult:
    """Exact line search (Och 2003) of ``a_k = delta * w_k`` (k = 0 .. K) and the
    penalty at a fixed acoustic scale, from ``delta = lm_weight``, equal weights
    ``w_k = 1 / (K + 1)`` and ``word_ins_penalty`` (None: the default of :class:`Weights`,
    0), plus ``restarts`` seeded random starts around it (``a_k``
    spread by ``delta / (K + 1)``, the penalty by 1 nat). Bounds: ``0 <= a_k <=
    LINE_LIMIT``, ``|wip| <= LINE_LIMIT``.

    Returns:
        TuneResult with ``search="line"``: one point per start (WER in percent, weights
        normalised: ``lm_weight = delta = sum a``, ``interp = w_0``), the best, the line
        minimisations (``evaluations``), hypotheses visited and seconds.
    ``nbest``: the lists or their :class:`TuneData`, as :func:`tune_grid`.

    Raises:
        DataError: as :func:`tune_grid`. ValueError: restarts < 0.
    """
    t0 = time.perf_counter()
    if restarts < 0:
        raise ValueError(f"tune_line: restarts must be >= 0, got {restarts}")
    prep = tune_data(nbest, refs, nn_cost, names, labels)
    k = len(prep.names)
    wip0 = Weights.word_ins_penalty if word_ins_penalty is None else float(word_ins_penalty)
    problem = linear_scores(prep, prep.nn, prep.errors, prep.offsets, acoustic_scale)
    x0 = initial_point(k, float(lm_weight), wip0)
    lower, upper = box(k, LINE_LIMIT)
    spread = np.r_[np.full(k + 1, float(lm_weight) / (k + 1)), 1.0]
    res = och_search(problem, x0, lower, upper, restarts=restarts, seed=seed, spread=spread)
    points = []
    for run in res.runs:
        delta, w, wip = split_point(run.x, k)
        points.append(TunePoint(interp=w[0], lm_weight=delta, word_ins_penalty=wip,
                                wer=run.errors / prep.ref_words * 100.0,
                                nn_weights=tuple(w[1:]) if k >= 2 else None))
    return TuneResult(points=tuple(points), best=points[res.best], acoustic_scale=float(acoustic_scale),
                      names=prep.names, search="line", evaluations=res.line_minimizations,
                      hypotheses=res.visited, seconds=time.perf_counter() - t0, seed=int(seed))
