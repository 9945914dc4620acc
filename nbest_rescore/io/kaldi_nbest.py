"""Kaldi-style N-best directories (the benchmark layout and Kaldi's rnnlmrescore.sh names).

Files looked for in the directory, first match wins:

* hypothesis words: ``text``; ``words_text`` (rnnlmrescore.sh); ``words`` + ``words.txt``
  (integer ids and their symbol table);
* acoustic cost: ``ac_cost``; ``acwt`` (rnnlmrescore.sh);
* n-gram cost: ``lm_cost``; ``lmwt.lmonly``; ``lmwt.withlm`` minus ``lmwt.nolm``. With the
  Kaldi names the graph cost is ``lmwt.nolm`` (the non-LM part of Kaldi's graph cost),
  otherwise it is zero;
* documents: ``utt2doc``; ``utt2spk``; none (one document per utterance). The
  utterances of a document must be consecutive in the order of the words file (1-best
  history is carried through a document in that order); a document that reappears
  after another one is an error.

Hypothesis keys are ``<uttid>-<n>`` (n = 1, 2, ...: first-pass rank). All costs are
negated natural-log values (larger = worse).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..errors import DataError, examples, format_location
from ..types import NbestList, NbestSet
from ._common import check_documents_contiguous, check_key, iter_lines, split_fields
from .kaldi_text import parse_kaldi_text
from .score_ark import read_cost_ark

__all__ = ["read_kaldi_nbest_dir", "read_utt_map", "split_hyp_key"]

logger = logging.getLogger(__name__)

Words = Tuple[str, ...]


def read_utt_map(path) -> Dict[str, str]:
    """Read a two-column Kaldi map (``utt2doc``, ``utt2spk``): ``{uttid: value}``.

    Keeps file order. A UTF-8 byte-order mark at the start of the file is ignored.

    Raises:
        DataError: the file is missing, a line does not have exactly 2 fields, an
            utterance id occurs twice, or a field holds a byte-order mark or zero-width
            character (``path:line``).
    """
    return read_utt_map_lines(path)[0]


def read_utt_map_lines(path, what: str = "utterance id"
                       ) -> Tuple[Dict[str, str], Dict[str, int]]:
    """:func:`read_utt_map`, also returning ``{uttid: 1-based line}`` (for messages)."""
    out: Dict[str, str] = {}
    first: Dict[str, int] = {}
    for line_no, line in iter_lines(path):
        fields = split_fields(line)
        if len(fields) != 2:
            raise DataError(f"{format_location(path, line_no)}: expected 2 fields "
                            f"'<uttid> <id>', found {len(fields)}")
        utt, value = fields
        if not line.isascii():
            check_key(utt, format_location(path, line_no), what)
            check_key(value, format_location(path, line_no), "id")
        if utt in out:
            raise DataError(f"{format_location(path, line_no)}: duplicate {what} "
                            f"{utt!r} (first on line {first[utt]})")
        out[utt] = value
        first[utt] = line_no
    return out, first


def split_hyp_key(key: str) -> Tuple[str, int]:
    """Split a hypothesis key ``<uttid>-<n>`` at the last ``-`` into ``(uttid, n)``.

    Raises:
        ValueError: no ``-``, an empty utterance id, or ``n`` is not a positive
            integer written in ASCII digits.
    """
    utt, sep, rank = key.rpartition("-")
    if not sep or not utt or not (rank.isascii() and rank.isdigit()) or int(rank) < 1:
        raise ValueError(f"hypothesis key {key!r} is not '<uttid>-<n>' with n >= 1")
    return utt, int(rank)


def read_symbol_table(path) -> Dict[int, str]:
    """``words.txt`` (``<sym> <id>``) as ``{id: sym}``. Raises DataError for a
    malformed line or an id used twice (``file:line``)."""
    table: Dict[int, str] = {}
    for line_no, line in iter_lines(path):
        fields = split_fields(line)
        loc = format_location(path, line_no)
        if len(fields) != 2:
            raise DataError(f"{loc}: expected '<symbol> <integer id>', found "
                            f"{len(fields)} fields")
        sym, sid = fields
        if not (sid.isascii() and sid.isdigit()):
            raise DataError(f"{loc}: id {sid!r} of symbol {sym!r} is not a non-negative "
                            f"integer (ASCII digits only, e.g. 42)")
        i = int(sid)
        if i in table:
            raise DataError(f"{loc}: id {i} is used twice ({table[i]!r} and {sym!r})")
        table[i] = sym
    return table


def _int_word_lines(words_path) -> Iterator[Tuple[int, str, List[str]]]:
    """``(line_no, key, id tokens)`` of every line of ``words``."""
    for line_no, line in iter_lines(words_path):
        fields = split_fields(line)
        if not fields:
            raise DataError(f"{format_location(words_path, line_no)}: blank line; "
                            f"expected '<key> [id ...]'")
        key = fields[0]
        if not key.isascii():
            check_key(key, format_location(words_path, line_no))
        yield line_no, key, fields[1:]


def _map_ids(tokens: List[str], table: Dict[int, str], words_path, line_no: int, key: str,
             table_path) -> Words:
    words = []
    for tok in tokens:
        try:
            if not (tok.isascii() and tok.isdigit()):
                raise ValueError
            words.append(table[int(tok)])
        except ValueError:
            raise DataError(f"{format_location(words_path, line_no)}: key {key!r}: "
                            f"word id {tok!r} is not a non-negative integer (ASCII "
                            f"digits only, e.g. 42)") from None
        except KeyError:
            raise DataError(f"{format_location(words_path, line_no)}: key {key!r}: "
                            f"word id {tok} is not in {table_path}") from None
    return tuple(words)


def iter_int_words(words_path, table: Dict[int, str], table_path) -> Iterator[Tuple[int, str, Words]]:
    """Stream ``words`` (``<key> id id ...``; bare key = empty) mapped through the
    symbol table of ``words.txt`` (:func:`read_symbol_table`): ``(line_no, key,
    words)`` per line. Duplicate keys are the caller's to find.

    Raises:
        DataError: a blank line, a key holding an invisible character, a word id that
            is not a non-negative integer or not in the table (``file:line``).
    """
    for line_no, key, tokens in _int_word_lines(words_path):
        yield line_no, key, _map_ids(tokens, table, words_path, line_no, key, table_path)


def _read_int_words(words_path, table_path) -> Tuple[Dict[str, Words], List[int]]:
    """``words`` (``<key> id id ...``; bare key = empty) mapped through ``words.txt``."""
    table = read_symbol_table(table_path)
    entries: Dict[str, Words] = {}
    lines: List[int] = []
    first: Dict[str, int] = {}
    for line_no, key, tokens in _int_word_lines(words_path):
        if key in entries:
            raise DataError(f"{format_location(words_path, line_no)}: duplicate key "
                            f"{key!r} (first on line {first[key]})")
        entries[key] = _map_ids(tokens, table, words_path, line_no, key, table_path)
        lines.append(line_no)
        first[key] = line_no
    return entries, lines


def _first_existing(directory: str, *names: str) -> Optional[str]:
    for name in names:
        if os.path.isfile(os.path.join(directory, name)):
            return name
    return None


def words_file(directory: str) -> str:
    """The hypothesis file of an N-best directory: ``text``, ``words_text`` or ``words``
    (with ``words.txt``). Raises DataError naming the names looked for."""
    name = _first_existing(directory, "text", "words_text")
    if name is not None:
        return name
    if os.path.isfile(os.path.join(directory, "words")) and os.path.isfile(os.path.join(directory, "words.txt")):
        return "words"
    hint = (" (found words but not its symbol table words.txt)"
            if os.path.isfile(os.path.join(directory, "words")) else "")
    raise DataError(f"{directory}: no hypothesis words: looked for 'text', "
                    f"'words_text', and 'words' + 'words.txt'{hint}")


def ac_file(directory: str) -> str:
    """The acoustic cost file: ``ac_cost`` or ``acwt``. Raises DataError when neither is there."""
    name = _first_existing(directory, "ac_cost", "acwt")
    if name is None:
        raise DataError(f"{directory}: no acoustic costs: looked for 'ac_cost', 'acwt'")
    return name


@dataclass(frozen=True)
class NgramFiles:
    """Where the n-gram cost comes from: the file ``lm``, minus ``graph`` when
    ``subtract_graph`` (``lmwt.withlm - lmwt.nolm``); ``graph`` (``lmwt.nolm``) is also
    the graph cost, None for none; ``desc`` says so in the reader's log line."""

    lm: str
    graph: Optional[str]
    subtract_graph: bool
    desc: str


def ngram_files(directory: str, words_name: str, lm_cost_name: Optional[str] = None) -> NgramFiles:
    """The n-gram (and graph) cost files of an N-best directory, first match wins (see
    the module docstring), or ``lm_cost_name`` as asked. Raises DataError naming the
    names looked for."""
    def there(name):
        return os.path.isfile(os.path.join(directory, name))

    if lm_cost_name is not None:
        if not there(lm_cost_name):
            raise DataError(f"{os.path.join(directory, lm_cost_name)}: file not found (the LM cost file asked "
                            f"for); expected a Kaldi archive '<hyp-key> <cost>' for every key of {words_name}")
        return NgramFiles(lm_cost_name, None, False, f"{lm_cost_name} (as asked), no graph cost")
    if there("lm_cost"):
        return NgramFiles("lm_cost", None, False, "lm_cost")
    if there("lmwt.lmonly"):
        if there("lmwt.nolm"):
            return NgramFiles("lmwt.lmonly", "lmwt.nolm", False, "lmwt.lmonly, graph cost lmwt.nolm")
        return NgramFiles("lmwt.lmonly", None, False, "lmwt.lmonly, no lmwt.nolm so graph cost 0")
    if there("lmwt.withlm") and there("lmwt.nolm"):
        return NgramFiles("lmwt.withlm", "lmwt.nolm", True, "lmwt.withlm - lmwt.nolm, graph cost lmwt.nolm")
    raise DataError(f"{directory}: no n-gram costs: looked for 'lm_cost', "
                    f"'lmwt.lmonly', and 'lmwt.withlm' + 'lmwt.nolm'")


def _check_same_keys(words_name: str, word_keys: Dict[str, Words], cost_name: str,
                     costs: Dict[str, float], directory: str) -> None:
    if len(costs) == len(word_keys) and all(k in costs for k in word_keys):
        return
    missing = [k for k in word_keys if k not in costs]
    extra = [k for k in costs if k not in word_keys]
    parts = []
    if missing:
        parts.append(f"{len(missing)} keys in {words_name} are missing from {cost_name}: "
                     f"{examples(missing)}")
    if extra:
        parts.append(f"{len(extra)} keys in {cost_name} are missing from {words_name}: "
                     f"{examples(extra)}")
    raise DataError(f"{directory}: hypothesis keys differ between {words_name} and "
                    f"{cost_name}: " + "; ".join(parts))


@dataclass(frozen=True)
class Documents:
    """The document of every utterance (``doc_of``), where it came from (``source``:
    ``utt2doc``, ``utt2spk`` or ``none``) and the reader's log phrase (``desc``)."""

    doc_of: Dict[str, str]
    source: str
    desc: str


def read_documents(directory: str, words_name: str, utt_line: Dict[str, int]) -> Documents:
    """The documents of the utterances ``utt_line`` (utterance id -> line of its first
    hypothesis in ``words_name``, in list order): ``utt2doc``, else ``utt2spk``, else
    one document per utterance.

    Raises:
        DataError: a malformed map, utterances without an entry (examples), or a
            document whose utterances are not consecutive (``file:line``, the fix).
    """
    def p(name):
        return os.path.join(directory, name)

    doc_name = _first_existing(directory, "utt2doc", "utt2spk")
    if doc_name is None:
        return Documents({u: u for u in utt_line}, "none", "no utt2doc or utt2spk: one document per utterance")
    utt2doc, doc_lines = read_utt_map_lines(p(doc_name))
    missing = [u for u in utt_line if u not in utt2doc]
    if missing:
        raise DataError(f"{p(doc_name)}: {len(missing)} utterances of "
                        f"{words_name} have no entry: {examples(missing)}")
    check_documents_contiguous(
        utt_line, utt2doc, p(doc_name), p(words_name), doc_lines,
        {u: format_location(p(words_name), n) for u, n in utt_line.items()})
    return Documents(utt2doc, doc_name, f"documents from {doc_name} ({len(set(utt2doc[u] for u in utt_line))})")


def read_kaldi_nbest_dir(path, *, log: Optional[Callable[[str], None]] = None,
                         lm_cost_name: Optional[str] = None) -> NbestSet:
    """Read an N-best directory into an :class:`~nbest_rescore.types.NbestSet`.

    See the module docstring for the file names looked for. Utterances keep the order
    of their first hypothesis in the words file; hypotheses of an utterance keep file
    order (first-pass rank order). Costs are float64 arrays of negated natural-log
    values (larger = worse): ``ac_cost`` acoustic, ``lm_cost`` n-gram (incl. ``</s>``),
    ``graph_cost`` Kaldi's ``lmwt.nolm`` or zeros.

    Args:
        path: the directory.
        log: called with one human-readable line saying which files and which document
            grouping were used (default: ``logging.getLogger(__name__).info``).
        lm_cost_name: the name of a cost file in the directory (e.g. ``lmwt.interp``)
            to read as ``lm_cost`` instead of looking for the n-gram cost files; the
            graph cost is then zero.

    Raises:
        DataError: ``path`` is not a directory; no words / acoustic / n-gram cost file
            (the message lists the names looked for), or no ``lm_cost_name`` file; a
            malformed line in any file
            (``file:line``); a hypothesis key that is not ``<uttid>-<n>`` with n >= 1
            (``file:line``); an unknown word id; key sets that differ between the words
            file and a cost file (a few examples each way); a NaN/infinite cost (key);
            an utterance missing from ``utt2doc``/``utt2spk`` (examples); a document
            whose utterances are not consecutive in the words file (``utt2doc:line``
            where it reappears, the document id, and the fix); a key or id holding a
            byte-order mark or zero-width character (``file:line``); a cost that is not
            a decimal number (``1_000``, ``nan``, ``inf``: ``file:line``); no hypotheses.
    """
    say = log if log is not None else logger.info
    directory = os.fspath(path)
    if not os.path.isdir(directory):
        raise DataError(f"{directory}: N-best directory not found")

    def p(name):
        return os.path.join(directory, name)

    # --- words
    words_name = words_file(directory)
    if words_name == "words":
        hyps, lines = _read_int_words(p("words"), p("words.txt"))
    else:
        hyps, lines = parse_kaldi_text(p(words_name))
    if not hyps:
        raise DataError(f"{p(words_name)}: no hypotheses")

    # --- costs
    ac_name = ac_file(directory)
    ac = read_cost_ark(p(ac_name))
    _check_same_keys(words_name, hyps, ac_name, ac, directory)

    lm_files = ngram_files(directory, words_name, lm_cost_name)
    lm = read_cost_ark(p(lm_files.lm))
    _check_same_keys(words_name, hyps, lm_files.lm, lm, directory)
    graph: Optional[Dict[str, float]] = None
    if lm_files.graph is not None:
        graph = read_cost_ark(p(lm_files.graph))
        _check_same_keys(words_name, hyps, lm_files.graph, graph, directory)
    if lm_files.subtract_graph:
        lm = {k: lm[k] - graph[k] for k in hyps}
    lm_desc = lm_files.desc

    # --- group hypotheses by utterance
    groups: Dict[str, List[str]] = {}
    utt_line: Dict[str, int] = {}
    for key, line_no in zip(hyps, lines):
        try:
            utt, _ = split_hyp_key(key)
        except ValueError as e:
            raise DataError(f"{format_location(p(words_name), line_no)}: {e}") from None
        if utt not in groups:
            groups[utt] = []
            utt_line[utt] = line_no
        groups[utt].append(key)

    # --- documents
    docs = read_documents(directory, words_name, utt_line)
    utt2doc, doc_source, doc_desc = docs.doc_of, docs.source, docs.desc

    utterances = []
    for utt, keys in groups.items():
        utterances.append(NbestList(
            utt_id=utt,
            doc_id=utt2doc[utt],
            keys=tuple(keys),
            hyps=tuple(hyps[k] for k in keys),
            ac_cost=np.array([ac[k] for k in keys], dtype=np.float64),
            lm_cost=np.array([lm[k] for k in keys], dtype=np.float64),
            graph_cost=(np.array([graph[k] for k in keys], dtype=np.float64)
                        if graph is not None else np.zeros(len(keys), dtype=np.float64)),
        ))
    say(f"{directory}: {len(utterances)} utterances, {len(hyps)} hypotheses; words "
        f"{words_name}, acoustic {ac_name}, n-gram {lm_desc}; {doc_desc}")
    return NbestSet(utterances=tuple(utterances), doc_source=doc_source, source=directory)
