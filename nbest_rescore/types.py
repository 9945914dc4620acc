"""Records shared by I/O, rescoring and evaluation.

Units: every ``*_cost`` array holds negated natural-log values (Kaldi convention,
larger = worse); scores (larger = better) are ``-cost``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

Words = Tuple[str, ...]


@dataclass(frozen=True)
class NbestList:
    """The N-best list of one utterance, hypotheses in first-pass rank order.

    Attributes:
        utt_id: utterance id (``<docid>-<index>`` in the benchmark).
        doc_id: document the utterance belongs to (1-best history is carried within it).
        keys: hypothesis keys ``<utt_id>-<n>``, length N.
        hyps: the N hypotheses as word tuples (an empty tuple is a valid hypothesis).
        ac_cost: float64 [N], negated natural-log acoustic likelihood.
        lm_cost: float64 [N], negated natural-log n-gram probability incl. ``</s>``.
        graph_cost: float64 [N], any other LM-scaled cost that is not the n-gram
            (Kaldi's ``lmwt.nolm``); zeros when the lists have none.
    """

    utt_id: str
    doc_id: str
    keys: Tuple[str, ...]
    hyps: Tuple[Words, ...]
    ac_cost: np.ndarray
    lm_cost: np.ndarray
    graph_cost: np.ndarray

    def __post_init__(self):
        n = len(self.keys)
        if n == 0:
            raise ValueError(f"utterance {self.utt_id}: an N-best list needs >= 1 hypothesis")
        for name in ("hyps", "ac_cost", "lm_cost", "graph_cost"):
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"utterance {self.utt_id}: {name} has {len(getattr(self, name))} "
                    f"entries, keys have {n}")

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def num_words(self) -> np.ndarray:
        """int64 [N]: words per hypothesis (``</s>`` not counted)."""
        return np.array([len(h) for h in self.hyps], dtype=np.int64)


@dataclass(frozen=True)
class NbestSet:
    """All N-best lists of a data set, in spoken order (documents, then utterances).

    ``doc_source`` says where the grouping came from: ``utt2doc``, ``utt2spk``,
    ``document fields`` (a JSON Lines file's ``document``), ``file`` (a plain list
    without ``utt2doc``: the whole file is one document) or ``none`` (one document per
    utterance).

    ``total_scores``: each hypothesis has one first-pass total score (an end-to-end
    decoder's: NeMo, ESPnet, JSON Lines ``total_cost``), held as ``ac_cost`` = the total
    cost (-total log score) with ``lm_cost`` = ``graph_cost`` = 0: there is no n-gram
    term, so ``tune`` does not search the interpolation weight (docs/scoring.md).
    """

    utterances: Tuple[NbestList, ...]
    doc_source: str = "utt2doc"
    source: str = ""
    total_scores: bool = False

    def __len__(self) -> int:
        return len(self.utterances)

    def documents(self) -> List[List[int]]:
        """Utterance indices grouped by document, documents in first-seen order."""
        order: Dict[str, List[int]] = {}
        for i, u in enumerate(self.utterances):
            order.setdefault(u.doc_id, []).append(i)
        return list(order.values())

    @property
    def utt_ids(self) -> List[str]:
        """Utterance ids in set order."""
        return [u.utt_id for u in self.utterances]

    def num_hyps(self) -> int:
        """Total number of hypotheses over all utterances."""
        return sum(len(u) for u in self.utterances)

    def flat(self, ngram_cost: Optional[np.ndarray] = None) -> "FlatNbest":
        """The per-hypothesis arrays of the whole set (see :class:`FlatNbest`). Raises
        ValueError when ``ngram_cost`` is not [H]."""
        u = self.utterances
        offsets = np.cumsum([0] + [len(x) for x in u], dtype=np.int64)

        def cat(name):
            return np.concatenate([np.asarray(getattr(x, name), dtype=np.float64) for x in u]) if u else np.zeros(0)

        lm = cat("lm_cost")
        if ngram_cost is not None:
            ngram_cost = np.asarray(ngram_cost, dtype=np.float64)
            if ngram_cost.shape != lm.shape:
                raise ValueError(f"ngram_cost has shape {ngram_cost.shape}, the lists have {lm.shape[0]} hypotheses")
            lm = ngram_cost
        nwords = np.concatenate([x.num_words for x in u]) if u else np.zeros(0, dtype=np.int64)
        return FlatNbest(offsets, cat("ac_cost"), lm, cat("graph_cost"), nwords,
                         tuple(h for x in u for h in x.hyps), tuple(k for x in u for k in x.keys))


@dataclass(frozen=True)
class FlatNbest:
    """Every hypothesis of an :class:`NbestSet` in set order (utterances, then rank).

    Utterance ``u`` owns the flat rows ``offsets[u]:offsets[u + 1]``; H hypotheses and
    U utterances in all. Costs are negated natural logs.

    Attributes:
        offsets: int64 [U + 1], ``offsets[-1] == H``.
        ac_cost, lm_cost, graph_cost: float64 [H] (``lm_cost`` replaced by the
            ``ngram_cost`` given to :meth:`NbestSet.flat`, e.g. costs recomputed from an ARPA file).
        num_words: int64 [H] words per hypothesis (``</s>`` not counted).
        hyps: the H word tuples; keys: the H hypothesis keys.
    """

    offsets: np.ndarray
    ac_cost: np.ndarray
    lm_cost: np.ndarray
    graph_cost: np.ndarray
    num_words: np.ndarray
    hyps: Tuple[Words, ...]
    keys: Tuple[str, ...]

    def __len__(self) -> int:
        return len(self.keys)
