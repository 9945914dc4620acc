"""Kaldi-style N-best directories: file names (first match wins, :func:`kaldi_files`),
line formats, keys ``<uttid>-<n>`` and costs (negated natural log) as in docs/formats.md
("Kaldi N-best directory"). With the Kaldi names the graph cost is ``lmwt.nolm``, else
zero. An utterance's hypotheses are on consecutive lines, and a document's utterances
(``utt2doc``, ``utt2spk``, else one per utterance) consecutive in the words file.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np

from ..errors import DataError, examples, format_location
from ..types import NbestList, NbestSet, Words
from ._common import DocumentOrder, check_key, iter_pairs
from .cost_column import CostColumn
from .kaldi_text import iter_int_words, iter_kaldi_text, kaldi_text_lines, read_symbol_table
from .nbest_writer import NbestWriter, open_files, write_parts
from .score_ark import cost_ark_lines
from .spans import StreamSource, open_stream

__all__ = ["KALDI_WRITTEN", "KaldiNbestWriter", "iter_kaldi_nbest", "kaldi_nbest_files", "open_kaldi_nbest",
           "read_kaldi_nbest_dir", "read_utt_map", "split_hyp_key", "write_kaldi_nbest_files"]

logger = logging.getLogger(__name__)


def read_utt_map(path) -> Dict[str, str]:
    """A two-column Kaldi map (``utt2doc``, ``utt2spk``) as ``{uttid: value}`` in file order.

    Raises:
        DataError: the file is missing, a line does not have exactly 2 fields, an
            utterance id occurs twice, or a field holds a byte-order mark or zero-width
            character (``path:line``).
    """
    return read_utt_map_lines(path)[0]


def read_utt_map_lines(path, what: str = "utterance id") -> Tuple[Dict[str, str], Dict[str, int]]:
    """:func:`read_utt_map`, also returning ``{uttid: 1-based line}`` (for messages)."""
    out: Dict[str, str] = {}
    first: Dict[str, int] = {}
    for line_no, loc, utt, value in iter_pairs(path, "expected 2 fields '<uttid> <id>', found {n}"):
        check_key(utt, loc, what)
        check_key(value, loc, "id")
        if utt in out:
            raise DataError(f"{loc}: duplicate {what} {utt!r} (first on line {first[utt]})")
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


@dataclass(frozen=True)
class KaldiFiles:
    """The file names found in ``directory`` (:func:`kaldi_files`): ``lm`` minus ``graph``
    when ``subtract_graph``; ``graph``/``docs`` None: zero / one document per utterance."""

    directory: str
    words: str
    ac: str
    lm: str
    graph: Optional[str]
    subtract_graph: bool
    lm_desc: str
    docs: Optional[str]

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    @property
    def doc_source(self) -> str:
        """``utt2doc``, ``utt2spk`` or ``none`` (see :class:`~nbest_rescore.types.NbestSet`)."""
        return self.docs or "none"

    def cost_names(self) -> Tuple[str, ...]:
        """The cost files in the order read: acoustic, n-gram, then graph (if any)."""
        return (self.ac, self.lm) + ((self.graph,) if self.graph else ())

    def paths(self) -> Tuple[str, ...]:
        """Every file the reader reads: the words (and ``words.txt``), the costs, the document map."""
        table = ("words.txt",) if self.words == "words" else ()
        return tuple(self.path(n) for n in (self.words, *table, *self.cost_names(), *filter(None, (self.docs,))))

    def word_lines(self) -> Iterator[Tuple[int, str, Words]]:
        """``(line_no, key, words)`` of every line of the words file (ids mapped
        through ``words.txt``). Raises DataError for a malformed line (``file:line``)."""
        if self.words == "words":
            table = read_symbol_table(self.path("words.txt"))
            return iter_int_words(self.path("words"), table, self.path("words.txt"))
        return iter_kaldi_text(self.path(self.words))


def is_regular_file(path: str, role: str) -> bool:
    """Whether ``path`` is a regular file (False when nothing is there). Raises DataError
    when something else is (a directory, a named pipe, a device), naming it and ``role``:
    it must not be skipped silently, and a reader's message reads its files again."""
    import stat

    from ..os_errors import file_kind

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise DataError(f"{path}: cannot be read as {role}: {exc.strerror}; check its permissions") from None
    if stat.S_ISREG(mode):
        return True
    kind = file_kind(mode)
    fix = "write what it streams to a regular file first" if stat.S_ISFIFO(mode) else "replace it with a regular file"
    raise DataError(f"{path} is {kind}, but nbest-rescore reads it as {role}: expected a regular file; {fix} "
                    f"(or remove it)")


def _ngram_files(directory: str, there: Callable[[str], bool], words: str,
                 lm_cost_name: Optional[str]) -> Tuple[str, Optional[str], bool, str]:
    """``(lm, graph, subtract_graph, desc)``: the n-gram (and graph) cost files, first
    match wins, or ``lm_cost_name`` as asked. Raises DataError naming the names looked for."""
    if lm_cost_name is not None:
        if not there(lm_cost_name):
            raise DataError(f"{os.path.join(directory, lm_cost_name)}: file not found (the LM cost file asked "
                            f"for); expected a Kaldi archive '<hyp-key> <cost>' for every key of {words}")
        return lm_cost_name, None, False, f"{lm_cost_name} (as asked), no graph cost"
    if there("lm_cost"):
        return "lm_cost", None, False, "lm_cost"
    if there("lmwt.lmonly"):
        if there("lmwt.nolm"):
            return "lmwt.lmonly", "lmwt.nolm", False, "lmwt.lmonly, graph cost lmwt.nolm"
        return "lmwt.lmonly", None, False, "lmwt.lmonly, no lmwt.nolm so graph cost 0"
    if there("lmwt.withlm") and there("lmwt.nolm"):
        return "lmwt.withlm", "lmwt.nolm", True, "lmwt.withlm - lmwt.nolm, graph cost lmwt.nolm"
    raise DataError(f"{directory}: no n-gram costs: looked for 'lm_cost', "
                    f"'lmwt.lmonly', and 'lmwt.withlm' + 'lmwt.nolm'")


def kaldi_files(path, lm_cost_name: Optional[str] = None) -> KaldiFiles:
    """The files of the N-best directory ``path``, first match wins (see the module
    docstring; ``lm_cost_name``: as :func:`read_kaldi_nbest_dir`).

    Raises:
        DataError: not a directory, or no words / acoustic / n-gram cost file (the
            names looked for), or no ``lm_cost_name`` file.
    """
    directory = os.fspath(path)
    if not os.path.isdir(directory):
        raise DataError(f"{directory}: N-best directory not found")

    def there(name: str) -> bool:
        return is_regular_file(os.path.join(directory, name), f"the '{name}' file of an N-best directory")

    words = next((n for n in ("text", "words_text") if there(n)), None)
    words = words or ("words" if there("words") and there("words.txt") else None)
    if words is None:
        hint = " (found words but not its symbol table words.txt)" if there("words") else ""
        raise DataError(f"{directory}: no hypothesis words: looked for 'text', "
                        f"'words_text', and 'words' + 'words.txt'{hint}")
    ac = next((n for n in ("ac_cost", "acwt") if there(n)), None)
    if ac is None:
        raise DataError(f"{directory}: no acoustic costs: looked for 'ac_cost', 'acwt'")
    return KaldiFiles(directory, words, ac, *_ngram_files(directory, there, words, lm_cost_name),
                      next((n for n in ("utt2doc", "utt2spk") if there(n)), None))


def kaldi_nbest_files(path, lm_cost_name: Optional[str] = None) -> Tuple[str, ...]:
    """Every file :func:`read_kaldi_nbest_dir` reads in the N-best directory ``path``
    (:meth:`KaldiFiles.paths`: those :func:`kaldi_files` finds, first match wins).
    Raises DataError as :func:`kaldi_files`."""
    return kaldi_files(path, lm_cost_name).paths()


def _hypotheses(files: KaldiFiles) -> Iterator[Tuple[int, str, str, Words]]:
    """``(line_no, key, utterance id, words)`` of every hypothesis, checking that keys
    are ``<uttid>-<n>``, unique, and an utterance's hypotheses on consecutive lines."""
    path = files.path(files.words)
    seen = "first on line" if files.words == "words" else "first seen on line"
    started: Dict[str, int] = {}  # utterance -> line of its first hypothesis
    current, key_lines = None, {}
    for line_no, key, words in files.word_lines():
        loc = format_location(path, line_no)
        try:
            utt, _ = split_hyp_key(key)
        except ValueError as e:
            raise DataError(f"{loc}: {e}") from None
        if utt != current:
            if utt in started:
                raise DataError(
                    f"{loc}: hypothesis {key!r} of utterance {utt!r} follows utterance {current!r}, but "
                    f"{utt!r} already had hypotheses from line {started[utt]} on; expected the hypotheses of "
                    f"an utterance on consecutive lines (as Kaldi writes them); fix: move all lines of "
                    f"{utt!r} together (in rank order), keeping the utterances in spoken order")
            started[utt], current, key_lines = line_no, utt, {}
        if key in key_lines:
            raise DataError(f"{loc}: duplicate key {key!r} ({seen} {key_lines[key]})")
        key_lines[key] = line_no
        yield line_no, key, utt, words


def _keys_differ(files: KaldiFiles, name: str, column: CostColumn) -> DataError:
    """The error for a cost file whose keys are not those of the words file (both
    read whole: the message counts and shows the keys missing each way)."""
    keys = {key: None for _, key, _ in files.word_lines()}
    costs = column.table()
    missing, extra = [k for k in keys if k not in costs], [k for k in costs if k not in keys]
    parts = [f"{len(ks)} keys in {a} are missing from {b}: {examples(ks)}"
             for ks, a, b in ((missing, files.words, name), (extra, name, files.words)) if ks]
    return DataError(f"{files.directory}: hypothesis keys differ between {files.words} and {name}: "
                     + "; ".join(parts or ["the files changed while they were read"]))


def _rows(files: KaldiFiles) -> Iterator[Tuple[int, str, str, Words, List[float]]]:
    """Every hypothesis with its costs (acoustic, n-gram, graph), the cost files read
    alongside the words (:class:`~.cost_column.CostColumn`)."""
    names = files.cost_names()
    columns = [CostColumn(files.path(n)) for n in names]
    n = 0
    for line_no, key, utt, words in _hypotheses(files):
        values = [c.take(key) for c in columns]
        for name, column, value in zip(names, columns, values):
            if value is None:
                raise _keys_differ(files, name, column)
        n += 1
        yield line_no, key, utt, words, values
    if not n:
        raise DataError(f"{files.path(files.words)}: no hypotheses")
    for name, column in zip(names, columns):
        if column.extra():
            raise _keys_differ(files, name, column)


class _Documents:
    """The document of each utterance, in list order: from ``utt2doc``/``utt2spk``
    (checked: every utterance listed, documents consecutive), else the utterance."""

    def __init__(self, files: KaldiFiles):
        self.files = files
        self.doc_of, self.lines = read_utt_map_lines(files.path(files.docs)) if files.docs else ({}, {})
        self.order = DocumentOrder(files.path(files.docs or ""), files.path(files.words))

    def of(self, utt: str, line_no: int) -> str:
        """The document of ``utt`` (first hypothesis on ``line_no`` of the words file)."""
        if self.files.docs is None:
            return utt
        doc = self.doc_of.get(utt)
        if doc is None:
            utts = dict.fromkeys(key.rpartition("-")[0] for _, key, _ in self.files.word_lines())
            missing = [u for u in utts if u not in self.doc_of]
            raise DataError(f"{self.files.path(self.files.docs)}: {len(missing)} utterances of "
                            f"{self.files.words} have no entry: {examples(missing)}")
        self.order.add(utt, doc, self.lines[utt], format_location(self.files.path(self.files.words), line_no))
        return doc

    def desc(self) -> str:
        if self.files.docs is None:
            return "no utt2doc or utt2spk: one document per utterance"
        return f"documents from {self.files.docs} ({self.order.count})"


def _nbest_list(files: KaldiFiles, docs: _Documents, group: list) -> NbestList:
    """One utterance's list from its rows (:func:`_rows`)."""
    line_no, _, utt, _, _ = group[0]
    costs = list(zip(*(row[4] for row in group)))
    lm, graph = costs[1], (costs[2] if files.graph is not None else None)
    if files.subtract_graph:
        lm = [a - b for a, b in zip(lm, graph)]
    return NbestList(utt_id=utt, doc_id=docs.of(utt, line_no), keys=tuple(row[1] for row in group),
                     hyps=tuple(row[3] for row in group), ac_cost=np.array(costs[0], dtype=np.float64),
                     lm_cost=np.array(lm, dtype=np.float64),
                     graph_cost=(np.array(graph, dtype=np.float64) if graph is not None
                                 else np.zeros(len(group), dtype=np.float64)))


def iter_kaldi_nbest(path, *, log: Optional[Callable[[str], None]] = None,
                     lm_cost_name: Optional[str] = None) -> Iterator[NbestList]:
    """:func:`read_kaldi_nbest_dir` one utterance at a time, the cost files read in lock-step with the words
    file (:class:`~.cost_column.CostColumn`): arguments, units and errors as it, each list yielded once
    checked (errors when the iteration reaches them); the log line comes after the last list."""
    files = kaldi_files(path, lm_cost_name)
    docs = _Documents(files)
    n_utts = n_hyps = 0
    for _, rows in groupby(_rows(files), key=itemgetter(2)):
        group = list(rows)
        yield _nbest_list(files, docs, group)
        n_utts, n_hyps = n_utts + 1, n_hyps + len(group)
    (log if log is not None else logger.info)(
        f"{files.directory}: {n_utts} utterances, {n_hyps} hypotheses; words {files.words}, "
        f"acoustic {files.ac}, n-gram {files.lm_desc}; {docs.desc()}")


def read_kaldi_nbest_dir(path, *, log: Optional[Callable[[str], None]] = None,
                         lm_cost_name: Optional[str] = None) -> NbestSet:
    """Read an N-best directory (module docstring) into an
    :class:`~nbest_rescore.types.NbestSet` in file order (:func:`iter_kaldi_nbest`, all
    at once); float64 costs: ``ac_cost``, ``lm_cost`` (incl. ``</s>``), ``graph_cost``.

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
            malformed line in any file (``file:line``); a hypothesis key that is not
            ``<uttid>-<n>`` with n >= 1 (``file:line``); a duplicate key, or hypotheses
            of an utterance that are not on consecutive lines (``file:line``, the fix);
            an unknown word id; key sets that differ between the words file and a cost
            file (a few examples each way); an utterance missing from
            ``utt2doc``/``utt2spk`` (examples); a document whose utterances are not
            consecutive in the words file (``utt2doc:line`` where it reappears, the
            document id, and the fix); a key or id holding a byte-order mark or
            zero-width character (``file:line``); a cost that is not a decimal number
            (``1_000``, ``nan``, ``inf``: ``file:line``); no hypotheses.
    """
    lists = tuple(iter_kaldi_nbest(path, log=log, lm_cost_name=lm_cost_name))
    return NbestSet(utterances=lists, doc_source=kaldi_files(path, lm_cost_name).doc_source, source=os.fspath(path))


def open_kaldi_nbest(path, *, log: Optional[Callable[[str], None]] = None,
                     lm_cost_name: Optional[str] = None) -> StreamSource:
    """:func:`iter_kaldi_nbest` read once into a span source (:func:`~.spans.open_stream`).
    Raises DataError as :func:`read_kaldi_nbest_dir`."""
    files = kaldi_files(path, lm_cost_name)
    return open_stream(iter_kaldi_nbest(path, log=log, lm_cost_name=lm_cost_name), files.directory,
                       lambda: {"doc_source": files.doc_source})


#: Every file :func:`write_kaldi_nbest_files` may write.
KALDI_WRITTEN = ("text", "ac_cost", "lm_cost", "lmwt.lmonly", "lmwt.nolm", "utt2doc", "ref.txt")
#: The cost files with a graph cost and without, file name -> :class:`~nbest_rescore.types.NbestList` field.
_GRAPH_COLUMNS = {"ac_cost": "ac_cost", "lmwt.lmonly": "lm_cost", "lmwt.nolm": "graph_cost"}
_NO_GRAPH_COLUMNS = {"ac_cost": "ac_cost", "lm_cost": "lm_cost"}


class KaldiNbestWriter(NbestWriter):
    """The writer (:class:`~.nbest_writer.NbestWriter`) of :func:`write_kaldi_nbest_files`,
    part after part into the existing ``folder``. With ``with_graph`` None the n-gram
    costs go to ``lm_cost`` and the graph costs to ``lmwt.nolm``; when the files are in
    place, ``lm_cost`` becomes ``lmwt.lmonly`` if some graph cost was not 0, else
    ``lmwt.nolm`` is removed (the same files as when it is known beforehand)."""

    def __init__(self, folder, refs: Optional[Mapping[str, Words]] = None, with_graph: Optional[bool] = None):
        self.folder, self.refs, self.with_graph = Path(folder), refs, with_graph
        self.columns = dict(_GRAPH_COLUMNS if with_graph else _NO_GRAPH_COLUMNS)
        if with_graph is None:
            self.columns["lmwt.nolm"] = "graph_cost"
        self.graph_seen = False

    def _open(self, stack) -> None:
        self._files = open_files(stack, self.folder, ("text", *self.columns, "utt2doc")
                                 + (() if self.refs is None else ("ref.txt",)))

    def write(self, part: NbestSet) -> None:
        utts, files = part.utterances, self._files
        files["text"].writelines(kaldi_text_lines((k, h) for u in utts for k, h in zip(u.keys, u.hyps)))
        for name, attr in self.columns.items():
            costs = ((k, c) for u in utts for k, c in zip(u.keys, getattr(u, attr).tolist()))
            files[name].writelines(cost_ark_lines(costs, self.folder / name))
        files["utt2doc"].writelines(f"{u.utt_id} {u.doc_id}\n" for u in utts)
        if self.refs is not None:
            files["ref.txt"].writelines(kaldi_text_lines((u.utt_id, self.refs[u.utt_id]) for u in utts
                                                         if u.utt_id in self.refs))
        self.graph_seen = self.graph_seen or any(np.any(u.graph_cost) for u in utts)

    def _finish(self) -> None:
        if self.with_graph is None and self.graph_seen:
            os.replace(self.folder / "lm_cost", self.folder / "lmwt.lmonly")
        elif self.with_graph is None:
            os.unlink(self.folder / "lmwt.nolm")

    @property
    def names(self) -> Tuple[str, ...]:
        graph = self.graph_seen if self.with_graph is None else self.with_graph
        return ("text", *(_GRAPH_COLUMNS if graph else _NO_GRAPH_COLUMNS), "utt2doc") + \
            (() if self.refs is None else ("ref.txt",))


def write_kaldi_nbest_files(folder, nbest: NbestSet, refs: Optional[Mapping[str, Words]] = None,
                            with_graph: Optional[bool] = None) -> Tuple[str, ...]:
    """Write ``nbest`` into the existing ``folder`` in the benchmark layout that
    :func:`read_kaldi_nbest_dir` reads back: ``text`` (the keys as they are),
    ``ac_cost`` and ``lm_cost`` (or, with a graph cost, ``lmwt.lmonly`` and
    ``lmwt.nolm``), ``utt2doc``, and ``ref.txt`` (the lines of ``refs`` for these
    utterances) when ``refs`` is given. Costs (negated natural logs) have 6 decimals
    (``%.6f``, :func:`~.score_ark.cost_ark_line`). Each file is written atomically, part
    after part by :class:`KaldiNbestWriter` (:mod:`.nbest_writer`).

    Args:
        with_graph: write the graph cost files; None: when any graph cost is non-zero.
    Returns:
        the names written, in order.
    Raises:
        DataError: a key, word or id that is empty or holds white space, a repeated
            key, a cost that is not finite (nothing more is written then).
    """
    return write_parts(KaldiNbestWriter(folder, refs, with_graph), [nbest])
