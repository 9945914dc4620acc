"""``tune --order-cost K=PATH --order-budget B``: the history-merging order K of
``score --max-ngram-order K`` (:mod:`nbest_rescore.rescoring.history_graph`), chosen by
WER and honest by folds.

The NN costs of one LM scored exactly and at several orders K are given; the LM
positions read grow with K (each history of K - 1 words refines those of K - 2). At
weights ``w``, the order chosen on a set is the smallest K whose WER is at most ``B``
(absolute, percent) above exact scoring (none: exact). By folds: each held-out fold gets
the order chosen on the other folds at the weights tuned there (:mod:`.folds`, on the
exact costs), and its 1-bests with that order's costs; the pooled held-out WER is
reported beside the cross-validated WER of exact scoring. WER in percent.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..rescoring.combine import Weights
from .bootstrap import improvement_probability
from .folds import CrossValidation
from .tune_data import TuneData


@dataclass(frozen=True)
class OrderCosts:
    """NN costs of the one LM of a :class:`~.tune_data.TuneData` at several orders:
    ``orders`` ascending (each >= 2), ``nn`` float64 [n, H] the costs of each order for
    the data's hypotheses, in its order."""

    orders: Tuple[int, ...]
    nn: np.ndarray = field(repr=False)

    def data(self, data: TuneData, i: int) -> TuneData:
        """``data`` with the costs of order ``orders[i]`` as its NN costs."""
        return replace(data, nn=self.nn[i:i + 1])


def order_errors(data: TuneData, costs: OrderCosts, weights: Weights) -> np.ndarray:
    """int64 [n + 1, U] word errors of each utterance's 1-best at ``weights``: exact
    scoring (row 0), then each order of ``costs``."""
    rows = [data] + [costs.data(data, i) for i in range(len(costs.orders))]
    return np.stack([d.errors[d.one_best(weights)] for d in rows])


def choose_order(errors: np.ndarray, ref_words: int, budget: float) -> int:
    """Row of ``errors`` (:func:`order_errors`) with the smallest order whose word
    errors are at most ``budget`` WER points above exact scoring (0: exact)."""
    total = errors.sum(1)
    ok = np.flatnonzero(total[1:] * 100.0 <= total[0] * 100.0 + budget * ref_words + 1e-9)
    return int(ok[0]) + 1 if len(ok) else 0


@dataclass(frozen=True)
class OrderTune:
    """What ``tune --order-budget`` reports (tune.json's ``history_merging`` block).

    Attributes:
        budget: B, WER points (absolute, percent) allowed above exact scoring.
        orders: the orders given, ascending.
        order: the order chosen on the whole set at the dev-tuned weights (None: exact).
        wers: float64 [n + 1] WER at the dev-tuned weights, exact then each order.
        cv_orders: the order of each fold (None: exact), chosen on the other folds.
        cv_errors: int64 [U] word errors of the held-out 1-bests with those orders.
        cv_wer, cv_wer_exact: pooled held-out WER with them, and scoring exactly.
        cv_wer_each: float64 [n] pooled held-out WER with each order in every fold (at
            each fold's weights).
        p_better: P(held-out merged better than held-out exact) by the paired
            bootstrap (None without replications).
    """

    budget: float
    orders: Tuple[int, ...]
    order: Optional[int]
    wers: np.ndarray = field(repr=False)
    cv_orders: Tuple[Optional[int], ...]
    cv_errors: np.ndarray = field(repr=False)
    cv_wer: float
    cv_wer_exact: float
    cv_wer_each: np.ndarray = field(repr=False)
    p_better: Optional[float]

    def to_dict(self) -> Dict[str, object]:
        """tune.json's ``history_merging`` block (``max_ngram_order`` null: exact; what
        ``score --weights tune.json`` uses)."""
        return {"order_budget": self.budget, "max_ngram_order": self.order, "wer": float(self.wers[self._row()]),
                "wer_exact": float(self.wers[0]),
                "per_order": {str(k): {"wer": float(w), "cv_wer": float(c)}
                              for k, w, c in zip(self.orders, self.wers[1:], self.cv_wer_each)},
                "cross_validation": {"wer": self.cv_wer, "wer_exact": self.cv_wer_exact,
                                     "per_fold_max_ngram_order": list(self.cv_orders),
                                     "p_better_than_exact": self.p_better}}

    def _row(self) -> int:
        return 0 if self.order is None else self.orders.index(self.order) + 1

    def lines(self) -> List[str]:
        """Printable lines."""
        chosen = "exact scoring" if self.order is None else f"--max-ngram-order {self.order}"
        out = [f"history merging (WER budget {self.budget:g}): {chosen}: WER {self.wers[self._row()]:.2f}% "
               f"(exact: {self.wers[0]:.2f}%)",
               f"  cross-validated: WER {self.cv_wer:.2f}% (exact: {self.cv_wer_exact:.2f}%), per fold "
               + ", ".join("exact" if k is None else str(k) for k in self.cv_orders)]
        if self.p_better is not None:
            out[-1] += f", P(better than exact) = {self.p_better:.4f}"
        return out


def tune_order(data: TuneData, costs: OrderCosts, weights: Weights, cv: CrossValidation, budget: float,
               replications: int = 0, seed: int = 0) -> OrderTune:
    """The order of ``costs`` chosen on ``data`` at ``weights`` (the dev-tuned point) and,
    by the folds of ``cv`` (each at its own tuned weights), the held-out WER with the
    order chosen on the other folds. ``budget`` >= 0 in WER points."""
    whole = order_errors(data, costs, weights)
    best = choose_order(whole, data.ref_words, budget)
    every = np.empty((len(costs.orders) + 1, data.num_utts), dtype=np.int64)  # held-out errors of each row
    cv_errors = np.empty(data.num_utts, dtype=np.int64)
    chosen: List[Optional[int]] = []
    for k, fold in enumerate(cv.per_fold):
        held = cv.fold_of_utt == k
        w = fold.tuned.best_weights()
        train = data.subset(~held)
        row = choose_order(order_errors(train, replace(costs, nn=_rows(costs.nn, data, ~held)), w),
                           train.ref_words, budget)
        test = order_errors(data.subset(held), replace(costs, nn=_rows(costs.nn, data, held)), w)
        every[:, held] = test
        cv_errors[held] = test[row]
        chosen.append(None if row == 0 else costs.orders[row - 1])
    p = improvement_probability(cv.utt_errors, cv_errors, replications, seed) if replications > 0 else None
    return OrderTune(budget, costs.orders, None if best == 0 else costs.orders[best - 1],
                     100.0 * whole.sum(1) / data.ref_words, tuple(chosen), cv_errors,
                     100.0 * cv_errors.sum() / data.ref_words, cv.wer,
                     100.0 * every[1:].sum(1) / data.ref_words, p)


def _rows(nn: np.ndarray, data: TuneData, utts: np.ndarray) -> np.ndarray:
    """The columns of ``nn`` [n, H] of the hypotheses of the utterances ``utts`` (bool [U])."""
    sizes = np.diff(data.offsets)
    return nn[:, np.repeat(utts, sizes)]
