"""Spans: runs of whole documents, the unit in which ``score`` and ``tune`` read,
score and write large N-best sets (peak memory follows the largest span).

The 1-best history never crosses a document and a document's utterances are
consecutive (the readers check it), so :func:`plan_spans` can cut a set into spans of
whole documents. An N-best *source* has an :class:`NbestIndex` (``index``) and
``spans(max_hyps)`` yielding the spans as :class:`~nbest_rescore.types.NbestSet`:
:class:`SetSource` for a set in memory, :class:`StreamSource` for a reader's generator
(the input read once, every list checked as it comes and kept in a temporary file:
:func:`open_stream`); so a stream (``-``, ``COMMAND |``) reads as a file does, and
every error comes before long work starts.
"""
from __future__ import annotations

import pickle
import tempfile
from dataclasses import dataclass, field
from itertools import groupby
from operator import attrgetter
from typing import IO, Callable, Iterable, Iterator, List, Optional, Protocol, Sequence, Tuple

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
    """The spans of :func:`plan_spans` from ``(document, hypotheses)`` pairs in order, each a list of documents."""
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
        other_scores: ``(name, first line)`` of the scores the lists carry beyond the
            costs the reader keeps (JSON Lines), which no writer keeps.
    """

    utt_ids: Tuple[str, ...]
    doc_ids: Tuple[str, ...]
    sizes: Tuple[int, ...]
    doc_source: str = "utt2doc"
    source: str = ""
    total_scores: bool = False
    other_scores: Tuple[Tuple[str, int], ...] = ()

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
        if max_hyps is None or sum(1 for _ in groupby(u.doc_id for u in nb.utterances)) != len(nb.documents()):
            yield nb
            return
        yield from iter_spans(nb.utterances, max_hyps, nb.doc_source, nb.source, nb.total_scores)


def iter_spans(lists: Iterable[NbestList], max_hyps: Optional[int], doc_source: str = "utt2doc",
               source: str = "", total_scores: bool = False) -> Iterator[NbestSet]:
    """The spans of :func:`plan_spans` taken from lists read in order (their documents
    consecutive, as the readers check), holding one span and the document being read, each
    an :class:`~nbest_rescore.types.NbestSet` with ``doc_source``, ``source`` and
    ``total_scores``. Raises ValueError for ``max_hyps`` < 1."""
    docs = (list(utts) for _, utts in groupby(lists, key=attrgetter("doc_id")))
    for span in _cut(((doc, sum(len(u) for u in doc)) for doc in docs), max_hyps):
        yield NbestSet(tuple(u for doc in span for u in doc), doc_source, source, total_scores)


@dataclass(frozen=True)
class StreamSource:
    """Lists read once, as a reader checked them (:func:`open_stream`), kept in an unnamed
    temporary file (``spool``: the pickled lists in order) and read back span by span."""

    index: NbestIndex
    spool: IO[bytes] = field(repr=False)

    def _lists(self) -> Iterator[NbestList]:
        pos = 0
        for _ in range(len(self.index)):
            self.spool.seek(pos)
            u = pickle.load(self.spool)
            pos = self.spool.tell()
            yield u

    def spans(self, max_hyps: Optional[int]) -> Iterator[NbestSet]:
        """The spans (:func:`iter_spans`), read from the temporary file."""
        ix = self.index
        return iter_spans(self._lists(), max_hyps, ix.doc_source, ix.source, ix.total_scores)


def open_stream(lists: Iterable[NbestList], source: str, meta: Callable[[], dict]) -> StreamSource:
    """The one pass over an input: the lists of a reader's generator (which checks
    everything and logs its line), each kept in a temporary file as it comes, counted
    into the :class:`NbestIndex` of a :class:`StreamSource`; ``meta()``, called after the
    last list: the index's ``doc_source``, ``total_scores`` and ``other_scores``. Memory
    holds the index and one list; the file takes about the lists' size on disk, in
    ``TMPDIR``, and goes when the source does. Raises DataError as the reader, or the
    temporary file cannot be written."""
    spool = _spool(source, tempfile.TemporaryFile, prefix="nbest-rescore-lists-")
    try:
        rows = []
        for u in lists:
            _spool(source, pickle.dump, u, spool, protocol=pickle.HIGHEST_PROTOCOL)
            rows.append((u.utt_id, u.doc_id, len(u)))
        _spool(source, spool.flush)
    except BaseException:
        spool.close()
        raise
    utts, docs, sizes = tuple(zip(*rows)) or ((), (), ())
    return StreamSource(NbestIndex(utts, docs, sizes, source=source, **meta()), spool)


def _spool(source: str, write: Callable, *args, **kwargs):
    """``write(*args, **kwargs)`` on the temporary file of :func:`open_stream`. Raises
    DataError when it cannot be made or written."""
    try:
        return write(*args, **kwargs)
    except OSError as exc:
        raise DataError(f"{source}: cannot keep the lists read in a temporary file in {tempfile.gettempdir()} "
                        f"({exc.strerror or exc}); free space there, or set TMPDIR to a folder with room") from None
