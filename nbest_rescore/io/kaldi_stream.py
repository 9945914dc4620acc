"""Kaldi N-best directories read one span of whole documents at a time.

:func:`open_kaldi_nbest_stream` makes one cheap pass over the directory: the words file
and the cost files are read line by line in lockstep (nothing of a hypothesis is kept
but its utterance), every line parsed and checked as :func:`~.kaldi_nbest.read_kaldi_nbest_dir`
checks it, and the documents read and checked. What it keeps is an
:class:`~.spans.NbestIndex` (one entry per utterance). :meth:`KaldiNbestStream.spans`
then reads the files again and yields the spans (:func:`~.spans.plan_spans`) as
:class:`~nbest_rescore.types.NbestSet` values equal to the slices of the set
``read_kaldi_nbest_dir`` returns (same keys, words and float64 costs).

The lockstep pass needs what Kaldi's tools write: every cost file in the order of the
words file and the hypotheses of an utterance on consecutive lines. When a directory
is otherwise (a cost file in another order, an utterance that reappears) or holds any
error, :func:`open_kaldi_nbest_stream` returns None and the caller reads the directory
whole with ``read_kaldi_nbest_dir``, which accepts the other orders and reports the
error exactly as ever (file, line, key and fix).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional, Tuple

import numpy as np

from ..errors import DataError
from ..types import NbestList, NbestSet
from .kaldi_nbest import (NgramFiles, ac_file, iter_int_words, ngram_files, read_documents, read_symbol_table,
                          split_hyp_key, words_file)
from .kaldi_text import iter_kaldi_text
from .score_ark import iter_cost_ark
from .spans import NbestIndex, NotInStep as _NotInStep, read_spans

__all__ = ["KaldiNbestStream", "open_kaldi_nbest_stream"]

logger = logging.getLogger(__name__)

#: One hypothesis as the lockstep pass reads it: line, key, words, acoustic cost,
#: n-gram cost, graph cost (None without a graph cost file).
Row = Tuple[int, str, Tuple[str, ...], float, float, Optional[float]]


@dataclass(frozen=True)
class _Files:
    directory: str
    words: str
    ac: str
    ngram: NgramFiles

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def rows(self) -> Iterator[Row]:
        """Every hypothesis, the files read in lockstep. Raises _NotInStep where a cost
        file's key differs from the words file's on the same entry, or one file ends first."""
        if self.words == "words":
            table = read_symbol_table(self.path("words.txt"))
            words = iter_int_words(self.path("words"), table, self.path("words.txt"))
        else:
            words = iter_kaldi_text(self.path(self.words))
        names = [self.ac, self.ngram.lm] + ([self.ngram.graph] if self.ngram.graph else [])
        costs = [iter_cost_ark(self.path(n)) for n in names]
        graph_file, subtract = self.ngram.graph is not None, self.ngram.subtract_graph
        for line_no, key, hyp in words:
            values = []
            for it in costs:
                entry = next(it, None)
                if entry is None or entry[0] != key:
                    raise _NotInStep
                values.append(entry[1])
            graph = values[2] if graph_file else None
            lm = values[1] - graph if subtract else values[1]
            yield line_no, key, hyp, values[0], lm, graph
        if any(next(it, None) is not None for it in costs):
            raise _NotInStep


def _scan(files: _Files) -> Tuple[List[str], List[int], dict]:
    """Utterance ids in list order, their hypothesis counts and the line of each one's
    first hypothesis. Raises _NotInStep for an utterance that reappears, a duplicate
    key or a malformed key; DataError for a malformed line."""
    utt_ids: List[str] = []
    sizes: List[int] = []
    utt_line = {}
    current, keys = None, set()
    for line_no, key, _, _, _, _ in files.rows():
        try:
            utt, _ = split_hyp_key(key)
        except ValueError:
            raise _NotInStep from None
        if utt != current:
            if utt in utt_line:
                raise _NotInStep
            utt_ids.append(utt)
            sizes.append(0)
            utt_line[utt] = line_no
            current, keys = utt, set()
        if key in keys:
            raise _NotInStep
        keys.add(key)
        sizes[-1] += 1
    return utt_ids, sizes, utt_line


@dataclass(frozen=True)
class KaldiNbestStream:
    """A Kaldi N-best directory checked by one pass (:func:`open_kaldi_nbest_stream`),
    read again span by span.

    Attributes:
        index: one entry per utterance (ids, documents, hypothesis counts).
        files: the files read (words, acoustic, n-gram and graph costs).
    """

    index: NbestIndex
    files: _Files

    def spans(self, max_hyps: Optional[int]) -> Iterator[NbestSet]:
        """The lists, one span of whole documents at a time (:func:`~.spans.plan_spans`:
        at most ``max_hyps`` hypotheses unless one document has more; None: all in one),
        each an :class:`~nbest_rescore.types.NbestSet` of float64 costs (negated natural
        logs) as :func:`~.kaldi_nbest.read_kaldi_nbest_dir` reads them.

        Raises:
            DataError: the files changed since the checking pass.
        """
        ix = self.index

        def make_list(u: int, part: list) -> NbestList:
            _, keys, hyps, ac, lm, graph = zip(*part)
            return NbestList(utt_id=ix.utt_ids[u], doc_id=ix.doc_ids[u], keys=keys, hyps=hyps,
                             ac_cost=np.array(ac, dtype=np.float64), lm_cost=np.array(lm, dtype=np.float64),
                             graph_cost=(np.array(graph, dtype=np.float64) if graph[0] is not None
                                         else np.zeros(len(keys), dtype=np.float64)))

        changed = DataError(f"{self.files.directory}: the N-best files changed while they were read (the "
                            f"hypotheses no longer match the first pass); do not write them while scoring")
        return read_spans(ix, self.files.rows(), max_hyps, lambda u, row: row[1].rpartition("-")[0] == ix.utt_ids[u],
                          make_list, changed)


def open_kaldi_nbest_stream(path, *, log: Optional[Callable[[str], None]] = None,
                            lm_cost_name: Optional[str] = None) -> Optional[KaldiNbestStream]:
    """Check an N-best directory in one lockstep pass and return it as a stream, or
    None when it cannot be streamed: a cost file in another key order than the words
    file, an utterance whose hypotheses are not on consecutive lines, or any error.
    The caller then reads it whole with :func:`~.kaldi_nbest.read_kaldi_nbest_dir`
    (same arguments), which reports the error.

    Args:
        path, log, lm_cost_name: as :func:`~.kaldi_nbest.read_kaldi_nbest_dir`; ``log``
            gets the same line (only when a stream is returned).
    """
    directory = os.fspath(path)
    if not os.path.isdir(directory):
        return None
    try:
        words = words_file(directory)
        files = _Files(directory, words, ac_file(directory), ngram_files(directory, words, lm_cost_name))
        utt_ids, sizes, utt_line = _scan(files)
        if not utt_ids:
            return None
        docs = read_documents(directory, words, utt_line)
    except (DataError, _NotInStep):
        return None
    index = NbestIndex(tuple(utt_ids), tuple(docs.doc_of[u] for u in utt_ids), tuple(sizes),
                       docs.source, directory)
    (log if log is not None else logger.info)(
        f"{directory}: {len(utt_ids)} utterances, {index.num_hyps()} hypotheses; words {words}, acoustic "
        f"{files.ac}, n-gram {files.ngram.desc}; {docs.desc}")
    return KaldiNbestStream(index, files)
