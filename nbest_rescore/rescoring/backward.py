"""N-best sets as a backward LM reads them (``model_config.direction: backward``).

A backward model reads a document from its last utterance to its first, each
hypothesis word-reversed. :func:`reverse_nbest` builds that set (the utterances of
every document in reverse order, every hypothesis reversed; keys and costs unchanged)
together with the index maps back to the original set, so that the forward machinery
of :func:`~.history.rescore` (every scoring mode, every history policy) runs on it
unchanged: the history of utterance i becomes the 1-best of utterances n .. i+1 of its
document, each read reversed, and the hypothesis is scored as ``</s> rev(h) </s>``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..types import NbestSet


@dataclass(frozen=True)
class ReversedNbest:
    """An N-best set reversed for a backward model, with the maps to the original.

    nbest: the reversed set (U utterances, H hypotheses, documents in the original's
        first-seen order, each document's utterances last first, every hypothesis
        word-reversed).
    utt_index: int64 [U]: original utterance index of each reversed utterance.
    flat_index: int64 [H]: original flat row (:meth:`~nbest_rescore.types.NbestSet.flat`)
        of each flat row of the reversed set.
    """

    nbest: NbestSet
    utt_index: np.ndarray
    flat_index: np.ndarray

    def to_original(self, values: np.ndarray) -> np.ndarray:
        """Per-hypothesis values [H] of the reversed set in the original flat order."""
        out = np.empty_like(values)
        out[self.flat_index] = values
        return out


def reverse_nbest(nbest: NbestSet) -> ReversedNbest:
    """The set as a backward model reads it (see :class:`ReversedNbest`).

    Python work is per utterance and per hypothesis (tuple reversal), never per token
    in a loop of its own. Reversing twice gives the original lists back.
    """
    utts = nbest.utterances
    order = np.asarray([u for doc in nbest.documents() for u in reversed(doc)], dtype=np.int64)
    offsets = np.cumsum([0] + [len(u) for u in utts], dtype=np.int64)
    flat_index = (np.concatenate([np.arange(offsets[u], offsets[u + 1]) for u in order]) if len(order)
                  else np.zeros(0, dtype=np.int64))
    lists = tuple(dataclasses.replace(utts[u], hyps=tuple(tuple(h)[::-1] for h in utts[u].hyps)) for u in order)
    return ReversedNbest(NbestSet(lists, nbest.doc_source, nbest.source), order, flat_index)
