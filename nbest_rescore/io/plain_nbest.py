"""Plain N-best text of the AMN thesis (Fig. 5.1) with parallel score files.

N-best file: one hypothesis per line, ``<utterance-index> w1 w2 ... <eos>``; a trailing
``<eos>`` or ``</s>`` is dropped. Consecutive lines with the same index form the list of
that utterance, in first-pass rank order. Acoustic and n-gram score files hold one
decimal number per line (``-12.5``, ``3``, ``1e-3``; no ``nan``/``inf``/``1_000``),
parallel to the hypothesis lines: natural-log *scores* (larger = better) by default,
negated here into costs (cost = -score); or costs already (``scores_are_costs``). A
warning is logged when most numbers have the sign of the other kind.

Score file names (used when no path is given): for a list ``DIR/NAME.EXT`` (e.g.
``dev17a.txt``) the acoustic scores are ``DIR/NAME.ac``, else ``DIR/NAME.EXT.ac``, and
the n-gram scores ``DIR/NAME.ngram``, else ``DIR/NAME.EXT.ngram`` (first existing file
wins; a list without extension ``DIR/NAME`` uses ``DIR/NAME.ac`` / ``DIR/NAME.ngram``).
See :func:`find_plain_score_files`.

Utterance ids: without an ``utt_ids`` file the utterance id *is* the index string as
written (``"0"``, ``"1"``, ...), so references (Kaldi ``text``) and ``utt2doc`` for a
plain list are keyed by the utterance index. With ``utt_ids`` (``<utterance-index>
<utterance-id>`` per line) each index is mapped to its id and references are keyed by
those ids. Hypothesis keys are ``<utterance-id>-<n>`` (n = 1, 2, ... in line order).

Documents (1-best history does not cross them): with ``utt2doc`` (``<utterance-id or
index> <document-id>``) as given there, the utterances of a document on consecutive
lines; without it the whole file is one document (the thesis' corpus-level stream), its
id the file name.
"""
from __future__ import annotations

import logging
import os
from collections import abc
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..errors import DataError, examples, format_location
from ..types import NbestList, NbestSet
from ._common import (check_documents_contiguous, check_key, iter_lines, parse_cost,
                      split_fields)
from .kaldi_nbest import read_utt_map_lines

__all__ = ["find_plain_score_files", "read_plain_nbest"]

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
            raise DataError(f"{loc}: blank line; "
                            f"expected '<utterance-index> word ... <eos>'")
        idx = fields[0]
        if not (idx.isascii() and idx.isdigit()):
            raise DataError(f"{loc}: utterance index {idx!r} is not a non-negative "
                            f"integer; "
                            f"expected '<utterance-index> word ... <eos>'")
        if idx != current:
            if idx in closed:
                raise DataError(f"{loc}: utterance index {idx} reappears after index "
                                f"{current}; the hypotheses of an utterance must be on "
                                f"consecutive lines")
            if current is not None:
                closed.add(current)
            current = idx
        words = fields[1:]
        if words and words[-1] in _END_TOKENS:
            words = words[:-1]
        yield line_no, idx, tuple(words)


def _read_plain_hyps(path) -> Tuple[List[str], List[Tuple[str, ...]]]:
    """Per hypothesis line: its utterance index string and its words."""
    indices: List[str] = []
    hyps: List[Tuple[str, ...]] = []
    for _, idx, words in iter_plain_hyps(path):
        indices.append(idx)
        hyps.append(words)
    return indices, hyps


def iter_values(path, what: str) -> Iterator[float]:
    """Stream a score file: one decimal number per line (``what`` names it in messages).

    Raises:
        DataError: a line that is not exactly one decimal number (``file:line``).
    """
    for line_no, line in iter_lines(path):
        fields = split_fields(line)
        loc = format_location(path, line_no)
        if len(fields) != 1:
            raise DataError(f"{loc}: expected one number per line ({what} of hypothesis "
                            f"line {line_no}), found {len(fields)} fields")
        yield parse_cost(fields[0], loc, what)


def _read_values(path, what: str) -> List[float]:
    return list(iter_values(path, what))


_SCORE_KINDS = (("ac", "acoustic"), ("ngram", "n-gram"))


def _score_file_candidates(nbest_path, suffix: str) -> List[str]:
    """Names tried for ``DIR/NAME.EXT``: ``DIR/NAME.<suffix>``, ``DIR/NAME.EXT.<suffix>``."""
    p = os.fspath(nbest_path)
    stem, _ = os.path.splitext(p)
    out: List[str] = []
    for n in (stem + "." + suffix, p + "." + suffix):
        if n != p and n not in out:
            out.append(n)
    return out


def _missing_message(nbest_path, missing) -> str:
    parts = "; ".join(f"{desc} scores: looked for " + ", ".join(repr(n) for n in names)
                      for desc, names in missing)
    return (f"{nbest_path}: no score file beside the plain N-best list ({parts}); put the "
            f"scores there (one number per line, parallel to the hypothesis lines) or give "
            f"the paths explicitly (ac_path/ngram_path, --plain-ac/--plain-ngram)")


def _find_score_file(nbest_path, suffix: str, desc: str) -> str:
    names = _score_file_candidates(nbest_path, suffix)
    for n in names:
        if os.path.isfile(n):
            return n
    raise DataError(_missing_message(nbest_path, [(desc, names)]))


def find_plain_score_files(path) -> Tuple[str, str]:
    """Find the acoustic and n-gram score files of a plain N-best list by name.

    For ``DIR/NAME.EXT``: acoustic ``DIR/NAME.ac`` else ``DIR/NAME.EXT.ac``; n-gram
    ``DIR/NAME.ngram`` else ``DIR/NAME.EXT.ngram`` (a name equal to the list itself is
    skipped). The files hold one natural-log score (or cost) per hypothesis line.

    Returns:
        ``(ac_path, ngram_path)`` as strings.

    Raises:
        DataError: the list does not exist, or a score file is missing (the message
            lists every name tried and how to pass the paths instead).
    """
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise DataError(f"{p}: plain N-best file not found")
    found: List[Optional[str]] = []
    missing = []
    for suffix, desc in _SCORE_KINDS:
        names = _score_file_candidates(p, suffix)
        hit = next((n for n in names if os.path.isfile(n)), None)
        if hit is None:
            missing.append((desc, names))
        found.append(hit)
    if missing:
        raise DataError(_missing_message(p, missing))
    return found[0], found[1]


def _read_utt_ids(path) -> Dict[str, str]:
    """``<utterance-index> <utterance-id>`` lines as ``{index: id}`` (file order)."""
    ids: Dict[str, str] = {}
    line_of: Dict[str, int] = {}
    index_of: Dict[str, str] = {}
    for line_no, line in iter_lines(path):
        loc = format_location(path, line_no)
        fields = split_fields(line)
        if len(fields) != 2:
            raise DataError(f"{loc}: expected 2 fields '<utterance-index> <utterance-id>', "
                            f"found {len(fields)}")
        idx, utt = fields
        if not (idx.isascii() and idx.isdigit()):
            raise DataError(f"{loc}: utterance index {idx!r} is not a non-negative integer; "
                            f"expected '<utterance-index> <utterance-id>' (e.g. '0 "
                            f"abcr0004-000')")
        check_key(utt, loc, "utterance id")
        if idx in ids:
            raise DataError(f"{loc}: utterance index {idx} is listed twice (first on line "
                            f"{line_of[idx]}); each index needs exactly one utterance id")
        if utt in index_of:
            raise DataError(f"{loc}: utterance id {utt!r} is given to index {idx} and to "
                            f"index {index_of[utt]} (line {line_of[index_of[utt]]}); each "
                            f"utterance needs its own id")
        ids[idx] = utt
        line_of[idx] = line_no
        index_of[utt] = idx
    return ids


def _warn_if_wrong_kind(values: List[float], path, desc: str, scores_are_costs: bool,
                        log: Optional[Callable[[str], None]]) -> None:
    """Warn when natural-log scores look like costs or the other way round."""
    warn_if_wrong_kind(sum(1 for v in values if v < 0), sum(1 for v in values if v > 0), len(values), path, desc,
                       scores_are_costs, log)


def warn_if_wrong_kind(negative: int, positive: int, n: int, path, desc: str, scores_are_costs: bool,
                       log: Optional[Callable[[str], None]]) -> None:
    """Warn when most of the ``n`` values of a score file (``negative`` of them < 0,
    ``positive`` > 0) have the sign of the other kind (scores against costs)."""
    if scores_are_costs:
        frac = negative / n
        if frac <= 0.5:
            return
        msg = (f"{path}: {frac:.1%} of the {n} {desc} values are < 0, which looks like "
               f"natural-log scores (log-likelihoods are <= 0, larger = better), but they "
               f"are read as costs (scores_are_costs=True, --plain-costs); if they are "
               f"scores, drop --plain-costs")
    else:
        frac = positive / n
        if frac <= 0.5:
            return
        msg = (f"{path}: {frac:.1%} of the {n} {desc} values are > 0, which looks like "
               f"costs (negated natural log, larger = worse), but they are read as "
               f"natural-log scores (<= 0, larger = better) and negated; if they are "
               f"costs, pass --plain-costs (scores_are_costs=True)")
    logger.warning(msg)
    if log is not None:
        log(f"warning: {msg}")


def score_paths(nbest_path, ac_path=None, ngram_path=None) -> Tuple[str, str, List[str]]:
    """``(ac_path, ngram_path, found)``: the score files given, the missing ones found
    beside the list by name (``found``: ``"ac"``/``"ngram"`` for those).
    Raises DataError naming the names tried."""
    found = []
    if ac_path is None and ngram_path is None:
        ac_path, ngram_path = find_plain_score_files(nbest_path)
        found = ["ac", "ngram"]
    elif ac_path is None:
        ac_path = _find_score_file(nbest_path, "ac", "acoustic")
        found = ["ac"]
    elif ngram_path is None:
        ngram_path = _find_score_file(nbest_path, "ngram", "n-gram")
        found = ["ngram"]
    return ac_path, ngram_path, found


def utterance_ids(utt_ids, first_line: Dict[str, int], nbest_path) -> Tuple[Dict[str, str], str]:
    """``({index: utterance id}, log phrase)`` for the indices of the list (``first_line``:
    index -> its first line, in list order): from the ``utt_ids`` file, else the index.
    Raises DataError for a malformed file or indices without an id."""
    if utt_ids is None:
        return {idx: idx for idx in first_line}, "utterance id = index (no utt_ids)"
    id_of = _read_utt_ids(utt_ids)
    missing = [idx for idx in first_line if idx not in id_of]
    if missing:
        raise DataError(f"{utt_ids}: {len(missing)} utterance indices of {nbest_path} "
                        f"have no utterance id: {examples(missing)}; add a line "
                        f"'<utterance-index> <utterance-id>' for each")
    unused = len(id_of) - len(first_line)
    return id_of, f"utterance ids from {utt_ids}" + (f" ({unused} entries for other indices unused)" if unused else "")


def plain_documents(utt2doc, utts: List[str], index_of: Dict[str, str], have_ids: bool,
                    utt_locs: Dict[str, str], nbest_path) -> Tuple[Dict[str, str], str, str]:
    """``(utterance id -> document, doc_source, log phrase)`` of the utterances ``utts``
    (list order; ``index_of``: id -> index; ``have_ids``: ids came from a utt_ids file;
    ``utt_locs``: id -> ``file:line``): from ``utt2doc`` (path or mapping, keyed by id
    or index), else the whole file one document. Raises DataError for utterances
    without an entry or documents that are not consecutive."""
    if utt2doc is None:
        doc = os.path.basename(os.fspath(nbest_path)) or "file"
        return ({u: doc for u in utts}, "file",
                "no utt2doc: the whole file is one document (corpus-level stream)")
    if isinstance(utt2doc, abc.Mapping):
        doc_map = {str(k): str(v) for k, v in utt2doc.items()}
        doc_lines, doc_file = None, "utt2doc"
    else:
        doc_map, doc_lines = read_utt_map_lines(utt2doc, "utterance id or index")
        doc_file = os.fspath(utt2doc)
    if all(u in doc_map for u in utts):
        by = {u: u for u in utts}
    elif have_ids and all(index_of[u] in doc_map for u in utts):
        by = {u: index_of[u] for u in utts}
    else:
        missing = [u for u in utts if u not in doc_map]
        also = "" if not have_ids else " (nor for their utterance indices)"
        raise DataError(f"{doc_file}: no entry for {len(missing)} utterances of "
                        f"{nbest_path}{also}: {examples(missing)}; add a line "
                        f"'<utterance-id> <document-id>' for each")
    doc_of = {u: doc_map[by[u]] for u in utts}
    line_of = ({u: doc_lines[by[u]] for u in utts} if doc_lines is not None else None)
    check_documents_contiguous(utts, doc_of, doc_file, os.fspath(nbest_path), line_of, utt_locs)
    return doc_of, "utt2doc", f"documents from {doc_file} ({len(set(doc_of.values()))})"


def describe(nbest_path, n_utts: int, n_hyps: int, scores_are_costs: bool, ac_path, ngram_path,
             found: List[str], id_desc: str, doc_desc: str) -> str:
    """The reader's log line: what was read from where."""
    kinds = "costs" if scores_are_costs else "log scores (negated into costs)"
    by_name = f" (found by name: {', '.join(found)})" if found else ""
    return (f"{nbest_path}: {n_utts} utterances, {n_hyps} hypotheses, {kinds} from "
            f"{ac_path} and {ngram_path}{by_name}; {id_desc}; {doc_desc}")


def read_plain_nbest(path, ac_path=None, ngram_path=None, *, scores_are_costs: bool = False,
                     utt2doc=None, utt_ids=None,
                     log: Optional[Callable[[str], None]] = None) -> NbestSet:
    """Read a plain N-best file (thesis Fig. 5.1) and its acoustic / n-gram score files.

    Args:
        path: hypotheses, ``<utterance-index> w1 ... <eos>`` per line.
        ac_path, ngram_path: one number per line, line i belonging to hypothesis line i;
            ``None``: found beside ``path`` by name (``NAME.ac`` / ``NAME.ngram``, then
            ``NAME.EXT.ac`` / ``NAME.EXT.ngram``; see :func:`find_plain_score_files`).
        scores_are_costs: False (default): the numbers are natural-log scores (larger =
            better) and are negated into costs; True: they are already costs (negated
            natural log, larger = worse) and are kept. A warning (module logger and
            ``log``) says when most values have the sign of the other kind.
        utt2doc: optional path of a ``<utterance-id> <document-id>`` file (or a mapping
            ``{utterance id: doc id}``); its keys are the utterance ids, or the utterance
            indices (used when not every utterance id is a key). The utterances of a
            document must be on consecutive lines. Without it the whole file is one
            document (the thesis' corpus-level stream), ``doc_id`` = the file name.
        utt_ids: optional path of a ``<utterance-index> <utterance-id>`` file mapping
            every index of the list to an utterance id (entries for other indices are
            allowed). Without it the utterance id is the index string as written, so
            references must be keyed by the utterance index.
        log: called with one line describing what was read, and with any warning
            (default: the line goes to the module logger at INFO).

    Returns an :class:`NbestSet` in file order with ``utt_id`` = the mapped id (or the
    index string), keys ``<utt_id>-<n>`` (n = 1, 2, ... in line order), float64 costs
    (negated natural log), zero ``graph_cost``, ``doc_source`` ``"utt2doc"`` or
    ``"file"`` (whole file one document).

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
    say = log if log is not None else logger.info
    nbest_path = path
    if not os.path.isfile(os.fspath(nbest_path)):
        raise DataError(f"{nbest_path}: plain N-best file not found")
    ac_path, ngram_path, found = score_paths(nbest_path, ac_path, ngram_path)

    indices, hyps = _read_plain_hyps(nbest_path)
    if not hyps:
        raise DataError(f"{nbest_path}: no hypotheses")
    n = len(hyps)

    # --- utterance ids
    first_line: Dict[str, int] = {}
    for i, idx in enumerate(indices):
        first_line.setdefault(idx, i + 1)
    id_of, id_desc = utterance_ids(utt_ids, first_line, nbest_path)
    utt_of_line = [id_of[idx] for idx in indices]

    sign = 1.0 if scores_are_costs else -1.0
    kind = "cost" if scores_are_costs else "score"
    costs = {}
    ranks: List[int] = []
    for i, idx in enumerate(indices):
        ranks.append(ranks[-1] + 1 if i > 0 and indices[i - 1] == idx else 1)
    keys = [f"{utt}-{r}" for utt, r in zip(utt_of_line, ranks)]
    for name, score_path, desc in (("ac", ac_path, "acoustic"),
                                   ("ngram", ngram_path, "n-gram")):
        values = _read_values(score_path, f"{desc} {kind}")
        if len(values) != n:
            raise DataError(f"{score_path} has {len(values)} score lines but {nbest_path} "
                            f"has {n} hypothesis lines; the files must be parallel")
        _warn_if_wrong_kind(values, score_path, desc, scores_are_costs, log)
        arr = np.asarray(values, dtype=np.float64) * sign
        arr[arr == 0] = 0.0  # no negative zeros
        costs[name] = arr

    groups: Dict[str, List[int]] = {}
    for i, utt in enumerate(utt_of_line):
        groups.setdefault(utt, []).append(i)
    index_of = {id_of[idx]: idx for idx in first_line}
    utt_locs = {u: format_location(nbest_path, first_line[index_of[u]]) for u in groups}

    doc_of, doc_source, doc_desc = plain_documents(utt2doc, list(groups), index_of, utt_ids is not None,
                                                   utt_locs, nbest_path)

    utterances = []
    for utt, rows in groups.items():
        sel = np.asarray(rows, dtype=np.int64)
        utterances.append(NbestList(
            utt_id=utt,
            doc_id=doc_of[utt],
            keys=tuple(keys[i] for i in rows),
            hyps=tuple(hyps[i] for i in rows),
            ac_cost=costs["ac"][sel],
            lm_cost=costs["ngram"][sel],
            graph_cost=np.zeros(len(rows), dtype=np.float64),
        ))
    say(describe(nbest_path, len(utterances), n, scores_are_costs, ac_path, ngram_path, found, id_desc, doc_desc))
    return NbestSet(utterances=tuple(utterances), doc_source=doc_source,
                    source=os.fspath(nbest_path))
