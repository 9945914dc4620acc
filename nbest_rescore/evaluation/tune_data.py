"""What the weight searches need of the N-best lists (:class:`TuneData`: costs, word
errors and documents of every hypothesis, no words), and :func:`tune_data`, which
builds it from the lists, their references and the NN costs (negated natural logs)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import DataError, examples
from ..names import unique_names
from ..rescoring.combine import Weights, flat_scores, segment_argmax
from ..types import NbestSet
from .wer import nbest_errors, utterance_ref_words

NnCosts = Union[None, Mapping[str, float], Sequence[Mapping[str, float]]]


@dataclass(frozen=True)
class TuneData:
    """What the weight search needs of every hypothesis, and nothing of its words: H
    hypotheses of U utterances, in set order.

    Attributes:
        offsets: int64 [U + 1]; utterance u owns rows ``offsets[u]:offsets[u + 1]``.
        ac_cost, lm_cost, graph_cost: float64 [H] acoustic, n-gram and graph costs
            (negated natural logs; the names of :class:`~nbest_rescore.types.FlatNbest`,
            so :func:`~nbest_rescore.rescoring.combine.flat_scores` takes it).
        num_words: int64 [H] words per hypothesis (``</s>`` not counted).
        nn: float64 [K, H] the NN costs of the K neural LMs, or None (K = 0).
        errors: int64 [H] word errors of each hypothesis against its reference
            (edit distance).
        ref_words: reference words of all the utterances.
        names: the K LM names.
        doc_index: int64 [U] the document of each utterance, numbered 0, 1, ... in
            first-seen order over the whole set (:meth:`subset` keeps the numbers).
        utt_ref_words: int64 [U] reference words of each utterance (sum = ``ref_words``).
        utt_ids: the U utterance ids, in set order.
    """

    offsets: np.ndarray
    ac_cost: np.ndarray
    lm_cost: np.ndarray
    graph_cost: np.ndarray
    num_words: np.ndarray
    nn: Optional[np.ndarray]
    errors: np.ndarray
    ref_words: int
    names: Tuple[str, ...]
    doc_index: np.ndarray
    utt_ref_words: np.ndarray
    utt_ids: Tuple[str, ...]

    @classmethod
    def of(cls, nbest: NbestSet, refs, nn: Optional[np.ndarray], names: Tuple[str, ...],
           part: bool = False) -> "TuneData":
        """The data of the lists ``nbest`` with the NN costs ``nn`` [K, H] (or None).
        ``part``: ``nbest`` is a span of a set (its references may all be empty;
        :func:`~.wer.nbest_errors`)."""
        flat = nbest.flat()
        errors, offsets, ref_words = nbest_errors(nbest, refs, flat, part=part)
        doc_index = np.empty(len(nbest), dtype=np.int64)
        for d, utts in enumerate(nbest.documents()):
            doc_index[utts] = d
        return cls(offsets, flat.ac_cost, flat.lm_cost, flat.graph_cost, flat.num_words, nn, errors, ref_words,
                   tuple(names), doc_index, utterance_ref_words(nbest.utt_ids, refs), tuple(nbest.utt_ids))

    @classmethod
    def concat(cls, parts: Sequence["TuneData"], names: Tuple[str, ...]) -> "TuneData":
        """The parts (spans of whole documents of one set, in order) as one; the
        documents are renumbered over the whole set."""
        def cat(name):
            return np.concatenate([getattr(p, name) for p in parts])

        ends = np.cumsum([0] + [int(p.offsets[-1]) for p in parts])
        offsets = np.concatenate([[0]] + [p.offsets[1:] + e for p, e in zip(parts, ends[:-1])]).astype(np.int64)
        nn = None if parts[0].nn is None else np.concatenate([p.nn for p in parts], axis=1)
        docs = np.cumsum([0] + [int(p.doc_index.max()) + 1 if len(p.doc_index) else 0 for p in parts])
        doc_index = np.concatenate([p.doc_index + d for p, d in zip(parts, docs[:-1])]).astype(np.int64)
        return cls(offsets, cat("ac_cost"), cat("lm_cost"), cat("graph_cost"), cat("num_words"), nn, cat("errors"),
                   sum(p.ref_words for p in parts), tuple(names), doc_index, cat("utt_ref_words"),
                   tuple(u for p in parts for u in p.utt_ids))

    def subset(self, utt_mask) -> "TuneData":
        """The utterances where ``utt_mask`` (bool [U]) is True, in set order, with all
        their hypotheses; document numbers are kept. Raises ValueError for a mask of
        another length or one that keeps no utterance."""
        mask = np.asarray(utt_mask, dtype=bool)
        if mask.shape != (self.num_utts,) or not mask.any():
            raise ValueError(f"TuneData.subset: expected a bool [{self.num_utts}] mask keeping >= 1 utterance, "
                             f"got shape {mask.shape} with {int(mask.sum())} kept")
        keep = np.flatnonzero(mask)
        sizes = np.diff(self.offsets)[keep]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        rows = np.repeat(self.offsets[keep] - offsets[:-1], sizes) + np.arange(offsets[-1])
        return TuneData(offsets, self.ac_cost[rows], self.lm_cost[rows], self.graph_cost[rows],
                        self.num_words[rows], None if self.nn is None else self.nn[:, rows], self.errors[rows],
                        int(self.utt_ref_words[keep].sum()), self.names, self.doc_index[keep],
                        self.utt_ref_words[keep], tuple(self.utt_ids[u] for u in keep))

    @property
    def num_utts(self) -> int:
        """U, the number of utterances."""
        return len(self.offsets) - 1

    def nn_arg(self):
        """The NN costs as :func:`~nbest_rescore.rescoring.combine.flat_scores` takes
        them: None (K = 0), float64 [H] (K = 1) or the K rows of [K, H]."""
        k = len(self.names)
        return None if k == 0 or self.nn is None else (self.nn[0] if k == 1 else list(self.nn))

    def one_best(self, weights: Weights) -> np.ndarray:
        """int64 [U] flat indices of each utterance's best hypothesis at ``weights``
        (ties to the earliest rank)."""
        return segment_argmax(flat_scores(self, weights, self.nn_arg()), self.offsets)

    def first_pass(self) -> np.ndarray:
        """int64 [U] flat indices of the rank-1 hypotheses (the decoder's 1-best)."""
        return self.offsets[:-1].copy()

    def __len__(self) -> int:
        return len(self.errors)


def missing_keys_error(label: str, missing: Sequence[str], total: int) -> DataError:
    """The error for NN costs that lack hypotheses of the lists."""
    return DataError(f"{label} lacks {len(missing)} of {total} hypothesis keys: "
                     f"{examples(missing)}; score every hypothesis of the lists with the neural LM")


def tune_data(nbest, refs, nn_cost: NnCosts = None, names: Optional[Sequence[str]] = None,
              labels: Optional[Sequence[str]] = None) -> TuneData:
    """What the searches need of the lists ``nbest`` (an :class:`NbestSet`; a
    :class:`TuneData` is returned as it is) with references ``refs`` and NN costs
    ``nn_cost`` (as :func:`~.tuning.tune_grid` takes them): flat arrays, NN costs
    [K, H] in key order, per-hypothesis errors.

    Raises:
        DataError: as :func:`~.tuning.tune_grid` (no utterances, references or NN costs
            missing, non-finite costs).
    """
    if isinstance(nbest, TuneData):
        return nbest
    if len(nbest) == 0:
        raise DataError("tune: the N-best set has no utterances")
    costs = [] if nn_cost is None else [nn_cost] if isinstance(nn_cost, Mapping) else list(nn_cost)
    names = unique_names(names if names is not None else ["nn"] * len(costs))
    if len(names) != len(costs):
        raise ValueError(f"tune: {len(costs)} NN cost maps but {len(names)} names")
    if labels is None:  # how messages name each NN cost map
        labels = ["nn_cost"] if len(names) == 1 else [f"nn_cost {n}" for n in names]
    labels = list(labels)
    flat = nbest.flat()  # per-hypothesis arrays in set order, built once
    keys = flat.keys
    rows = []
    for cost, label in zip(costs, labels):
        missing = [k for k in keys if k not in cost]
        if missing:
            raise missing_keys_error(label, missing, len(keys))
        rows.append(np.array([cost[k] for k in keys], dtype=np.float64))
    for name, arr in (*zip(labels, rows), *((n, getattr(flat, n)) for n in ("ac_cost", "lm_cost", "graph_cost"))):
        if not np.all(np.isfinite(arr)):
            bad = [k for k, v in zip(keys, arr) if not np.isfinite(v)]
            raise DataError(f"{name} has non-finite values for {examples(bad)}")
    return TuneData.of(nbest, refs, np.vstack(rows) if rows else None, names)
