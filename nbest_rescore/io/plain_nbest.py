"""Plain N-best text of the AMN thesis (Fig. 5.1) with parallel score files: the format,
the score file names (:func:`find_plain_score_files`), ``--plain-costs`` and the sign
warning as in docs/formats.md ("Plain N-best format"). A trailing ``<eos>``/``</s>`` is
dropped; scores are negated into costs unless ``scores_are_costs``.

Utterance ids are the index strings as written (``"0"``, ...), or mapped by ``utt_ids``;
hypothesis keys are ``<utterance-id>-<n>`` (n = 1, 2, ... in line order). Documents:
``utt2doc`` (consecutive in the list), else the whole file is one, its id the file name.
"""
from __future__ import annotations

import logging
import os
from collections import abc
from itertools import groupby
from operator import itemgetter
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..errors import DataError, examples, format_location
from ..types import NbestList, NbestSet, Words
from ._common import (DocumentOrder, check_key, check_ranked_keys, float_text, iter_lines, iter_pairs, parse_cost,
                      split_fields)
from .nbest_writer import NbestWriter, open_files, write_parts
from .kaldi_nbest import read_utt_map_lines
from .kaldi_text import kaldi_text_line
from .spans import StreamSource, open_stream

__all__ = ["PLAIN_WRITTEN", "PlainNbestWriter", "find_plain_score_files", "iter_plain_nbest", "open_plain_nbest",
           "plain_nbest_files", "read_plain_nbest", "write_plain_nbest_files"]

logger = logging.getLogger(__name__)

_END_TOKENS = ("<eos>", "</s>")


def iter_plain_hyps(path) -> Iterator[Tuple[int, str, Tuple[str, ...]]]:
    """Stream a plain N-best file: ``(line_no, utterance index string, words)`` per
    hypothesis line (a trailing ``<eos>``/``</s>`` dropped).

    Raises:
        DataError: a blank line, an index that is not a non-negative integer, or an
            index that reappears after another one (``file:line``).
    """
    closed = set()
    current = None
    for line_no, line in iter_lines(path):
        loc = format_location(path, line_no)
        fields = split_fields(line)
        if not fields:
            raise DataError(f"{loc}: blank line; expected '<utterance-index> word ... <eos>'")
        idx = fields[0]
        if not (idx.isascii() and idx.isdigit()):
            raise DataError(f"{loc}: utterance index {idx!r} is not a non-negative integer; "
                            f"expected '<utterance-index> word ... <eos>'")
        if idx != current:
            if idx in closed:
                raise DataError(f"{loc}: utterance index {idx} reappears after index {current}; "
                                f"the hypotheses of an utterance must be on consecutive lines")
            if current is not None:
                closed.add(current)
            current = idx
        words = fields[1:]
        if words and words[-1] in _END_TOKENS:
            words = words[:-1]
        yield line_no, idx, tuple(words)


def iter_values(path, what: str) -> Iterator[float]:
    """Stream a score file: one decimal number per line (``what`` names it in messages).

    Raises:
        DataError: a line that is not exactly one decimal number (``file:line``).
    """
    for line_no, line in iter_lines(path):
        fields = split_fields(line)
        loc = format_location(path, line_no)
        if len(fields) != 1:
            raise DataError(f"{loc}: expected one number per line ({what} of hypothesis line {line_no}), "
                            f"found {len(fields)} fields")
        yield parse_cost(fields[0], loc, what)


_SCORE_KINDS = (("ac", "acoustic"), ("ngram", "n-gram"))


def find_plain_score_files(path) -> Tuple[str, str]:
    """``(ac_path, ngram_path)``: the acoustic and n-gram score files of a plain N-best
    list, found by name as docs/formats.md says: ``DIR/NAME.ac`` / ``DIR/NAME.ngram``, else
    ``DIR/NAME.EXT.ac`` / ``DIR/NAME.EXT.ngram`` (a name equal to the list is skipped).

    Raises:
        DataError: the list does not exist, or a score file is missing (the message
            lists every name tried and how to pass the paths instead).
    """
    return score_paths(path)[:2]


def _read_utt_ids(path) -> Dict[str, str]:
    """``<utterance-index> <utterance-id>`` lines as ``{index: id}`` (file order)."""
    ids: Dict[str, str] = {}
    line_of: Dict[str, int] = {}
    index_of: Dict[str, str] = {}
    for line_no, loc, idx, utt in iter_pairs(path, "expected 2 fields '<utterance-index> <utterance-id>', found {n}"):
        if not (idx.isascii() and idx.isdigit()):
            raise DataError(f"{loc}: utterance index {idx!r} is not a non-negative integer; "
                            f"expected '<utterance-index> <utterance-id>' (e.g. '0 abcr0004-000')")
        check_key(utt, loc, "utterance id")
        if idx in ids:
            raise DataError(f"{loc}: utterance index {idx} is listed twice (first on line {line_of[idx]}); "
                            f"each index needs exactly one utterance id")
        if utt in index_of:
            raise DataError(f"{loc}: utterance id {utt!r} is given to index {idx} and to index {index_of[utt]} "
                            f"(line {line_of[index_of[utt]]}); each utterance needs its own id")
        ids[idx] = utt
        line_of[idx] = line_no
        index_of[utt] = idx
    return ids


def warn_if_wrong_kind(negative: int, positive: int, n: int, path, desc: str, scores_are_costs: bool,
                       log: Optional[Callable[[str], None]]) -> None:
    """Warn when most of the ``n`` values of a score file (``negative`` of them < 0,
    ``positive`` > 0) have the sign of the other kind (scores against costs)."""
    frac = (negative if scores_are_costs else positive) / n
    if frac <= 0.5:
        return
    msg = (f"{path}: {frac:.1%} of the {n} {desc} values are < 0, which looks like natural-log scores "
           f"(log-likelihoods are <= 0, larger = better), but they are read as costs (scores_are_costs=True, "
           f"--plain-costs); if they are scores, drop --plain-costs" if scores_are_costs else
           f"{path}: {frac:.1%} of the {n} {desc} values are > 0, which looks like costs (negated natural log, "
           f"larger = worse), but they are read as natural-log scores (<= 0, larger = better) and negated; if "
           f"they are costs, pass --plain-costs (scores_are_costs=True)")
    logger.warning(msg)
    if log is not None:
        log(f"warning: {msg}")


def _beside(nbest_path, suffix: str) -> Tuple[Optional[str], List[str]]:
    """``(the score file found or None, the names tried)`` for ``suffix`` (``ac``/``ngram``), as
    :func:`find_plain_score_files` looks for it."""
    p = os.fspath(nbest_path)
    names = [n for n in dict.fromkeys((os.path.splitext(p)[0] + "." + suffix, p + "." + suffix)) if n != p]
    return next((n for n in names if os.path.isfile(n)), None), names


def score_paths(nbest_path, ac_path=None, ngram_path=None) -> Tuple[str, str, List[str]]:
    """``(ac_path, ngram_path, found)``: the score files given, the missing ones found
    beside the list by name (``found``: ``"ac"``/``"ngram"`` for those).
    Raises DataError: the list does not exist, or naming the names tried."""
    if not os.path.isfile(os.fspath(nbest_path)):
        raise DataError(f"{nbest_path}: plain N-best file not found")
    paths = {"ac": ac_path, "ngram": ngram_path}
    found, missing = [], []
    for suffix, desc in _SCORE_KINDS:
        if paths[suffix] is None:
            paths[suffix], names = _beside(nbest_path, suffix)
            found.append(suffix)
            if paths[suffix] is None:
                missing.append((desc, names))
    if missing:
        parts = "; ".join(f"{desc} scores: looked for " + ", ".join(repr(n) for n in names) for desc, names in missing)
        raise DataError(f"{nbest_path}: no score file beside the plain N-best list ({parts}); put the scores there "
                        f"(one number per line, parallel to the hypothesis lines) or give the paths explicitly "
                        f"(ac_path/ngram_path, --plain-ac/--plain-ngram)")
    return paths["ac"], paths["ngram"], found


def plain_nbest_files(path, ac_path=None, ngram_path=None, *, scores_are_costs: bool = False, utt2doc=None,
                      utt_ids=None) -> Tuple[str, ...]:
    """Every file :func:`iter_plain_nbest` reads with these arguments: the list, its
    score files (given, or found beside it by name: :func:`score_paths`; one not found
    is left out, the reader names it), ``utt_ids`` and ``utt2doc`` (when a path).
    ``scores_are_costs`` changes no file. Raises nothing."""
    del scores_are_costs
    given = {"ac": ac_path, "ngram": ngram_path}
    scores = (given[s] if given[s] is not None else _beside(path, s)[0] for s, _ in _SCORE_KINDS)
    named = (path, *scores, utt_ids, None if isinstance(utt2doc, abc.Mapping) else utt2doc)
    return tuple(os.fspath(p) for p in named if p is not None)


def _doc_map(utt2doc) -> Tuple[Optional[Dict[str, str]], Optional[Dict[str, int]], str]:
    """``(document map, its lines or None, how messages name it)`` of ``utt2doc``
    (a path, a mapping, or None: no map)."""
    if utt2doc is None:
        return None, None, "file"
    if isinstance(utt2doc, abc.Mapping):
        return {str(k): str(v) for k, v in utt2doc.items()}, None, "utt2doc"
    doc_map, doc_lines = read_utt_map_lines(utt2doc, "utterance id or index")
    return doc_map, doc_lines, os.fspath(utt2doc)


class _PlainInput:
    """What the reader knows before the hypotheses: the files, the utterance ids
    (``utt_ids``) and the documents (``utt2doc``), checked utterance by utterance."""

    def __init__(self, path, ac_path, ngram_path, scores_are_costs: bool, utt2doc, utt_ids):
        self.nbest, self.costs, self.utt_ids = path, scores_are_costs, utt_ids
        self.kind = "cost" if scores_are_costs else "score"  # how messages name the values
        self.ac, self.ngram, self.found = score_paths(path, ac_path, ngram_path)  # (checks the list exists)
        self.id_of = None if utt_ids is None else _read_utt_ids(utt_ids)
        self.doc_map, self.doc_lines, self.doc_file = _doc_map(utt2doc)
        self.order = DocumentOrder(self.doc_file, os.fspath(path))
        self.by_index: Optional[bool] = None  # utt2doc keyed by index: decided at the first utterance

    def utt_id(self, idx: str) -> str:
        """The utterance id of index ``idx``. Raises DataError listing the indices
        without an id (the list read again)."""
        utt = idx if self.id_of is None else self.id_of.get(idx)
        if utt is not None:
            return utt
        indices = dict.fromkeys(i for _, i, _ in iter_plain_hyps(self.nbest))
        missing = [i for i in indices if i not in self.id_of]
        raise DataError(f"{self.utt_ids}: {len(missing)} utterance indices of {self.nbest} have no utterance "
                        f"id: {examples(missing)}; add a line '<utterance-index> <utterance-id>' for each")

    def doc_of(self, utt: str, idx: str, line_no: int) -> str:
        """The document of utterance ``utt`` (index ``idx``, first line ``line_no``).
        Raises DataError for utterances without an entry or a document that reappears."""
        if self.doc_map is None:
            return os.path.basename(os.fspath(self.nbest)) or "file"
        if self.by_index is None:
            self.by_index = utt not in self.doc_map and self.id_of is not None and idx in self.doc_map
        key = idx if self.by_index else utt
        doc = self.doc_map.get(key)
        if doc is None:
            raise self._no_docs()
        self.order.add(utt, doc, None if self.doc_lines is None else self.doc_lines[key],
                       format_location(self.nbest, line_no))
        return doc

    def _no_docs(self) -> DataError:
        ids = self.id_of or {}
        utts = dict.fromkeys((ids.get(i, i), i) for _, i, _ in iter_plain_hyps(self.nbest))
        missing = [u for u, i in utts if (i if self.by_index else u) not in self.doc_map]
        also = "" if self.id_of is None else " (nor for their utterance indices)"
        return DataError(f"{self.doc_file}: no entry for {len(missing)} utterances of {self.nbest}{also}: "
                         f"{examples(missing)}; add a line '<utterance-id> <document-id>' for each")

    def not_parallel(self) -> DataError:
        """The error for score files not line-parallel to the list (all counted)."""
        n = sum(1 for _ in iter_plain_hyps(self.nbest))
        for path, desc in ((self.ac, "acoustic"), (self.ngram, "n-gram")):
            m = sum(1 for _ in iter_values(path, f"{desc} {self.kind}"))
            if m != n:
                return DataError(f"{path} has {m} score lines but {self.nbest} has {n} hypothesis lines; "
                                 f"the files must be parallel")
        return DataError(f"{self.nbest}: the score files changed while they were read; do not write them now")

    def describe(self, n_utts: int, n_hyps: int) -> str:
        """The reader's log line."""
        id_desc = "utterance id = index (no utt_ids)"
        if self.id_of is not None:
            unused = len(self.id_of) - n_utts
            id_desc = f"utterance ids from {self.utt_ids}" + (
                f" ({unused} entries for other indices unused)" if unused else "")
        doc_desc = ("no utt2doc: the whole file is one document (corpus-level stream)" if self.doc_map is None
                    else f"documents from {self.doc_file} ({self.order.count})")
        kinds = "costs" if self.costs else "log scores (negated into costs)"
        by_name = f" (found by name: {', '.join(self.found)})" if self.found else ""
        return (f"{self.nbest}: {n_utts} utterances, {n_hyps} hypotheses, {kinds} from {self.ac} and "
                f"{self.ngram}{by_name}; {id_desc}; {doc_desc}")


def _rows(plain: _PlainInput) -> Iterator[Tuple[int, str, Words, float, float]]:
    """``(line, index, words, acoustic value, n-gram value)`` per hypothesis line, the
    score files read in lock-step with the list (values as written)."""
    ac, ng = iter_values(plain.ac, f"acoustic {plain.kind}"), iter_values(plain.ngram, f"n-gram {plain.kind}")
    n = 0
    for line_no, idx, words in iter_plain_hyps(plain.nbest):
        a, g = next(ac, None), next(ng, None)
        if a is None or g is None:
            raise plain.not_parallel()
        n += 1
        yield line_no, idx, words, a, g
    if not n:
        raise DataError(f"{plain.nbest}: no hypotheses")
    if next(ac, None) is not None or next(ng, None) is not None:
        raise plain.not_parallel()


def _plain_list(plain: _PlainInput, group: list, signs: List[int]) -> NbestList:
    """One utterance's list from its rows (:func:`_rows`); ``signs`` (acoustic < 0,
    > 0, n-gram < 0, > 0) counts its values."""
    line_no, idx = group[0][0], group[0][1]
    _, _, hyps, ac, ng = zip(*group)
    for k, values in ((0, ac), (2, ng)):
        signs[k] += sum(v < 0 for v in values)
        signs[k + 1] += sum(v > 0 for v in values)
    utt = plain.utt_id(idx)
    sign = 1.0 if plain.costs else -1.0  # (+ 0.0: no negative zeros)
    return NbestList(utt_id=utt, doc_id=plain.doc_of(utt, idx, line_no),
                     keys=tuple(f"{utt}-{r}" for r in range(1, len(group) + 1)), hyps=hyps,
                     ac_cost=np.asarray(ac, dtype=np.float64) * sign + 0.0,
                     lm_cost=np.asarray(ng, dtype=np.float64) * sign + 0.0,
                     graph_cost=np.zeros(len(group), dtype=np.float64))


def iter_plain_nbest(path, ac_path=None, ngram_path=None, *, scores_are_costs: bool = False,
                     utt2doc=None, utt_ids=None, log: Optional[Callable[[str], None]] = None) -> Iterator[NbestList]:
    """:func:`read_plain_nbest` one utterance at a time, list and score files read in lock-step: arguments,
    units and errors as it (raised when the iteration reaches them); the warnings and the log line come
    after the last list."""
    plain = _PlainInput(path, ac_path, ngram_path, scores_are_costs, utt2doc, utt_ids)
    signs = [0, 0, 0, 0]
    n_utts = n_hyps = 0
    for _, rows in groupby(_rows(plain), key=itemgetter(1)):
        group = list(rows)
        yield _plain_list(plain, group, signs)
        n_utts, n_hyps = n_utts + 1, n_hyps + len(group)
    for k, score_path, desc in ((0, plain.ac, "acoustic"), (2, plain.ngram, "n-gram")):
        warn_if_wrong_kind(signs[k], signs[k + 1], n_hyps, score_path, desc, scores_are_costs, log)
    (log if log is not None else logger.info)(plain.describe(n_utts, n_hyps))


def read_plain_nbest(path, ac_path=None, ngram_path=None, *, scores_are_costs: bool = False,
                     utt2doc=None, utt_ids=None,
                     log: Optional[Callable[[str], None]] = None) -> NbestSet:
    """Read a plain N-best file (thesis Fig. 5.1) and its acoustic / n-gram score files
    (:func:`iter_plain_nbest`, all at once).

    Args:
        path: hypotheses, ``<utterance-index> w1 ... <eos>`` per line.
        ac_path, ngram_path: one number per line, parallel to the hypothesis lines;
            ``None``: found beside ``path`` by name (:func:`find_plain_score_files`).
        scores_are_costs: False: natural-log scores, negated into costs; True: costs.
        utt2doc: a ``<utterance-id or index> <document-id>`` file (or a mapping); its
            keys are the ids, or the indices when the first utterance's id is not a
            key but its index is. None: the whole file is one document (the file name).
        utt_ids: a ``<utterance-index> <utterance-id>`` file (entries for other indices
            allowed); None: the utterance id is the index string (module docstring).
        log: called with the line describing what was read and any warning (default:
            the module logger at INFO).

    Returns an :class:`NbestSet` in file order, float64 costs, zero ``graph_cost``.

    Raises:
        DataError: a missing file, or a score file not found by name (the names tried);
            a blank line or a non-integer index (``file:line``); an index that reappears
            after another one (``file:line``); a score line that is not exactly one
            decimal number (``file:line``, the token and a valid example; ``nan``,
            ``inf``, ``1_000``, hex are rejected); a score file whose line count differs
            from the number of hypothesis lines (both counts and files); in ``utt_ids``
            a malformed line, an index listed twice or an id given to two indices
            (``file:line``), or indices of the list without an id (examples); an
            utterance missing from ``utt2doc`` (examples) or a document whose utterances
            are not consecutive (``utt2doc:line``, document id, fix); a key holding a
            byte-order mark or zero-width character (``file:line``); an empty N-best file.
    """
    lists = tuple(iter_plain_nbest(path, ac_path, ngram_path, scores_are_costs=scores_are_costs, utt2doc=utt2doc,
                                   utt_ids=utt_ids, log=log))
    return NbestSet(utterances=lists, doc_source="file" if utt2doc is None else "utt2doc", source=os.fspath(path))


def open_plain_nbest(path, ac_path=None, ngram_path=None, *, scores_are_costs: bool = False, utt2doc=None,
                     utt_ids=None, log: Optional[Callable[[str], None]] = None) -> StreamSource:
    """:func:`iter_plain_nbest` read once into a span source (:func:`~.spans.open_stream`).
    Arguments and errors as :func:`read_plain_nbest`."""
    lists = iter_plain_nbest(path, ac_path, ngram_path, scores_are_costs=scores_are_costs, utt2doc=utt2doc,
                             utt_ids=utt_ids, log=log)
    return open_stream(lists, os.fspath(path), lambda: {"doc_source": "file" if utt2doc is None else "utt2doc"})


#: The files :func:`write_plain_nbest_files` writes, in order.
PLAIN_WRITTEN = ("nbest.txt", "nbest.ac", "nbest.ngram", "utt_ids", "utt2doc")


def _plain_lines(i: int, u: NbestList) -> Iterator[Tuple[str, str, str]]:
    """``(list line, acoustic score line, n-gram score line)`` of each hypothesis of
    utterance ``u`` written as index ``i`` (scores = -cost, :func:`float_text`)."""
    check_ranked_keys(u.utt_id, u.keys, "the plain format")
    if np.any(u.graph_cost):
        raise DataError(f"utterance {u.utt_id!r}: has a graph cost (lmwt.nolm), which the plain format cannot hold; "
                        f"convert to kaldi or jsonl instead")
    for words, ac, lm in zip(u.hyps, u.ac_cost.tolist(), u.lm_cost.tolist()):
        yield kaldi_text_line(str(i), tuple(words) + ("<eos>",)), float_text(-ac) + "\n", float_text(-lm) + "\n"


class PlainNbestWriter(NbestWriter):
    """The writer (:class:`~.nbest_writer.NbestWriter`) of :func:`write_plain_nbest_files`,
    part after part into the existing ``folder`` (utterance indices count on over the parts)."""

    names = PLAIN_WRITTEN

    def __init__(self, folder):
        self.folder, self.count = folder, 0

    def _open(self, stack) -> None:
        self._files = list(open_files(stack, self.folder, PLAIN_WRITTEN).values())

    def write(self, part: NbestSet) -> None:
        files = self._files
        for u in part.utterances:
            i, self.count = self.count, self.count + 1
            for lines in _plain_lines(i, u):
                for fh, line in zip(files, lines):
                    fh.write(line)
            files[3].write(kaldi_text_line(str(i), (u.utt_id,)))
            files[4].write(kaldi_text_line(u.utt_id, (u.doc_id,)))


def write_plain_nbest_files(folder, nbest: NbestSet) -> Tuple[str, ...]:
    """Write ``nbest`` into the existing ``folder`` in the plain format, as
    :data:`PLAIN_WRITTEN`: ``nbest.txt`` (``<i> w1 ... <eos>``, i = 0, 1, ... the
    utterance's position), ``nbest.ac`` and ``nbest.ngram`` (natural-log **scores**,
    i.e. -cost, one per hypothesis line, shortest round-trip decimals:
    :func:`~._common.float_text`), ``utt_ids`` (``<i> <utt_id>``) and ``utt2doc``
    (``<utt_id> <doc_id>``). ``read_plain_nbest(folder/"nbest.txt",
    utt_ids=folder/"utt_ids", utt2doc=folder/"utt2doc")`` reads the same lists back
    (the same float64 costs). Each file is written atomically, part after part by
    :class:`PlainNbestWriter` (:mod:`.nbest_writer`).

    Returns:
        :data:`PLAIN_WRITTEN`.
    Raises:
        DataError: a non-zero graph cost (the format has none), keys other than
            ``<utt_id>-1 .. <utt_id>-N`` (the format rebuilds them), an id or word that
            is empty or holds white space (nothing more is written then).
    """
    return write_parts(PlainNbestWriter(folder), [nbest])
