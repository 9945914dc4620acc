"""``tune --skip-budget B``: the settings of selective rescoring
(:mod:`nbest_rescore.rescoring.selective`), each chosen by WER and honest by folds:
the list threshold P of ``score --skip-confident P`` and the posterior-beam mass E of
``score --prune-mass E`` (each alone).

At weights ``w``, an utterance whose first-pass 1-best has a first-pass posterior
>= P keeps that 1-best (the first-pass score at ``w``) and its list is not scored;
the others take their 1-best at ``w``. Over the thresholds (every distinct posterior
of the set, and "score every list") this gives the exact curve of word errors against
hypotheses scored. For the beam (:data:`BEAM_MASSES`, each hypothesis left out given
:func:`~nbest_rescore.rescoring.selective.fill_unscored`'s estimate, as ``score`` does)
the curve has one point per mass. The setting chosen on a set is the one that scores
the fewest hypotheses with a WER at most ``B`` (absolute, percent) above scoring every
list.
By folds: each held-out fold gets the threshold chosen on the other folds at the
weights tuned there (:mod:`.folds`), and the pooled held-out WER and share of
hypotheses scored are reported beside the cross-validated WER of scoring every list.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from ..rescoring.combine import Weights
from ..rescoring.selective import fill_unscored, first_pass_posteriors, outside_beam
from .bootstrap import improvement_probability
from .folds import CrossValidation
from .tune_data import TuneData


@dataclass(frozen=True)
class SkipCurve:
    """Word errors against hypotheses scored, one point per setting, from "score every
    hypothesis" (``thresholds[0]``: inf for P, 0 for E) to the one that scores fewest.

    Attributes:
        thresholds: float64 [T]; point t's setting (P decreasing: point t skips the
            utterances whose first-pass posterior is >= ``thresholds[t]``; or E
            increasing).
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


def skip_choice(data: TuneData, weights: Weights, threshold: float) -> Tuple[np.ndarray, int]:
    """``(chosen, scored)``: int64 [U] flat index of each utterance's 1-best and the
    hypotheses scored, when lists at or above ``threshold`` are skipped."""
    scored = first_pass_posteriors(data, weights) < threshold
    first = data.one_best(replace(weights, interp=1.0, nn_weights=None))
    return np.where(scored, data.one_best(weights), first), int(np.diff(data.offsets)[scored].sum())


#: the posterior-beam masses E that ``tune --skip-budget`` tries (``score --prune-mass``)
BEAM_MASSES = tuple(float(f"{e:.2g}") for e in np.geomspace(1e-4, 0.5, 25))


def beam_choice(data: TuneData, weights: Weights, mass: float) -> Tuple[np.ndarray, int]:
    """``(chosen, scored)`` as :func:`skip_choice` with the posterior beam of ``mass``
    (0: every hypothesis scored)."""
    if mass <= 0:
        return data.one_best(weights), int(data.offsets[-1])
    out = outside_beam(data, weights, mass)
    nn = np.stack([fill_unscored(data.lm_cost, data.offsets, row, out) for row in data.nn])
    return replace(data, nn=nn).one_best(weights), int((~out).sum())


def beam_curve(data: TuneData, weights: Weights) -> SkipCurve:
    """The :class:`SkipCurve` of the posterior beam at every mass of :data:`BEAM_MASSES`."""
    points = [beam_choice(data, weights, m) for m in (0.0, *BEAM_MASSES)]
    return SkipCurve(np.array([0.0, *BEAM_MASSES]), np.array([n for _, n in points], dtype=np.int64),
                     np.array([int(data.errors[c].sum()) for c, _ in points], dtype=np.int64),
                     int(data.offsets[-1]), data.ref_words)


@dataclass(frozen=True)
class Rule:
    """One selective-rescoring setting: ``option`` the score option it sets, ``curve``
    and ``choice`` (:func:`skip_curve`/:func:`skip_choice` or the beam's)."""

    option: str
    curve: Callable[[TuneData, Weights], SkipCurve]
    choice: Callable[[TuneData, Weights, float], Tuple[np.ndarray, int]]


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
    """What ``tune --skip-budget`` reports of one :class:`Rule` (an entry of tune.json's
    ``selective`` block).

    Attributes:
        option: the score option (``skip_confident`` or ``prune_mass``).
        budget: B, WER points (absolute, percent) allowed above scoring every list.
        threshold: the setting chosen on the whole set at the dev-tuned weights (for
            ``score --skip-confident`` / ``--prune-mass``; inf or 0: score every
            hypothesis); ``fraction_scored`` and ``wer`` (percent) there, ``wer_all``
            scoring every hypothesis.
        cv_thresholds: the setting of each fold, chosen on the other folds.
        cv_errors: int64 [U] word errors of the held-out 1-bests with skipping.
        cv_hyps_scored, hyps: hypotheses scored held out, and in all.
        cv_wer, cv_wer_all: pooled held-out WER with skipping, and scoring every list.
        p_better: P(held-out skipping better than held-out scoring every list) by the
            paired bootstrap (None without replications).
    """

    option: str
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
        """The rule's entry of tune.json's ``selective`` block (settings that score every
        hypothesis: ``null``)."""
        def thr(t):
            return None if not np.isfinite(t) or t == 0 else float(t)

        return {"skip_budget": self.budget, self.option: thr(self.threshold),
                "fraction_scored": self.fraction_scored, "wer": self.wer, "wer_all_scored": self.wer_all,
                "cross_validation": {"wer": self.cv_wer, "wer_all_scored": self.cv_wer_all,
                                     "fraction_scored": self.cv_hyps_scored / max(self.hyps, 1),
                                     f"per_fold_{self.option}": [thr(t) for t in self.cv_thresholds],
                                     "p_better_than_all_scored": self.p_better}}

    def lines(self) -> List[str]:
        """Printable lines."""
        off = not np.isfinite(self.threshold) or self.threshold == 0
        p = "score every hypothesis" if off else f"--{self.option.replace('_', '-')} {self.threshold:.6g}"
        out = [f"selective rescoring (WER budget {self.budget:g}): {p}: {self.fraction_scored:.1%} of the hypotheses "
               f"scored, WER {self.wer:.2f}% (every list: {self.wer_all:.2f}%)",
               f"  cross-validated: {self.cv_hyps_scored / max(self.hyps, 1):.1%} scored, WER {self.cv_wer:.2f}% "
               f"(every list: {self.cv_wer_all:.2f}%)"]
        if self.p_better is not None:
            out[-1] += f", P(better than every list) = {self.p_better:.4f}"
        return out


#: the rules ``tune --skip-budget`` tunes, each alone
RULES = (Rule("skip_confident", skip_curve, skip_choice), Rule("prune_mass", beam_curve, beam_choice))


def tune_skip(data: TuneData, weights: Weights, cv: CrossValidation, budget: float, replications: int = 0,
              seed: int = 0, rule: Rule = RULES[0]) -> SelectiveTune:
    """The setting of ``rule`` on ``data`` at ``weights`` (the dev-tuned point) and, by
    the folds of ``cv`` (each at its own tuned weights), the held-out WER and share
    scored with it. WERs in percent; ``budget`` >= 0 in WER points."""
    curve = rule.curve(data, weights)
    best = curve.choose(budget)
    cv_errors = np.empty(data.num_utts, dtype=np.int64)
    scored_hyps, thresholds = 0, []
    for k, fold in enumerate(cv.per_fold):
        held = cv.fold_of_utt == k
        w = fold.tuned.best_weights()
        train_curve = rule.curve(data.subset(~held), w)
        t = float(train_curve.thresholds[train_curve.choose(budget)])
        test = data.subset(held)
        chosen, scored = rule.choice(test, w, t)
        cv_errors[held] = test.errors[chosen]
        scored_hyps += scored
        thresholds.append(t)
    p = improvement_probability(cv.utt_errors, cv_errors, replications, seed) if replications > 0 else None
    return SelectiveTune(rule.option, budget, float(curve.thresholds[best]), float(curve.hyps_scored[best] / curve.hyps),
                         100.0 * curve.errors[best] / data.ref_words, 100.0 * curve.errors[0] / data.ref_words,
                         tuple(thresholds), cv_errors, scored_hyps, curve.hyps,
                         100.0 * cv_errors.sum() / data.ref_words, cv.wer, p)
