"""``tune --skip-budget B``: the first-pass posterior threshold P of selective rescoring
(``score --skip-confident P``, :mod:`nbest_rescore.rescoring.selective`), chosen by
WER and honest by folds.

At weights ``w``, an utterance whose first-pass 1-best has a first-pass posterior
>= P keeps that 1-best (the first-pass score at ``w``) and its list is not scored;
the others take their 1-best at ``w``. Over the thresholds (every distinct posterior
of the set, and "score every list") this gives the exact curve of word errors against
hypotheses scored. The threshold chosen on a set is the one that scores the fewest
hypotheses with a WER at most ``B`` (absolute, percent) above scoring every list.
By folds: each held-out fold gets the threshold chosen on the other folds at the
weights tuned there (:mod:`.folds`), and the pooled held-out WER and share of
hypotheses scored are reported beside the cross-validated WER of scoring every list.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..rescoring.combine import Weights
from ..rescoring.selective import first_pass_posteriors
from .bootstrap import improvement_probability
from .folds import CrossValidation
from .tuning import TuneData


@dataclass(frozen=True)
class SkipCurve:
    """Word errors against hypotheses scored, one point per threshold, from "score every
    list" (``thresholds[0] = inf``) to the lowest posterior (every list skipped).

    Attributes:
        thresholds: float64 [T] decreasing; point t skips the utterances whose
            first-pass posterior is >= ``thresholds[t]``.
        hyps_scored: int64 [T] hypotheses of the lists still scored.
        errors: int64 [T] word errors of the 1-bests.
        hyps, ref_words: totals of the set.
    """

    thresholds: np.ndarray = field(repr=False)
    hyps_scored: np.ndarray = field(repr=False)
    errors: np.ndarray = field(repr=False)
    hyps: int
    ref_words: int

    def choose(self, budget: float) -> int:
        """The point (index) scoring the fewest hypotheses whose WER is at most
        ``budget`` percent above scoring every list (ties: the fewer errors)."""
        ok = self.errors * 100.0 <= self.errors[0] * 100.0 + budget * self.ref_words + 1e-9
        cand = np.flatnonzero(ok)
        return int(cand[np.lexsort((self.errors[cand], self.hyps_scored[cand]))[0]])


def skip_choice(data: TuneData, weights: Weights, threshold: float) -> Tuple[np.ndarray, np.ndarray]:
    """``(chosen, scored)``: int64 [U] flat index of each utterance's 1-best and bool
    [U] the utterances scored, when lists at or above ``threshold`` are skipped."""
    scored = first_pass_posteriors(data, weights) < threshold
    first = data.one_best(replace(weights, interp=1.0, nn_weights=None))
    return np.where(scored, data.one_best(weights), first), scored


def skip_curve(data: TuneData, weights: Weights) -> SkipCurve:
    """The exact :class:`SkipCurve` of ``data`` (with its NN costs) at ``weights``."""
    post = first_pass_posteriors(data, weights)
    first = data.errors[data.one_best(replace(weights, interp=1.0, nn_weights=None))]
    rescored = data.errors[data.one_best(weights)]
    sizes = np.diff(data.offsets)
    levels = np.unique(post)[::-1]  # decreasing: each one skips one more group of utterances
    group = np.searchsorted(-levels, -post)  # the level of each utterance
    gained = np.bincount(group, weights=first - rescored, minlength=len(levels))
    skipped_hyps = np.bincount(group, weights=sizes, minlength=len(levels))
    errors = int(rescored.sum()) + np.concatenate([[0], np.cumsum(gained)])
    scored = int(sizes.sum()) - np.concatenate([[0], np.cumsum(skipped_hyps)])
    return SkipCurve(np.concatenate([[np.inf], levels]), scored.astype(np.int64), np.rint(errors).astype(np.int64),
                     int(sizes.sum()), data.ref_words)


@dataclass(frozen=True)
class SelectiveTune:
    """What ``tune --skip-budget`` reports (tune.json's ``selective`` block).

    Attributes:
        budget: B, WER points (absolute, percent) allowed above scoring every list.
        threshold: P chosen on the whole set at the dev-tuned weights (for
            ``score --skip-confident``; inf: score every list); ``fraction_scored``
            and ``wer`` (percent) there, ``wer_all`` scoring every list.
        cv_thresholds: the threshold of each fold, chosen on the other folds.
        cv_errors: int64 [U] word errors of the held-out 1-bests with skipping.
        cv_hyps_scored, hyps: hypotheses scored held out, and in all.
        cv_wer, cv_wer_all: pooled held-out WER with skipping, and scoring every list.
        p_better: P(held-out skipping better than held-out scoring every list) by the
            paired bootstrap (None without replications).
    """

    budget: float
    threshold: float
    fraction_scored: float
    wer: float
    wer_all: float
    cv_thresholds: Tuple[float, ...]
    cv_errors: np.ndarray = field(repr=False)
    cv_hyps_scored: int
    hyps: int
    cv_wer: float
    cv_wer_all: float
    p_better: Optional[float]

    def to_dict(self) -> Dict[str, object]:
        """tune.json's ``selective`` block (thresholds ``inf``: ``null``, score every list)."""
        def thr(t):
            return None if not np.isfinite(t) else float(t)

        return {"skip_budget": self.budget, "skip_confident": thr(self.threshold),
                "fraction_scored": self.fraction_scored, "wer": self.wer, "wer_all_scored": self.wer_all,
                "cross_validation": {"wer": self.cv_wer, "wer_all_scored": self.cv_wer_all,
                                     "fraction_scored": self.cv_hyps_scored / max(self.hyps, 1),
                                     "per_fold_skip_confident": [thr(t) for t in self.cv_thresholds],
                                     "p_better_than_all_scored": self.p_better}}

    def lines(self) -> List[str]:
        """Printable lines."""
        p = "score every list" if not np.isfinite(self.threshold) else f"--skip-confident {self.threshold:.6g}"
        out = [f"selective rescoring (WER budget {self.budget:g}): {p}: {self.fraction_scored:.1%} of the hypotheses "
               f"scored, WER {self.wer:.2f}% (every list: {self.wer_all:.2f}%)",
               f"  cross-validated: {self.cv_hyps_scored / max(self.hyps, 1):.1%} scored, WER {self.cv_wer:.2f}% "
               f"(every list: {self.cv_wer_all:.2f}%)"]
        if self.p_better is not None:
            out[-1] += f", P(better than every list) = {self.p_better:.4f}"
        return out


def tune_skip(data: TuneData, weights: Weights, cv: CrossValidation, budget: float, replications: int = 0,
              seed: int = 0) -> SelectiveTune:
    """The threshold on ``data`` at ``weights`` (the dev-tuned point) and, by the folds
    of ``cv`` (each at its own tuned weights), the held-out WER and share scored with
    skipping. WERs in percent; ``budget`` >= 0 in WER points."""
    curve = skip_curve(data, weights)
    best = curve.choose(budget)
    cv_errors = np.empty(data.num_utts, dtype=np.int64)
    scored_hyps, thresholds = 0, []
    sizes = np.diff(data.offsets)
    for k, fold in enumerate(cv.per_fold):
        held = cv.fold_of_utt == k
        w = fold.tuned.best_weights()
        train_curve = skip_curve(data.subset(~held), w)
        t = float(train_curve.thresholds[train_curve.choose(budget)])
        test = data.subset(held)
        chosen, scored = skip_choice(test, w, t)
        cv_errors[held] = test.errors[chosen]
        scored_hyps += int(sizes[held][scored].sum())
        thresholds.append(t)
    p = improvement_probability(cv.utt_errors, cv_errors, replications, seed) if replications > 0 else None
    return SelectiveTune(budget, float(curve.thresholds[best]), float(curve.hyps_scored[best] / curve.hyps),
                         100.0 * curve.errors[best] / data.ref_words, 100.0 * curve.errors[0] / data.ref_words,
                         tuple(thresholds), cv_errors, scored_hyps, curve.hyps,
                         100.0 * cv_errors.sum() / data.ref_words, cv.wer, p)
