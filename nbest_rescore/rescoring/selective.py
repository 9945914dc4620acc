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
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .combine import Weights, flat_scores


def first_pass_posteriors(flat, weights: Weights) -> np.ndarray:
    """float64 [U]: the first-pass posterior of each utterance's first-pass 1-best (in
    (0, 1]; 1 for a list of one hypothesis).

    Args:
        flat: a :class:`~nbest_rescore.types.FlatNbest` or a
            :class:`~nbest_rescore.evaluation.tuning.TuneData` (H hypotheses, ``offsets``
            int64 [U + 1]).
        weights: the combination weights; their acoustic scale, LM weight and word
            insertion penalty make the first-pass score (``interp`` is set to 1).
    Raises:
        DataError: a first-pass score not finite (see :func:`~.combine.combine`).
    """
    s = flat_scores(flat, replace(weights, interp=1.0, nn_weights=None))
    if weights.lm_weight > 0:
        s = s / weights.lm_weight
    starts = flat.offsets[:-1]
    top = np.maximum.reduceat(s, starts)
    total = np.add.reduceat(np.exp(s - np.repeat(top, np.diff(flat.offsets))), starts)
    return 1.0 / total


def confident(flat, weights: Weights, threshold: float) -> np.ndarray:
    """bool [U]: utterances whose first-pass 1-best has a posterior of at least
    ``threshold`` (:func:`first_pass_posteriors`; ``flat`` and ``weights`` as there)."""
    return first_pass_posteriors(flat, weights) >= threshold
