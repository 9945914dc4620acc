"""Log-linear score combination (AMN thesis ``000`` section 5.2.2, eq. 5.1-5.3).

All inputs are *costs* (negated natural-log values, larger = worse). The combined
score (larger = better) of a hypothesis ``w`` with ``|w|`` words is::

    s(w) = -acoustic_scale * ac_cost
           + delta * [lambda * (-ngram_cost) + (1 - lambda) * (-nn_cost) - graph_cost]
           + wip * |w|

``delta`` is the LM weight (grammar scale), ``lambda`` the interpolation weight of the
n-gram (``lambda = 1``: n-gram only), ``wip`` the word insertion penalty per word
(negative values penalise words). ``graph_cost`` is Kaldi's non-LM graph cost
(``lmwt.nolm``), zero for lists that have none. With ``acoustic_scale = 1,
delta = 9.5, wip = -0.629606, lambda = 1`` the benchmark's first-pass ranking is
reproduced exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Weights:
    """Combination weights; see the module docstring for the formula.

    Raises ValueError (on construction) when ``interp`` is outside [0, 1] or a
    weight is not finite.
    """

    acoustic_scale: float = 1.0
    lm_weight: float = 9.5
    interp: float = 0.5
    word_ins_penalty: float = -0.629606

    def __post_init__(self):
        for name in ("acoustic_scale", "lm_weight", "interp", "word_ins_penalty"):
            if not np.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite, got {getattr(self, name)}")
        if not 0.0 <= self.interp <= 1.0:
            raise ValueError(f"interp (lambda) must be in [0, 1], got {self.interp}")


def combine(ac_cost, ngram_cost, num_words, weights: Weights, nn_cost=None, graph_cost=None) -> np.ndarray:
    """Combined scores (natural log, larger = better), float64 with the inputs' shape.

    Args:
        ac_cost: [...] acoustic costs.
        ngram_cost: [...] n-gram costs (``</s>`` included).
        num_words: [...] word counts (``</s>`` not counted).
        weights: the combination weights.
        nn_cost: [...] neural LM costs, or None when ``weights.interp == 1``.
        graph_cost: [...] optional non-LM graph costs (scaled by the LM weight).
    Raises:
        ValueError: ``nn_cost`` is None while ``interp < 1``.
    """
    ac = np.asarray(ac_cost, dtype=np.float64)
    ng = np.asarray(ngram_cost, dtype=np.float64)
    lam = weights.interp
    lm_score = -lam * ng if lam != 0.0 else np.zeros_like(ng)
    if lam < 1.0:
        if nn_cost is None:
            raise ValueError("nn_cost is needed when interp (lambda) < 1")
        lm_score = lm_score - (1.0 - lam) * np.asarray(nn_cost, dtype=np.float64)
    if graph_cost is not None:
        lm_score = lm_score - np.asarray(graph_cost, dtype=np.float64)
    return (-weights.acoustic_scale * ac + weights.lm_weight * lm_score
            + weights.word_ins_penalty * np.asarray(num_words, dtype=np.float64))


def flat_scores(flat, weights: Weights, nn_cost=None, sl=slice(None)) -> np.ndarray:
    """:func:`combine` over the rows ``sl`` of a :class:`~nbest_rescore.types.FlatNbest`
    (``nn_cost``: float64 [H] over all its rows, or None when ``interp == 1``).
    Returns float64 scores (natural log, larger = better) of the selected rows."""
    graph = flat.graph_cost[sl]
    return combine(flat.ac_cost[sl], flat.lm_cost[sl], flat.num_words[sl], weights,
                   None if nn_cost is None else np.asarray(nn_cost)[sl], graph if np.any(graph) else None)


def best_index(scores) -> int:
    """Index of the highest score; ties keep the earliest (first-pass rank order)."""
    return int(np.argmax(np.asarray(scores)))


def segment_argmax(scores: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per-segment argmax of a flat score vector, ties to the earliest element.

    Args:
        scores: float [H] scores of all hypotheses of all utterances, concatenated.
        offsets: int [U + 1] start of each utterance's segment, ``offsets[-1] == H``;
            every segment non-empty.
    Returns:
        int64 [U] flat indices (into ``scores``) of each segment's best hypothesis.
    """
    scores = np.asarray(scores, dtype=np.float64)
    starts = offsets[:-1]
    seg_max = np.maximum.reduceat(scores, starts)
    lengths = np.diff(offsets)
    is_max = scores == np.repeat(seg_max, lengths)
    # first True per segment: smallest index among maxima
    idx = np.arange(len(scores))
    cand = np.where(is_max, idx, len(scores))
    return np.minimum.reduceat(cand, starts).astype(np.int64)
