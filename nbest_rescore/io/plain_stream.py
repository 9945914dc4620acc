"""Plain N-best lists (thesis Fig. 5.1) read one span of whole documents at a time.

As :mod:`.kaldi_stream` for Kaldi directories: :func:`open_plain_nbest_stream` reads
the list and its two score files once, line by line in lockstep (nothing of a
hypothesis kept), with every check of :func:`~.plain_nbest.read_plain_nbest`, and
keeps one entry per utterance; :meth:`PlainNbestStream.spans` reads them again span by
span, giving the slices of the set ``read_plain_nbest`` returns. Score files of
another length than the list, or any error, make it return None: the caller then reads
the list whole with ``read_plain_nbest``, which reports the error. Without
``utt2doc`` the whole file is one document, so one span.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..errors import DataError, format_location
from ..types import NbestList, NbestSet
from .plain_nbest import (describe, iter_plain_hyps, iter_values, plain_documents, score_paths, utterance_ids,
                          warn_if_wrong_kind)
from .spans import NbestIndex, NotInStep as _NotInStep, read_spans

__all__ = ["PlainNbestStream", "open_plain_nbest_stream"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Files:
    nbest: str
    ac: str
    ngram: str
    scores_are_costs: bool

    def rows(self) -> Iterator[Tuple[int, str, Tuple[str, ...], float, float]]:
        """``(line, index, words, acoustic value, n-gram value)`` per hypothesis line,
        values as written (scores or costs). Raises _NotInStep when a file ends first."""
        kind = "cost" if self.scores_are_costs else "score"
        ac = iter_values(self.ac, f"acoustic {kind}")
        ng = iter_values(self.ngram, f"n-gram {kind}")
        for line_no, idx, words in iter_plain_hyps(self.nbest):
            a, g = next(ac, None), next(ng, None)
            if a is None or g is None:
                raise _NotInStep
            yield line_no, idx, words, a, g
        if next(ac, None) is not None or next(ng, None) is not None:
            raise _NotInStep


def _costs(values, sign: float) -> np.ndarray:
    """Values as costs (negated scores unless they are costs), no negative zeros."""
    arr = np.asarray(values, dtype=np.float64) * sign
    arr[arr == 0] = 0.0
    return arr


@dataclass(frozen=True)
class PlainNbestStream:
    """A plain N-best list checked by one pass (:func:`open_plain_nbest_stream`), read
    again span by span. ``index``: one entry per utterance; ``indices``: the utterance
    index string of each utterance as written in the list."""

    index: NbestIndex
    files: _Files
    indices: Tuple[str, ...]

    def spans(self, max_hyps: Optional[int]) -> Iterator[NbestSet]:
        """The lists, one span of whole documents at a time (see
        :meth:`~.kaldi_stream.KaldiNbestStream.spans`), as ``read_plain_nbest`` reads
        them: keys ``<utt_id>-<n>``, float64 costs (negated natural logs), zero graph cost.

        Raises:
            DataError: the files changed since the checking pass.
        """
        ix = self.index
        sign = 1.0 if self.files.scores_are_costs else -1.0

        def make_list(u: int, part: list) -> NbestList:
            _, _, hyps, ac, ng = zip(*part)
            utt = ix.utt_ids[u]
            return NbestList(utt_id=utt, doc_id=ix.doc_ids[u], keys=tuple(f"{utt}-{r}" for r in range(1, len(hyps) + 1)),
                             hyps=hyps, ac_cost=_costs(ac, sign), lm_cost=_costs(ng, sign),
                             graph_cost=np.zeros(len(hyps), dtype=np.float64))

        changed = DataError(f"{self.files.nbest}: the plain N-best files changed while they were read; do not "
                            f"write them while scoring")
        return read_spans(ix, self.files.rows(), max_hyps, lambda u, row: row[1] == self.indices[u], make_list,
                          changed)


def open_plain_nbest_stream(path, ac_path=None, ngram_path=None, *, scores_are_costs: bool = False,
                            utt2doc=None, utt_ids=None,
                            log: Optional[Callable[[str], None]] = None) -> Optional[PlainNbestStream]:
    """Check a plain N-best list in one lockstep pass and return it as a stream, or None
    when its score files are not line-parallel to it or anything is wrong (the caller
    then reads it with :func:`~.plain_nbest.read_plain_nbest`, same arguments, which
    reports the error). Arguments and the log line and warnings as ``read_plain_nbest``.
    """
    nbest_path = path
    if not os.path.isfile(os.fspath(nbest_path)):
        return None
    try:
        ac_path, ngram_path, found = score_paths(nbest_path, ac_path, ngram_path)
        files = _Files(os.fspath(nbest_path), os.fspath(ac_path), os.fspath(ngram_path), scores_are_costs)
        indices: List[str] = []
        sizes: List[int] = []
        first_line: Dict[str, int] = {}
        signs = [0, 0, 0, 0]  # acoustic < 0, > 0, n-gram < 0, > 0
        for line_no, idx, _, a, g in files.rows():
            if not indices or indices[-1] != idx:
                indices.append(idx)
                sizes.append(0)
                first_line[idx] = line_no
            sizes[-1] += 1
            signs[0] += a < 0
            signs[1] += a > 0
            signs[2] += g < 0
            signs[3] += g > 0
        if not indices:
            return None
        id_of, id_desc = utterance_ids(utt_ids, first_line, nbest_path)
        utts = [id_of[i] for i in indices]
        index_of = {id_of[i]: i for i in indices}
        utt_locs = {u: format_location(nbest_path, first_line[index_of[u]]) for u in utts}
        doc_of, doc_source, doc_desc = plain_documents(utt2doc, utts, index_of, utt_ids is not None, utt_locs,
                                                       nbest_path)
    except (DataError, _NotInStep):
        return None
    n = int(sum(sizes))
    for k, score_path, desc in ((0, ac_path, "acoustic"), (2, ngram_path, "n-gram")):
        warn_if_wrong_kind(signs[k], signs[k + 1], n, score_path, desc, scores_are_costs, log)
    index = NbestIndex(tuple(utts), tuple(doc_of[u] for u in utts), tuple(sizes),
                       doc_source, os.fspath(nbest_path))
    (log if log is not None else logger.info)(describe(nbest_path, len(utts), n, scores_are_costs, ac_path,
                                                       ngram_path, found, id_desc, doc_desc))
    return PlainNbestStream(index, files, tuple(indices))
