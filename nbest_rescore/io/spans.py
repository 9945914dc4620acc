"""Spans: runs of whole documents, the unit in which ``score`` and ``tune`` read,
score and write large N-best sets.

The 1-best history never crosses a document and the utterances of a document are
consecutive in the lists (the readers check it), so a set can be processed one span at
a time: :func:`plan_spans` takes documents in order while the span's hypotheses stay
within a budget, and a document larger than the budget is a span of its own. Peak
memory then follows the largest span, not the number of hypotheses.

An N-best *source* is anything with an :class:`NbestIndex` (``index``) and a
``spans(max_hyps)`` method yielding the spans as :class:`~nbest_rescore.types.NbestSet`
values in order: :class:`SetSource` for a set already in memory, or the streaming
readers (:mod:`.kaldi_stream`, :mod:`.plain_stream`), which re-read the files span by
span.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from ..errors import DataError
from ..types import NbestList, NbestSet

__all__ = ["NbestIndex", "NbestSource", "NotInStep", "SetSource", "plan_spans", "read_spans"]


class NotInStep(Exception):
    """The files are not in the order a lockstep pass needs (a score file with another
    number of lines, keys out of order, or an error): the readers fall back to the
    whole-set reader."""


def _next_row(rows, changed: DataError):
    """The next row of a lockstep iterator, or None at its end; ``changed`` when it
    falls out of step."""
    try:
        return next(rows, None)
    except NotInStep:
        raise changed from None


def read_spans(index: "NbestIndex", rows: Iterator, max_hyps: Optional[int],
               belongs: Callable[[int, tuple], bool], make_list: Callable[[int, list], NbestList],
               changed: DataError) -> Iterator[NbestSet]:
    """The second pass of a streaming reader: the spans (:meth:`NbestIndex.span_bounds`)
    built from a lockstep row iterator that yields the hypotheses in set order.

    Args:
        index: what the checking pass found; rows: the re-read rows (one per hypothesis,
            raising :class:`NotInStep` where the files fall out of step).
        belongs: (utterance index u, row) -> whether the row is one of utterance u's.
        make_list: (u, its ``index.sizes[u]`` rows) -> utterance u's
            :class:`~nbest_rescore.types.NbestList`.
        changed: the error raised when the rows no longer match the index.
    Yields:
        each span as an :class:`~nbest_rescore.types.NbestSet`, in order.
    Raises:
        DataError: ``changed``, when the rows end early, fall out of step, hold a row of
            another utterance, or go on past the last utterance (the files changed since
            the checking pass).
    """
    for a, b in index.span_bounds(max_hyps):
        lists = []
        for u in range(a, b):
            part = []
            for _ in range(index.sizes[u]):
                row = _next_row(rows, changed)
                if row is None or not belongs(u, row):
                    raise changed
                part.append(row)
            lists.append(make_list(u, part))
        yield NbestSet(tuple(lists), index.doc_source, index.source)
    if _next_row(rows, changed) is not None:
        raise changed


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
    n = len(doc_sizes)
    if max_hyps is None:
        return [(0, n)] if n else []
    if max_hyps < 1:
        raise ValueError(f"max_hyps must be >= 1 or None, got {max_hyps}")
    spans: List[Tuple[int, int]] = []
    start, size = 0, 0
    for d, s in enumerate(doc_sizes):
        if d > start and size + s > max_hyps:
            spans.append((start, d))
            start, size = d, 0
        size += s
    if n:
        spans.append((start, n))
    return spans


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
    """

    utt_ids: Tuple[str, ...]
    doc_ids: Tuple[str, ...]
    sizes: Tuple[int, ...]
    doc_source: str = "utt2doc"
    source: str = ""

    def __len__(self) -> int:
        return len(self.utt_ids)

    def num_hyps(self) -> int:
        """Hypotheses over all utterances."""
        return sum(self.sizes)

    def doc_bounds(self) -> np.ndarray:
        """int64 [D + 1]: utterance index where each document starts, then U."""
        starts = [i for i in range(len(self.doc_ids)) if i == 0 or self.doc_ids[i] != self.doc_ids[i - 1]]
        return np.asarray(starts + [len(self.doc_ids)], dtype=np.int64)

    def span_bounds(self, max_hyps: Optional[int]) -> List[Tuple[int, int]]:
        """:func:`plan_spans` as utterance ranges ``[(first_utt, end_utt), ...]``."""
        bounds = self.doc_bounds()
        ends = np.concatenate([[0], np.cumsum(self.sizes, dtype=np.int64)])
        doc_sizes = ends[bounds[1:]] - ends[bounds[:-1]]
        return [(int(bounds[a]), int(bounds[b])) for a, b in plan_spans(doc_sizes.tolist(), max_hyps)]

    @classmethod
    def of(cls, nbest: NbestSet) -> "NbestIndex":
        """The index of a set in memory."""
        u = nbest.utterances
        return cls(tuple(x.utt_id for x in u), tuple(x.doc_id for x in u),
                   tuple(len(x) for x in u), nbest.doc_source, nbest.source)


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
    seen, current = set(), None
    for u in nbest.utterances:
        if u.doc_id != current:
            if u.doc_id in seen:
                return False
            seen.add(u.doc_id)
            current = u.doc_id
    return True


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
        for a, b in self.index.span_bounds(max_hyps):
            yield nb if (a, b) == (0, len(nb)) else NbestSet(nb.utterances[a:b], nb.doc_source, nb.source)
