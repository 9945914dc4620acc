"""Selective rescoring: the neural LM only for the utterances the first pass is unsure of.

The first-pass posterior of a hypothesis is the softmax over its list of the first-pass
score (acoustic + n-gram at the combination weights, ``interp = 1``;
:mod:`~nbest_rescore.rescoring.combine`) divided by the LM weight::

    P(w | x) = exp(s(w) / delta) / sum_v exp(s(v) / delta)

as Kaldi's lattice posteriors (acoustic scale ``1 / LMWT``, LM scale 1; ``delta = 0``
leaves the score unscaled). An utterance is *confident* at threshold ``P`` when the
posterior of its first-pass 1-best is at least ``P``: ``score --skip-confident P``
keeps that 1-best without running the LM on its list (the 1-best still feeds the
document's history), ``tune --skip-budget`` picks ``P`` by folds
(:mod:`nbest_rescore.evaluation.selective`). Scoring fewer, uncertain lists is the
idea of arXiv 2310.11532 (and sherpa-onnx's switching threshold).

Within a list, ``score --prune-mass E`` scores only the posterior beam: the
hypotheses of highest posterior that hold ``1 - E`` of it (:func:`outside_beam`), as a
lattice is pruned by posterior before rescoring. A hypothesis left unscored either way
gets an estimate of its NN cost (:func:`fill_unscored`: its n-gram cost shifted by its
list's mean NN - n-gram difference; a list left whole gets its n-gram costs).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from ..options import ScoringOptions
from ..validation import check_value
from .combine import Weights, flat_scores


def hypothesis_posteriors(flat, weights: Weights) -> np.ndarray:
    """float64 [H]: the first-pass posterior of every hypothesis (each list sums to 1).

    Args:
        flat: a :class:`~nbest_rescore.types.FlatNbest` or a
            :class:`~nbest_rescore.evaluation.tune_data.TuneData` (H hypotheses, ``offsets``
            int64 [U + 1]).
        weights: the combination weights; their acoustic scale, LM weight and word
            insertion penalty make the first-pass score (``interp`` is set to 1).
    Raises:
        DataError: a first-pass score not finite (see :func:`~.combine.combine`).
    """
    s = flat_scores(flat, replace(weights, interp=1.0, nn_weights=None))
    if weights.lm_weight > 0:
        s = s / weights.lm_weight
    starts, sizes = flat.offsets[:-1], np.diff(flat.offsets)
    e = np.exp(s - np.repeat(np.maximum.reduceat(s, starts), sizes))
    return e / np.repeat(np.add.reduceat(e, starts), sizes)


def first_pass_posteriors(flat, weights: Weights) -> np.ndarray:
    """float64 [U]: the first-pass posterior of each utterance's first-pass 1-best (in
    (0, 1]; 1 for a list of one hypothesis); arguments as :func:`hypothesis_posteriors`."""
    return np.maximum.reduceat(hypothesis_posteriors(flat, weights), flat.offsets[:-1])


def outside_beam(flat, weights: Weights, mass: float) -> np.ndarray:
    """bool [H]: the hypotheses outside each list's posterior beam of ``mass`` in (0, 1):
    with the list ranked by first-pass posterior (ties in list order), a hypothesis is
    outside when those ranked before it hold at least ``1 - mass`` of the posterior
    (the 1-best is always inside); arguments as :func:`hypothesis_posteriors`."""
    return _outside(hypothesis_posteriors(flat, weights), flat.offsets, mass)


def _outside(p: np.ndarray, offsets: np.ndarray, mass: float) -> np.ndarray:
    """:func:`outside_beam` of the posteriors ``p`` float64 [H] of the lists ``offsets``."""
    sizes = np.diff(offsets)
    order = np.lexsort((np.arange(len(p)), -p, np.repeat(np.arange(len(sizes)), sizes)))
    ranked = p[order]
    before = np.cumsum(ranked) - ranked  # the mass ranked before each hypothesis, over the whole set
    before -= np.repeat(before[offsets[:-1]], sizes)  # ... within its list
    out = np.empty(len(p), dtype=bool)
    out[order] = before >= 1.0 - mass
    return out


@dataclass(frozen=True)
class Selection:
    """Which hypotheses the LM scores (``score --skip-confident P --prune-mass E``;
    None: that rule is off; each checked as declared in
    :class:`~nbest_rescore.options.ScoringOptions`).

    Raises:
        DataError: a value out of its range.
    """

    skip_confident: Optional[float] = None
    prune_mass: Optional[float] = None

    def __post_init__(self):
        for name in ("skip_confident", "prune_mass"):
            check_value(ScoringOptions, name, getattr(self, name))

    def unscored(self, flat, weights: Weights) -> Optional[np.ndarray]:
        """bool [H]: the hypotheses the LM does not score, or None (both rules off): every
        hypothesis of a list whose first-pass 1-best has a posterior of at least
        ``skip_confident`` (:func:`first_pass_posteriors`), and those outside the
        posterior beam of ``prune_mass`` (:func:`outside_beam`); arguments as there."""
        if self.skip_confident is None and self.prune_mass is None:
            return None
        p = hypothesis_posteriors(flat, weights)  # (once for both rules)
        out = np.zeros(len(p), dtype=bool)
        if self.skip_confident is not None:
            top = np.maximum.reduceat(p, flat.offsets[:-1])
            out |= np.repeat(top >= self.skip_confident, np.diff(flat.offsets))
        if self.prune_mass is not None:
            out |= _outside(p, flat.offsets, self.prune_mass)
        return out

    def settings(self) -> dict:
        """wer.json's ``selective`` settings."""
        return {"skip_confident": self.skip_confident, "prune_mass": self.prune_mass}


def fill_unscored(lm_cost: np.ndarray, offsets: np.ndarray, nn_cost: np.ndarray, skipped: np.ndarray) -> np.ndarray:
    """float64 [H]: ``nn_cost`` with each ``skipped`` hypothesis's cost replaced by its
    n-gram cost plus its list's mean (NN - n-gram) cost difference over the list's
    scored hypotheses (0 when none is scored: a skipped list gets its n-gram costs, so
    every weighting gives its first-pass score). Costs in nats; ``offsets`` int64
    [U + 1] (the lists to fill, each non-empty); ``skipped`` bool [H]."""
    starts, sizes = offsets[:-1] - offsets[0], np.diff(offsets)
    scored = ~skipped
    shift = (np.add.reduceat(np.where(scored, nn_cost - lm_cost, 0.0), starts)
             / np.maximum(np.add.reduceat(scored.astype(np.float64), starts), 1.0))
    return np.where(skipped, lm_cost + np.repeat(shift, sizes), nn_cost)
