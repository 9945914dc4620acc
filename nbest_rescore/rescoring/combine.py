"""Log-linear score combination (AMN thesis ``000`` section 5.2.2, eq. 5.1-5.3), with
any number K of neural LMs.

All inputs are *costs* (negated natural-log values, larger = worse). The combined
score (larger = better) of a hypothesis ``w`` with ``|w|`` words is::

    s(w) = -acoustic_scale * ac_cost
           + delta * [w_0 * (-ngram_cost) + sum_k w_k * (-nn_cost_k) - graph_cost]
           + wip * |w|

with ``w_0 + w_1 + ... + w_K = 1``. ``delta`` is the LM weight (grammar scale),
``w_0 = lambda`` the interpolation weight of the n-gram (``interp``; ``lambda = 1``:
n-gram only), ``w_k`` the weight of neural LM k (``nn_weights``; with one LM it is
``1 - lambda``, the classic two-model interpolation), ``wip`` the word insertion
penalty per word (negative values penalise words). ``graph_cost`` is Kaldi's non-LM
graph cost (``lmwt.nolm``), zero for lists that have none. With ``acoustic_scale = 1,
delta = 9.5, wip = -0.629606, lambda = 1`` the abc-nbest benchmark's first-pass ranking
is reproduced exactly. The defaults of :class:`Weights` are the command-line defaults,
declared once in :class:`~nbest_rescore.options.score.WeightOptions` (the penalty: 0).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional, Sequence, Tuple

import numpy as np

from ..errors import DataError
from ..options.score import WeightOptions


@dataclass(frozen=True)
class Weights:
    """Combination weights; see the module docstring for the formula.

    ``nn_weights`` are ``w_1 .. w_K``, one per neural LM in the order their costs are
    given; None means one LM with weight ``1 - interp`` (the two-model case).

    Raises:
        DataError (a ValueError), on construction: a weight not finite, ``interp`` or an
            NN weight outside [0, 1], or ``interp + sum(nn_weights)`` not 1 (checked by
            :class:`~nbest_rescore.options.WeightOptions`, where the weights are declared).
    """

    acoustic_scale: float = WeightOptions.acoustic_scale
    lm_weight: float = WeightOptions.lm_weight
    interp: float = WeightOptions.interp
    word_ins_penalty: float = WeightOptions.word_ins_penalty
    nn_weights: Optional[Tuple[float, ...]] = None

    def __post_init__(self):
        WeightOptions(**asdict(self))
        if self.nn_weights is not None:
            object.__setattr__(self, "nn_weights", tuple(float(w) for w in self.nn_weights))

    @property
    def lm_weights_per_model(self) -> Tuple[float, ...]:
        """``(w_1, .., w_K)``: the NN LM weights, ``(1 - interp,)`` for one LM."""
        return self.nn_weights if self.nn_weights is not None else (1.0 - self.interp,)


def _nn_costs(nn_cost, k: int) -> Sequence[np.ndarray]:
    """The K cost arrays of ``nn_cost`` (one array for K = 1, else a sequence of K
    arrays or a [K, ...] array)."""
    if k == 1 and not (isinstance(nn_cost, (list, tuple)) and len(nn_cost) == 1):
        return [np.asarray(nn_cost, dtype=np.float64)]
    costs = [np.asarray(c, dtype=np.float64) for c in nn_cost]
    if len(costs) != k:
        raise ValueError(f"{k} NN LM weights but {len(costs)} NN cost arrays")
    return costs


def combine(ac_cost, ngram_cost, num_words, weights: Weights, nn_cost=None, graph_cost=None,
            keys=None) -> np.ndarray:
    """Combined scores (natural log, larger = better), float64 with the inputs' shape.

    Args:
        ac_cost: [...] acoustic costs.
        ngram_cost: [...] n-gram costs (``</s>`` included).
        num_words: [...] word counts (``</s>`` not counted).
        weights: the combination weights.
        nn_cost: neural LM costs: one [...] array (one LM), or K arrays / a [K, ...]
            array in the order of ``weights.nn_weights``; None when no NN weight is > 0.
        graph_cost: [...] optional non-LM graph costs (scaled by the LM weight).
        keys: optional hypothesis keys [H] (one-dimensional inputs), to name one in an error.
    Raises:
        ValueError: ``nn_cost`` is None while an NN weight is > 0, or the number of
            cost arrays differs from the number of NN weights.
        DataError: a combined score is not finite (a huge cost or weight overflowed).
    """
    with np.errstate(over="ignore", invalid="ignore"):  # (an overflow is refused below, in one line)
        score = _combine(np.asarray(ac_cost, dtype=np.float64), np.asarray(ngram_cost, dtype=np.float64),
                         num_words, weights, nn_cost, graph_cost)
    if not np.isfinite(score).all():  # (the positions only when there is an error to name)
        bad = np.flatnonzero(~np.isfinite(score))
        which = f"hypothesis {keys[bad[0]]}" if keys is not None else f"{len(bad)} of {score.size} hypotheses"
        raise overflow_error(f"the combined score of {which}", ac_cost, ngram_cost)
    return score


def overflow_error(what: str, ac_cost, ngram_cost) -> DataError:
    """The one-line error for scores (``what``) that a huge cost times its weight takes
    past float64's range; ``ac_cost``, ``ngram_cost``: the costs, for their largest."""
    return DataError(f"{what} passes float64's range (about +-1.8e308): a cost (largest "
                     f"{float(np.abs(ac_cost).max(initial=0)):.3g} acoustic, "
                     f"{float(np.abs(ngram_cost).max(initial=0)):.3g} n-gram) times its weight overflows; costs are "
                     f"-log P in nats, a few thousand at most: check the N-best's cost fields and the weights")


def _combine(ac, ng, num_words, weights: Weights, nn_cost, graph_cost) -> np.ndarray:
    """:func:`combine` without the check (numpy may overflow to inf here)."""
    lam = weights.interp
    lm_score = -lam * ng if lam != 0.0 else np.zeros_like(ng)
    ws = weights.lm_weights_per_model
    if any(w != 0.0 for w in ws):
        if nn_cost is None:
            raise ValueError("nn_cost is needed when an NN LM weight is > 0 (interp (lambda) < 1)")
        for w, cost in zip(ws, _nn_costs(nn_cost, len(ws))):
            if w != 0.0:
                lm_score = lm_score - w * cost
    if graph_cost is not None:
        lm_score = lm_score - np.asarray(graph_cost, dtype=np.float64)
    return (-weights.acoustic_scale * ac + weights.lm_weight * lm_score
            + weights.word_ins_penalty * np.asarray(num_words, dtype=np.float64))


def flat_scores(flat, weights: Weights, nn_cost=None, sl=slice(None)) -> np.ndarray:
    """:func:`combine` over the rows ``sl`` of a :class:`~nbest_rescore.types.FlatNbest`
    (``nn_cost``: float64 [H] over all its rows for one LM, K such arrays or a [K, H]
    array for several, or None when no NN weight is > 0).
    Returns float64 scores (natural log, larger = better) of the selected rows."""
    graph, keys = flat.graph_cost[sl], getattr(flat, "keys", None)  # (a TuneData has no keys)
    nn = None
    if nn_cost is not None:
        k = len(weights.lm_weights_per_model)
        nn = [c[sl] for c in _nn_costs(nn_cost, k)]
        nn = nn[0] if k == 1 else nn
    return combine(flat.ac_cost[sl], flat.lm_cost[sl], flat.num_words[sl], weights, nn,
                   graph if np.any(graph) else None, keys=keys[sl] if keys is not None else None)


def segment_argmax(scores: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per-segment argmax of ``scores`` float [H] (all hypotheses of all utterances,
    concatenated; segment u is ``offsets[u]`` .. ``offsets[u + 1] - 1``, int [U + 1],
    every segment non-empty), ties to the earliest: int64 [U] flat indices."""
    scores = np.asarray(scores, dtype=np.float64)
    starts = offsets[:-1]
    seg_max = np.maximum.reduceat(scores, starts)
    lengths = np.diff(offsets)
    is_max = scores == np.repeat(seg_max, lengths)
    # first True per segment: smallest index among maxima
    idx = np.arange(len(scores))
    cand = np.where(is_max, idx, len(scores))
    return np.minimum.reduceat(cand, starts).astype(np.int64)
