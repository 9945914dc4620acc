"""K-fold cross-validation of the weight search by documents: the WER of weights tuned
on other data, from the tuning set alone. How documents are dealt into folds and how
the held-out 1-bests give the cross-validated WER (percent): docs/evaluation.md
(``tune --folds K``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Tuple

import numpy as np

from ..errors import DataError
from .tune_data import TuneData
from .tune_result import TuneResult

Search = Callable[[TuneData], TuneResult]


def document_folds(num_docs: int, folds: int, seed: int = 0) -> np.ndarray:
    """int64 [D]: the fold (0 .. K-1) of each document, dealt as docs/evaluation.md says.
    Raises DataError: ``folds < 2`` or more folds than documents (naming ``--folds``)."""
    if folds < 2:
        raise DataError(f"--folds {folds}: cross-validation needs at least 2 folds")
    if folds > num_docs:
        raise DataError(f"--folds {folds}: the lists have only {num_docs} documents, and each fold needs one; "
                        f"give --folds between 2 and {num_docs}")
    perm = np.random.default_rng(seed).permutation(num_docs)
    out = np.empty(num_docs, dtype=np.int64)
    out[perm] = np.arange(num_docs) % folds
    return out


@dataclass(frozen=True)
class HeldOutFold:
    """One fold: its documents, utterances and reference words, the word errors and WER
    (percent) of its 1-best at ``tuned``'s best weights, and ``tuned``: the search on
    the other folds."""

    documents: int
    utterances: int
    ref_words: int
    errors: int
    tuned: TuneResult = field(repr=False)

    @property
    def wer(self) -> float:
        """Held-out WER in percent (NaN when the fold's references are all empty)."""
        return self.errors / self.ref_words * 100.0 if self.ref_words else float("nan")

    def to_dict(self) -> Dict[str, object]:
        """One ``per_fold`` entry of tune.json's ``cross_validation`` (docs/evaluation.md)."""
        return {"documents": self.documents, "utterances": self.utterances, "ref_words": self.ref_words,
                "errors": self.errors, "wer": self.wer, "tuned_wer": self.tuned.best.wer,
                "weights": self.tuned.weights_block()}


@dataclass(frozen=True)
class CrossValidation:
    """The cross-validated search.

    Attributes:
        folds: K; seed: the dealing seed.
        per_fold: the K folds in fold order.
        fold_of_utt: int64 [U] the fold of each utterance (set order).
        chosen: int64 [U] flat index of each utterance's held-out 1-best.
        utt_errors: int64 [U] word errors of those 1-bests.
        ref_words: reference words of all the utterances.
    """

    folds: int
    seed: int
    per_fold: Tuple[HeldOutFold, ...]
    fold_of_utt: np.ndarray = field(repr=False)
    chosen: np.ndarray = field(repr=False)
    utt_errors: np.ndarray = field(repr=False)
    ref_words: int

    @property
    def wer(self) -> float:
        """The pooled held-out WER in percent (errors summed / reference words summed)."""
        return float(self.utt_errors.sum()) / self.ref_words * 100.0

    def to_dict(self) -> Dict[str, object]:
        """tune.json's ``cross_validation`` block: folds, seed, wer, per_fold."""
        return {"folds": self.folds, "seed": self.seed, "wer": self.wer,
                "per_fold": [f.to_dict() for f in self.per_fold]}

    def lines(self) -> List[str]:
        """Printable lines: the pooled WER, then one per fold."""
        out = [f"cross-validated WER {self.wer:.2f}% ({self.folds} folds of whole documents, fold seed {self.seed}: "
               f"each fold's 1-best at the weights tuned on the other folds)"]
        for i, f in enumerate(self.per_fold, 1):
            out.append(f"  fold {i}: WER {f.wer:.2f}% on {f.documents} documents, {f.utterances} utterances, "
                       f"{f.ref_words} words; tuned on the others: WER {f.tuned.best.wer:.2f}% at "
                       f"{f.tuned.describe(f.tuned.best)}")
        return out


def cross_validate(data: TuneData, search: Search, folds: int, seed: int = 0) -> CrossValidation:
    """K-fold cross-validation of ``search`` (run on each fold's complement, e.g.
    ``lambda d: tune_grid(d, options)``) over ``data`` by
    documents, ``folds`` K >= 2 dealt with ``seed``; WERs in percent.

    Raises DataError: K < 2, K above the number of documents, or the other folds of
    some fold hold no reference word."""
    docs = np.unique(data.doc_index)
    fold_of_doc = document_folds(len(docs), folds, seed)
    fold_of_utt = fold_of_doc[np.searchsorted(docs, data.doc_index)]
    chosen = np.empty(data.num_utts, dtype=np.int64)
    per_fold = []
    for k in range(folds):
        held = fold_of_utt == k
        train = data.subset(~held)
        if train.ref_words == 0:
            raise DataError(f"--folds {folds}: the folds other than fold {k + 1} have no reference words (their "
                            f"references are all empty); use fewer folds or another --fold-seed")
        tuned = search(train)
        test = data.subset(held)
        picked = test.one_best(tuned.best_weights())
        chosen[held] = picked + data.offsets[:-1][held] - test.offsets[:-1]
        per_fold.append(HeldOutFold(documents=int((fold_of_doc == k).sum()), utterances=test.num_utts,
                                    ref_words=test.ref_words, errors=int(test.errors[picked].sum()), tuned=tuned))
    return CrossValidation(folds=folds, seed=seed, per_fold=tuple(per_fold), fold_of_utt=fold_of_utt, chosen=chosen,
                           utt_errors=data.errors[chosen], ref_words=data.ref_words)
