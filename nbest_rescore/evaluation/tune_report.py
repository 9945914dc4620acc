"""What ``tune`` reports besides the dev-tuned best point (docs/evaluation.md): the
per-utterance errors of the 1-bests (tuned, first pass = rank 1, cross-validated), the
cross-validated WER (:mod:`.folds`) and the bootstrap (:mod:`.bootstrap`). WER in percent.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..errors import DataError
from ..options import SearchOptions
from .bootstrap import BootstrapWer, bootstrap_wer, improvement_probability
from .folds import CrossValidation, Search, cross_validate
from .history_orders import OrderCosts, OrderTune, tune_order
from .selective import RULES, SelectiveTune, tune_skip
from .tune_data import TuneData
from .tune_result import TuneResult

#: The 1-bests of ``utterance_errors``, in the order they are printed.
SYSTEMS = (("dev_tuned", "dev-tuned best"), ("first_pass", "first pass"), ("cross_validated", "cross-validated"))


@dataclass(frozen=True)
class UtteranceErrors:
    """Per-utterance word errors of the 1-bests of a tune run (tune.json's
    ``utterance_errors``), utterances in set order.

    Attributes:
        ids: the U utterance ids.
        ref_words: int64 [U] reference words.
        systems: name -> int64 [U] word errors of that 1-best: ``dev_tuned`` (at the
            best point), ``first_pass`` (rank 1) and, with folds, ``cross_validated``.
    Raises:
        ValueError: (on construction) vectors whose length is not U.
    """

    ids: Tuple[str, ...]
    ref_words: np.ndarray = field(repr=False)
    systems: Mapping[str, np.ndarray] = field(repr=False)

    def __post_init__(self):
        bad = {k: len(v) for k, v in (("ref_words", self.ref_words), *self.systems.items()) if len(v) != len(self.ids)}
        if bad:
            raise ValueError(f"UtteranceErrors: {len(self.ids)} ids but vector lengths {bad}")

    def to_dict(self) -> Dict[str, list]:
        """``{"ids": [...], "ref_words": [...], "<system>": [...], ...}`` (int lists)."""
        return {"ids": list(self.ids), "ref_words": [int(x) for x in self.ref_words],
                **{k: [int(x) for x in v] for k, v in self.systems.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, list], source: str = "utterance_errors") -> "UtteranceErrors":
        """The inverse of :meth:`to_dict`. Raises DataError for a malformed block."""
        try:
            ids = tuple(str(u) for u in d["ids"])
            words = np.asarray(d["ref_words"], dtype=np.int64)
            systems = {k: np.asarray(v, dtype=np.int64) for k, v in d.items() if k not in ("ids", "ref_words")}
            return cls(ids, words, systems)
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{source}: malformed 'utterance_errors' block ({exc}); rewrite it with "
                            f"'nbest-rescore tune --out'") from None


@dataclass(frozen=True)
class TuneReport:
    """The additions to a :class:`~.tune_result.TuneResult`: ``utterances`` (per-utterance
    errors), ``cross_validation`` (None without folds) and ``bootstrap`` (system name ->
    :class:`~.bootstrap.BootstrapWer`; empty without replications) with
    ``p_better_than_first_pass`` (system name -> probability in [0, 1]), and
    ``selective`` (``--skip-budget``: one :class:`~.selective.SelectiveTune` per rule of
    :data:`~.selective.RULES`, :mod:`.selective`; else empty) and ``history_merging``
    (``--order-budget``: :class:`~.history_orders.OrderTune`; else None)."""

    utterances: UtteranceErrors
    cross_validation: Optional[CrossValidation] = None
    bootstrap: Mapping[str, BootstrapWer] = field(default_factory=dict)
    p_better_than_first_pass: Mapping[str, float] = field(default_factory=dict)
    selective: Tuple[SelectiveTune, ...] = ()
    history_merging: Optional[OrderTune] = None

    def to_dict(self) -> Dict[str, object]:
        """tune.json's ``cross_validation``, ``bootstrap`` and ``utterance_errors`` blocks
        (docs/evaluation.md)."""
        out: Dict[str, object] = {}
        if self.cross_validation is not None:
            out["cross_validation"] = self.cross_validation.to_dict()
        if self.bootstrap:
            first = next(iter(self.bootstrap.values()))
            out["bootstrap"] = {"replications": first.replications, "seed": first.seed,
                                **{k: b.to_dict() for k, b in self.bootstrap.items()},
                                "p_better_than_first_pass": dict(self.p_better_than_first_pass)}
        if self.selective:
            out["selective"] = {t.option: t.to_dict() for t in self.selective}
        if self.history_merging is not None:
            out["history_merging"] = self.history_merging.to_dict()
        out["utterance_errors"] = self.utterances.to_dict()
        return out

    def lines(self) -> List[str]:
        """Printable lines: the cross-validation, then the bootstrap."""
        out = self.cross_validation.lines() if self.cross_validation is not None else []
        if self.bootstrap:
            first = next(iter(self.bootstrap.values()))
            out.append(f"bootstrap over {first.utterances} utterances ({first.replications} replications, seed "
                       f"{first.seed}; 95% interval = mean -+ 1.96 sd as compute-wer-bootci, percentile = 2.5-97.5%):")
            labels = dict(SYSTEMS)
            out += [f"  {labels[k] + ':':<17} {b.describe()}" for k, b in self.bootstrap.items()]
            out += [f"  P({labels[k]} better than first pass) = {p:.4f}"
                    for k, p in self.p_better_than_first_pass.items()]
        out += [line for t in self.selective for line in t.lines()]
        return out + (self.history_merging.lines() if self.history_merging is not None else [])


@dataclass(frozen=True)
class AssessedTune(TuneResult):
    """What ``tune`` returns: a :class:`~.tune_result.TuneResult` and its ``report``
    (:class:`TuneReport`, set by :func:`assess`; None only when built without one)."""

    report: Optional[TuneReport] = field(default=None, compare=False, repr=False)

    def to_dict(self) -> Dict[str, object]:
        """:meth:`TuneResult.to_dict <.tune_result.TuneResult.to_dict>`, then the
        :attr:`report`'s blocks (cross_validation, bootstrap, utterance_errors, ...)."""
        d = super().to_dict()
        if self.report is not None:
            d.update(self.report.to_dict())
        return d


def assess(result: TuneResult, data: TuneData, search: Search, options: SearchOptions,
           order_costs: Optional[OrderCosts] = None) -> AssessedTune:
    """``result`` (what ``search(data)`` returned) with its :class:`TuneReport`, as an
    :class:`AssessedTune`, by ``options``: ``folds`` K >= 2 cross-validates
    (:func:`~.folds.cross_validate`, dealt by ``fold_seed``); ``replications`` > 0
    bootstraps (seeded by ``seed``); ``skip_budget`` (with folds) tunes selective
    rescoring (:func:`~.selective.tune_skip`); ``order_costs`` with ``order_budget``
    (and folds) the history-merging order (:func:`~.history_orders.tune_order`).
    Raises DataError as :func:`~.folds.cross_validate`."""
    folds, replications, seed = options.folds, options.replications, options.seed
    systems = {"dev_tuned": data.errors[data.one_best(result.best_weights())],
               "first_pass": data.errors[data.first_pass()]}
    cv = cross_validate(data, search, folds, options.fold_seed) if folds >= 2 else None
    if cv is not None:
        systems["cross_validated"] = cv.utt_errors
    drawn = systems.items() if replications > 0 else ()  # (no replications: no bootstrap)
    boots = {k: bootstrap_wer(e, data.utt_ref_words, replications, seed) for k, e in drawn}
    better = {k: improvement_probability(systems["first_pass"], e, replications, seed)
              for k, e in drawn if k != "first_pass"}
    utts = UtteranceErrors(data.utt_ids, data.utt_ref_words, systems)
    selective = ()
    if options.skip_budget is not None and cv is not None:
        selective = tuple(tune_skip(data, result.best_weights(), cv, options.skip_budget, replications, seed, rule)
                          for rule in RULES)
    merging = None
    if order_costs is not None and options.order_budget is not None and cv is not None:
        merging = tune_order(data, order_costs, result.best_weights(), cv, options.order_budget, replications,
                             seed)
    report = TuneReport(utts, cv, boots, better, selective, merging)
    return AssessedTune(**{f.name: getattr(result, f.name) for f in fields(TuneResult)}, report=report)
