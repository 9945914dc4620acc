"""Spans: runs of whole documents, the unit in which ``score`` and ``tune`` read,
score and write large N-best sets (peak memory follows the largest span).

The 1-best history never crosses a document and a document's utterances are
consecutive (the readers check it), so :func:`plan_spans` can cut a set into spans of
whole documents. An N-best *source* has an :class:`NbestIndex` (``index``) and
``spans(max_hyps)`` yielding the spans as :class:`~nbest_rescore.types.NbestSet`:
:class:`SetSource` for a set in memory, :class:`StreamSource` for a reader's generator
(:func:`~.kaldi_nbest.iter_kaldi_nbest`, :func:`~.plain_nbest.iter_plain_nbest`): one
checking pass, then one read per pass over the spans (:func:`iter_spans`).
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby
from operator import attrgetter
from typing import Callable, Iterable, Iterator, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from ..errors import DataError
from ..types import NbestList, NbestSet

__all__ = ["NbestIndex", "NbestSource", "SetSource", "StreamSource", "iter_spans", "open_stream", "plan_spans"]


def plan_spans(doc_sizes: Sequence[int], max_hyps: Optional[int]) -> List[Tuple[int, int]]:
    """Cut documents (in order) into spans of whole documents.

    Each span takes the next document, then further documents while its hypotheses
    stay within ``max_hyps``; a document of more than ``max_hyps`` hypotheses is a
    span of its own (a document is never cut).

    Args:
        doc_sizes: hypotheses of each document, in order.
        max_hyps: the hypothesis budget of a span (>= 1), or None for one span of
            every document.
    Returns:
        ``[(first_doc, end_doc), ...]`` (end exclusive) covering every document in
        order; ``[]`` for no documents.
    Raises:
        ValueError: ``max_hyps`` < 1.
    """
    return [(span[0], span[-1] + 1) for span in _cut(enumerate(doc_sizes), max_hyps)]


def _cut(docs: Iterable[Tuple[object, int]], max_hyps: Optional[int]) -> Iterator[list]:
    """The spans of :func:`plan_spans` from ``(document, hypotheses)`` pairs in order,
    each a list of documents. Raises ValueError for ``max_hyps`` < 1."""
    if max_hyps is not None and max_hyps < 1:
        raise ValueError(f"max_hyps must be >= 1 or None, got {max_hyps}")
    span: list = []
    size = 0
    for doc, n in docs:
        if span and max_hyps is not None and size + n > max_hyps:
            yield span
            span, size = [], 0
        span.append(doc)
        size += n
    if span:
        yield span


@dataclass(frozen=True)
class NbestIndex:
    """What a set holds, one entry per utterance (no hypotheses): U utterances in set
    order, their documents consecutive.

    Attributes:
        utt_ids: the U utterance ids.
        doc_ids: the U document ids.
        sizes: the U hypothesis counts (ints).
        doc_source: where the documents came from (see :class:`~nbest_rescore.types.NbestSet`).
        source: the path read (or a description).
        total_scores: the lists hold one total score per hypothesis
            (:class:`~nbest_rescore.types.NbestSet`).
    """

    utt_ids: Tuple[str, ...]
    doc_ids: Tuple[str, ...]
    sizes: Tuple[int, ...]
    doc_source: str = "utt2doc"
    source: str = ""
    total_scores: bool = False

    def __len__(self) -> int:
        return len(self.utt_ids)

    def num_hyps(self) -> int:
        """Hypotheses over all utterances."""
        return sum(self.sizes)

    def doc_bounds(self) -> np.ndarray:
        """int64 [D + 1]: utterance index where each document starts, then U."""
        starts = [i for i in range(len(self.doc_ids)) if i == 0 or self.doc_ids[i] != self.doc_ids[i - 1]]
        return np.asarray(starts + [len(self.doc_ids)], dtype=np.int64)

    @classmethod
    def of(cls, nbest: NbestSet) -> "NbestIndex":
        """The index of a set in memory."""
        u = nbest.utterances
        return cls(tuple(x.utt_id for x in u), tuple(x.doc_id for x in u),
                   tuple(len(x) for x in u), nbest.doc_source, nbest.source, nbest.total_scores)


class NbestSource(Protocol):
    """N-best lists read span by span: ``index`` (one entry per utterance) and
    ``spans(max_hyps)``, the spans of whole documents (:func:`plan_spans`) in order,
    each an :class:`~nbest_rescore.types.NbestSet`."""

    @property
    def index(self) -> NbestIndex: ...

    def spans(self, max_hyps: Optional[int]) -> Iterator[NbestSet]: ...


def documents_contiguous(nbest: NbestSet) -> bool:
    """Whether the utterances of every document of ``nbest`` are consecutive (the
    readers guarantee it; a set built by hand may not)."""
    return sum(1 for _ in groupby(u.doc_id for u in nbest.utterances)) == len(nbest.documents())


@dataclass(frozen=True)
class SetSource:
    """A set already in memory as a source: its spans are slices of it. A set whose
    documents are not consecutive (built by hand) is one span, whatever the budget."""

    nbest: NbestSet

    @property
    def index(self) -> NbestIndex:
        return NbestIndex.of(self.nbest)

    def spans(self, max_hyps: Optional[int]) -> Iterator[NbestSet]:
        """The spans of at most ``max_hyps`` hypotheses (see :func:`plan_spans`), in order."""
        nb = self.nbest
        if max_hyps is None or not documents_contiguous(nb):
            yield nb
            return
        yield from iter_spans(nb.utterances, max_hyps, nb.doc_source, nb.source, nb.total_scores)


def iter_spans(lists: Iterable[NbestList], max_hyps: Optional[int], doc_source: str = "utt2doc",
               source: str = "", total_scores: bool = False) -> Iterator[NbestSet]:
    """The spans of :func:`plan_spans` taken from lists read in order (their documents
    consecutive, as the readers check): whole documents while a span's hypotheses stay
    within ``max_hyps`` (a larger document is a span of its own; None: one span).
    Holds one span and the document being read, each an
    :class:`~nbest_rescore.types.NbestSet` with ``doc_source``, ``source`` and ``total_scores``.
    Raises ValueError for ``max_hyps`` < 1."""
    docs = (list(utts) for _, utts in groupby(lists, key=attrgetter("doc_id")))
    for span in _cut(((doc, sum(len(u) for u in doc)) for doc in docs), max_hyps):
        yield NbestSet(tuple(u for doc in span for u in doc), doc_source, source, total_scores)


@dataclass(frozen=True)
class StreamSource:
    """Lists read from files, span by span: ``index`` from the checking pass, and
    ``read(quiet=True)`` (a reader's generator function) reading the files again.
    ``changed``: what the error says when the files no longer give the index."""

    index: NbestIndex
    read: Callable[..., Iterator[NbestList]]
    changed: str

    def _checked(self) -> Iterator[NbestList]:
        ix = self.index
        fix = "do not write them while scoring"
        try:
            n = 0
            for n, u in enumerate(self.read(quiet=True), start=1):
                if n > len(ix) or (u.utt_id, u.doc_id, len(u)) != (ix.utt_ids[n - 1], ix.doc_ids[n - 1],
                                                                    ix.sizes[n - 1]):
                    raise DataError(f"{self.changed} (the lists no longer match the first pass); {fix}")
                yield u
        except DataError as e:
            if str(e).startswith(self.changed):
                raise
            raise DataError(f"{self.changed}; {fix}: {e}") from None
        if n != len(ix):
            raise DataError(f"{self.changed} (they end after {n} of {len(ix)} utterances); {fix}")

    def spans(self, max_hyps: Optional[int]) -> Iterator[NbestSet]:
        """The spans (:func:`iter_spans`), the files read again.

        Raises:
            DataError: the files changed since the checking pass (or became malformed).
        """
        ix = self.index
        return iter_spans(self._checked(), max_hyps, ix.doc_source, ix.source, ix.total_scores)


def open_stream(read: Callable[..., Iterator[NbestList]], doc_source: str, source: str, changed: str,
                total_scores: bool = False) -> StreamSource:
    """The checking pass: count the lists of ``read()`` (a reader's generator function,
    which checks everything and logs its line) into the :class:`NbestIndex` of a
    :class:`StreamSource` (``total_scores``: see :class:`NbestIndex`). Raises DataError as the reader."""
    utts, docs, sizes = tuple(zip(*((u.utt_id, u.doc_id, len(u)) for u in read()))) or ((), (), ())
    return StreamSource(NbestIndex(utts, docs, sizes, doc_source, source, total_scores), read, changed)
