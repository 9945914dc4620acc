"""JSON Lines N-best lists: one utterance per line, as docs/formats.md ("JSON Lines")
says and its JSON Schema checks::

    {"utt_id": "u1", "document": "d1",
     "hypotheses": [{"words": ["a", "b"], "scores": {"ac_cost": 12.5, "lm_cost": 3.25}}, ...]}

Costs are negated natural logs, larger = worse, as in :class:`~nbest_rescore.types.NbestList`
and the Kaldi ``ac_cost``/``lm_cost`` files: a decoder with log-probabilities writes
``ac_cost = -log p``. ``ac_cost`` and ``lm_cost`` are required, ``graph_cost`` optional
(0); or, for an end-to-end decoder, ``total_cost`` alone (the first-pass total, -log;
every hypothesis of the file then has it: :mod:`.total_scores`). Other score names are
allowed (checked as finite numbers) and ignored. Hypothesis
keys are ``<utt_id>-<n>`` (n = 1, 2, ... in list order). ``document`` is optional: on
every line or on none; without it each utterance is its own document. A document's
utterances are consecutive lines, in spoken order. Blank lines are skipped.
:func:`write_jsonl_nbest` writes what the readers read back exactly (:func:`~._common.float_text`).
"""
from __future__ import annotations

import json
import logging
import math
import os
import zlib
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..errors import DataError, format_location
from ..types import NbestList, NbestSet, Words
from ._common import (GZIP_SUFFIX, UTF8_BOM, DocumentOrder, check_key, check_ranked_keys, file_kind, float_text,
                      is_gzip_name, iter_lines, open_text_input, split_fields)
from .atomic import atomic_write
from .nbest_writer import NbestWriter, write_parts
from .spans import StreamSource, open_stream
from .total_scores import TOTAL_COST, check_total_scores

__all__ = ["GZIP_SUFFIX", "JSONL_SUFFIX", "JsonlNbestWriter", "is_gzip_name", "is_jsonl", "iter_jsonl_nbest",
           "jsonl_line", "open_jsonl_nbest", "read_jsonl_nbest", "write_jsonl_nbest"]

logger = logging.getLogger(__name__)

#: A file whose name ends so is JSON Lines (:func:`is_jsonl`).
JSONL_SUFFIX = ".jsonl"
#: The costs a hypothesis must have (negated natural logs), and the optional one.
REQUIRED_SCORES = ("ac_cost", "lm_cost")
OPTIONAL_SCORES = ("graph_cost",)
#: The costs that hold a hypothesis' first pass: the split ones, or the one total.
_SPLIT, _TOTAL = REQUIRED_SCORES + OPTIONAL_SCORES, (TOTAL_COST,)
_FIELDS = ("utt_id", "document", "hypotheses")
_HYP_FIELDS = ("words", "scores")
_EXAMPLE = ('{"utt_id": "u1", "document": "d1", "hypotheses": [{"words": ["a", "b"], '
            '"scores": {"ac_cost": 12.5, "lm_cost": 3.25}}]}')
#: ``doc_source`` of a set read from JSON Lines with ``document`` fields (without: ``none``).
DOC_SOURCE = "document fields"


def is_jsonl(path) -> bool:
    """Whether the file ``path`` is JSON Lines: its name ends in ``.jsonl`` (or
    ``.jsonl.gz``), or its first byte that is not white space (after a UTF-8 byte-order
    mark; of the decompressed text for a name ending in ``.gz``) is ``{``. A plain N-best
    line starts with a digit, so the two cannot be confused. False for a folder, or a
    ``.gz`` file that is not gzip data."""
    return file_kind(path, (JSONL_SUFFIX, JSONL_SUFFIX + GZIP_SUFFIX), _starts_with_brace)


def _starts_with_brace(path: str) -> bool:
    try:
        with open_text_input(path) as fh:
            head = fh.read(4096).removeprefix(UTF8_BOM)
            while head and not head.strip():
                head = fh.read(4096)
    except (EOFError, zlib.error):
        return False
    return head.lstrip()[:1] == b"{"


def _reject_constant(token: str):
    raise ValueError(f"{token} is not a JSON number (costs must be finite)")


def _unique_keys(pairs):
    keys = [k for k, _ in pairs]
    dup = next((k for k in keys if keys.count(k) > 1), None)
    if dup is not None:
        raise ValueError(f"the key {dup!r} is given twice in one object")
    return dict(pairs)


def _parse(line: str, loc: str) -> dict:
    """The JSON object of one line. Raises DataError (invalid JSON, NaN/Infinity, a key
    given twice, not an object)."""
    try:
        obj = json.loads(line, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as e:
        raise DataError(f"{loc}: invalid JSON ({e.msg} at column {e.colno}); expected one JSON object per line, "
                        f"e.g. {_EXAMPLE}") from None
    except ValueError as e:
        raise DataError(f"{loc}: {e}; fix the line (one JSON object per line, e.g. {_EXAMPLE})") from None
    if not isinstance(obj, dict):
        raise DataError(f"{loc}: expected a JSON object {{\"utt_id\": ..., \"hypotheses\": [...]}} per line, found "
                        f"{type(obj).__name__} {line.strip()[:40]!r}")
    return obj


def _unknown(obj: dict, allowed: Tuple[str, ...], loc: str, what: str) -> None:
    extra = [k for k in obj if k not in allowed]
    if extra:
        raise DataError(f"{loc}: {what}: unknown field {extra[0]!r}; expected only {', '.join(allowed)} "
                        f"(misspelt? other scores go inside 'scores')")


def _token(value) -> bool:
    """Whether ``value`` is a non-empty string without (ASCII) white space that UTF-8
    can encode (JSON's ``\\ud800`` escapes give lone surrogates, which it cannot)."""
    if not isinstance(value, str) or not value or split_fields(value) != [value]:
        return False
    try:
        return value.isascii() or bool(value.encode("utf-8"))
    except UnicodeEncodeError:
        return False


def _id(obj: dict, name: str, loc: str) -> str:
    """``obj[name]`` checked as an id: a non-empty string without white space or
    invisible characters (it names keys and Kaldi files)."""
    value = obj[name]
    if not _token(value):
        raise DataError(f"{loc}: '{name}' must be a non-empty string without white space, found {value!r}; "
                        f"e.g. \"{name}\": \"abcr0004-000\"")
    return check_key(value, loc, name)


def _words(hyp: dict, loc: str, where: str) -> Words:
    words = hyp["words"]
    if not isinstance(words, list):
        raise DataError(f"{loc}: {where}: 'words' must be a list of strings, found {type(words).__name__} "
                        f"{words!r:.40}; e.g. \"words\": [\"some\", \"farmers\"] ([] for an empty hypothesis)")
    for w in words:
        if not _token(w):
            raise DataError(f"{loc}: {where}: word {w!r} must be a non-empty string without white space; "
                            f"write one word per list item, e.g. [\"some\", \"farmers\"]")
    return tuple(words)


def _number(value, loc: str, what: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            v = float(value)
        except OverflowError:
            v = math.inf
        if math.isfinite(v):
            return v
    raise DataError(f"{loc}: {what} must be a finite number, found {value!r:.40}; write a JSON number such as "
                    f"-12.5 or 3 (a cost is -log p in natural log)")


def _scores(hyp: dict, loc: str, where: str) -> Tuple[float, float, float, bool]:
    """``(ac_cost, lm_cost, graph_cost, total?)`` of one hypothesis (every score
    checked); a ``total_cost`` is returned as ``(total_cost, 0, 0, True)``."""
    scores = hyp["scores"]
    if not isinstance(scores, dict):
        raise DataError(f"{loc}: {where}: 'scores' must be an object, found {type(scores).__name__}; e.g. "
                        f"\"scores\": {{\"ac_cost\": 12.5, \"lm_cost\": 3.25}}")
    values = {k: _number(v, loc, f"{where}: score {k!r}") for k, v in scores.items()}
    if TOTAL_COST in scores:
        both = [k for k in _SPLIT if k in scores]
        if both:
            raise DataError(f"{loc}: {where}: 'scores' has both {TOTAL_COST!r} and {both[0]!r}; give either "
                            f"ac_cost and lm_cost (and graph_cost) or {TOTAL_COST} alone (one first-pass total)")
        return values[TOTAL_COST], 0.0, 0.0, True
    missing = [k for k in REQUIRED_SCORES if k not in scores]
    if missing:
        raise DataError(f"{loc}: {where}: 'scores' has no {missing[0]!r}; expected {' and '.join(REQUIRED_SCORES)} "
                        f"(negated natural logs: ac_cost = -log p(audio | words), lm_cost = -log p(words)), or "
                        f"{TOTAL_COST} alone (an end-to-end decoder's total, -log)")
    return values["ac_cost"], values["lm_cost"], values.get("graph_cost", 0.0), False


def _hypotheses(obj: dict, loc: str) -> List[Tuple[Words, float, float, float, bool]]:
    """``[(words, ac_cost, lm_cost, graph_cost, total?), ...]`` of one line's ``hypotheses``."""
    hyps = obj["hypotheses"]
    if not isinstance(hyps, list) or not hyps:
        found = "an empty list" if isinstance(hyps, list) else f"{type(hyps).__name__}"
        raise DataError(f"{loc}: 'hypotheses' must be a non-empty list of {{\"words\": [...], \"scores\": {{...}}}} "
                        f"objects, found {found}; drop an utterance without hypotheses")
    out = []
    for n, hyp in enumerate(hyps, start=1):
        where = f"hypothesis {n}"
        if not isinstance(hyp, dict):
            raise DataError(f"{loc}: {where} must be an object {{\"words\": [...], \"scores\": {{...}}}}, found "
                            f"{type(hyp).__name__}")
        _unknown(hyp, _HYP_FIELDS, loc, where)
        absent = [k for k in _HYP_FIELDS if k not in hyp]
        if absent:
            raise DataError(f"{loc}: {where} has no {absent[0]!r}; expected {{\"words\": [...], \"scores\": "
                            f"{{\"ac_cost\": ..., \"lm_cost\": ...}}}}")
        out.append((_words(hyp, loc, where), *_scores(hyp, loc, where)))
    return out


class _Lines:
    """The state of one reading pass: which utterances were seen (and where), whether
    the lines have documents, the document order (:class:`~._common.DocumentOrder`)."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.seen: Dict[str, int] = {}
        self.has_docs: Optional[Tuple[bool, int]] = None  # (documents?, the first line) once decided
        self.total: Optional[Tuple[bool, int]] = None  # (total_cost?, the first line) once decided
        self.order = DocumentOrder(self.path, self.path)
        self.other: Dict[str, int] = {}  # score names beyond the known ones -> the first line with each

    def lists(self, log: Optional[Callable[[str], None]] = None) -> Iterator[NbestList]:
        """The lists of the file, each yielded once its line is checked (:func:`iter_jsonl_nbest`)."""
        if os.path.isdir(self.path):
            raise DataError(f"{self.path}: is a folder; expected a JSON Lines file (one utterance per line)")
        n_utts = n_hyps = 0
        for line_no, line in iter_lines(self.path):
            if not line.strip():
                continue
            u = self.nbest_list(line_no, line)
            yield u
            n_utts, n_hyps = n_utts + 1, n_hyps + len(u)
        if not n_utts:
            raise DataError(f"{self.path}: no utterances (the file is empty or blank); expected one JSON object per "
                            f"line, e.g. {_EXAMPLE}")
        (log if log is not None else logger.info)(self.describe(n_utts, n_hyps))

    def meta(self) -> dict:
        """What the lists read hold (:class:`~.spans.NbestIndex`): ``doc_source``
        (``document fields`` or ``none``), ``total_scores``, ``other_scores``."""
        return {"doc_source": DOC_SOURCE if self.has_docs and self.has_docs[0] else "none",
                "total_scores": bool(self.total and self.total[0]), "other_scores": tuple(self.other.items())}

    def nbest_list(self, line_no: int, line: str) -> NbestList:
        """The list of one line, every check of :func:`read_jsonl_nbest` done."""
        loc = format_location(self.path, line_no)
        obj = _parse(line, loc)
        _unknown(obj, _FIELDS, loc, "utterance")
        for name in ("utt_id", "hypotheses"):
            if name not in obj:
                raise DataError(f"{loc}: no {name!r} field; expected e.g. {_EXAMPLE}")
        utt = _id(obj, "utt_id", loc)
        if utt in self.seen:
            raise DataError(f"{loc}: duplicate utt_id {utt!r} (first on line {self.seen[utt]}); each utterance must "
                            f"be one line: merge the two lines' hypotheses or rename one utterance")
        self.seen[utt] = line_no
        doc = self._document(obj, utt, line_no, loc)
        hyps = _hypotheses(obj, loc)
        words, ac, lm, graph, total = zip(*hyps)
        self._kind(total, line_no, loc)
        for name in (n for hyp in obj["hypotheses"] for n in hyp["scores"] if n not in _SPLIT + _TOTAL):
            self.other.setdefault(name, line_no)
        return NbestList(utt_id=utt, doc_id=doc, keys=tuple(f"{utt}-{n}" for n in range(1, len(hyps) + 1)),
                         hyps=words, ac_cost=np.array(ac, dtype=np.float64), lm_cost=np.array(lm, dtype=np.float64),
                         graph_cost=np.array(graph, dtype=np.float64))

    def _kind(self, total: Tuple[bool, ...], line_no: int, loc: str) -> None:
        """Every hypothesis of the file has ``total_cost``, or none has."""
        if self.total is None:
            self.total = (total[0], line_no)
        if any(t != self.total[0] for t in total):
            n = 1 + next(i for i, t in enumerate(total) if t != self.total[0])
            first = f"line {self.total[1]}" if self.total[1] != line_no else "hypothesis 1"
            has, other = (TOTAL_COST, "ac_cost/lm_cost") if self.total[0] else ("ac_cost/lm_cost", TOTAL_COST)
            raise DataError(f"{loc}: hypothesis {n} has {other} but {first} has {has}; give every hypothesis of the "
                            f"file the same kind of scores (ac_cost and lm_cost, or {TOTAL_COST} alone)")

    def _document(self, obj: dict, utt: str, line_no: int, loc: str) -> str:
        has = "document" in obj
        if self.has_docs is None:
            self.has_docs = (has, line_no)
        elif has != self.has_docs[0]:
            which = "has no" if self.has_docs[0] else "has a"
            raise DataError(f"{loc}: this line {which} 'document' but line {self.has_docs[1]} "
                            f"{'has one' if self.has_docs[0] else 'has none'}; give every line a document or none "
                            f"(none: each utterance is its own document)")
        doc = _id(obj, "document", loc) if has else utt
        self.order.add(utt, doc, line_no)
        return doc

    def describe(self, n_utts: int, n_hyps: int) -> str:
        docs = (f"documents from the 'document' fields ({self.order.count})" if self.has_docs and self.has_docs[0]
                else "no 'document' fields: one document per utterance")
        kind = f"; one {TOTAL_COST} per hypothesis (no n-gram term)" if self.total and self.total[0] else ""
        return f"{self.path}: {n_utts} utterances, {n_hyps} hypotheses (JSON Lines); {docs}{kind}"


def iter_jsonl_nbest(path, *, log: Optional[Callable[[str], None]] = None) -> Iterator[NbestList]:
    """:func:`read_jsonl_nbest` one line (utterance) at a time: units and errors as it (raised when the
    iteration reaches them), each list yielded once checked; the log line comes after the last list."""
    return _Lines(path).lists(log)


def read_jsonl_nbest(path, *, log: Optional[Callable[[str], None]] = None) -> NbestSet:
    """Read a JSON Lines N-best file (module docstring, docs/formats.md) into an
    :class:`~nbest_rescore.types.NbestSet` in file order: float64 costs (negated natural
    logs) ``ac_cost``, ``lm_cost``, ``graph_cost`` (0 where absent); keys
    ``<utt_id>-<n>``; ``doc_source`` ``document fields``, or ``none`` (one document per
    utterance) without them. A file of ``total_cost`` scores gives ``ac_cost`` = the
    total cost, ``lm_cost`` = ``graph_cost`` = 0 and ``total_scores`` set.

    Args:
        path: the file (UTF-8; a byte-order mark at its start is dropped).
        log: called with one line saying what was read (default: the module logger).
    Raises:
        DataError: one line naming ``file:line``, what was expected and the fix, for:
            bytes that are not UTF-8; invalid JSON, ``NaN``/``Infinity``, a key given
            twice in an object; a line that is not an object; an unknown, missing or
            wrongly typed field (``utt_id``/``document`` non-empty strings without white
            space, ``hypotheses`` a non-empty list, ``words`` a list of non-empty strings
            without white space, every score a finite number, ``ac_cost`` and ``lm_cost``
            present, or ``total_cost`` alone; not both kinds in one file); a duplicate
            ``utt_id`` (both lines); ``document`` on some lines but not others (both lines);
            a document whose utterances are not consecutive (where it reappears and where it
            was last seen); no utterances.
    """
    lines = _Lines(path)
    lists = tuple(lines.lists(log))
    meta = lines.meta()
    return NbestSet(utterances=lists, doc_source=meta["doc_source"], source=os.fspath(path),
                    total_scores=meta["total_scores"])


def open_jsonl_nbest(path, *, log: Optional[Callable[[str], None]] = None) -> StreamSource:
    """:func:`iter_jsonl_nbest` (also of a stream: ``-``, ``COMMAND |``) read once into a span source
    (:func:`~.spans.open_stream`), whose index also says which other scores the lists carry.
    Raises DataError as :func:`read_jsonl_nbest`."""
    lines = _Lines(path)
    return open_stream(lines.lists(log), os.fspath(path), lines.meta)


def jsonl_line(u: NbestList, total: bool = False) -> str:
    """The line (with its newline) that :func:`write_jsonl_nbest` writes for one list:
    keys in the order ``utt_id``, ``document``, ``hypotheses``; per hypothesis
    ``words`` and ``scores`` (``ac_cost``, ``lm_cost``, and ``graph_cost`` when it is not
    0; with ``total``, a list of total scores, ``total_cost`` = ``ac_cost`` alone),
    numbers as :func:`~._common.float_text` writes them; non-ASCII kept as is.

    Raises:
        DataError: keys other than ``<utt_id>-1 .. <utt_id>-N`` (they would change); an
            id or word that is empty or holds white space; a cost that is not finite;
            with ``total``, an n-gram or graph cost that is not 0.
    """
    check_ranked_keys(u.utt_id, u.keys, "JSON Lines")
    where = f"write_jsonl_nbest: utterance {u.utt_id!r}"
    _id({"utt_id": u.utt_id, "document": u.doc_id}, "utt_id", where)
    _id({"utt_id": u.utt_id, "document": u.doc_id}, "document", where)
    if total:
        check_total_scores(u, where)
    hyps = []
    for words, ac, lm, graph in zip(u.hyps, u.ac_cost.tolist(), u.lm_cost.tolist(), u.graph_cost.tolist()):
        _words({"words": list(words)}, where, f"hypothesis {len(hyps) + 1}")
        for name, value in (("ac_cost", ac), ("lm_cost", lm), ("graph_cost", graph)):
            _number(value, where, f"hypothesis {len(hyps) + 1}: {name}")
        scores = f'"ac_cost": {float_text(ac)}, "lm_cost": {float_text(lm)}'
        if total:
            scores = f'"{TOTAL_COST}": {float_text(ac)}'
        elif graph != 0:
            scores += f', "graph_cost": {float_text(graph)}'
        hyps.append(f'{{"words": {json.dumps(list(words), ensure_ascii=False)}, "scores": {{{scores}}}}}')
    head = f'{{"utt_id": {json.dumps(u.utt_id, ensure_ascii=False)}, "document": ' \
           f'{json.dumps(u.doc_id, ensure_ascii=False)}'
    return f'{head}, "hypotheses": [{", ".join(hyps)}]}}\n'


class JsonlNbestWriter(NbestWriter):
    """The writer (:class:`~.nbest_writer.NbestWriter`) of :func:`write_jsonl_nbest`,
    part after part into the file ``path`` (gzip-compressed when its name ends in ``.gz``)."""

    def __init__(self, path, option: Optional[str] = None):
        self.path, self.option = path, option
        self.names = (os.path.basename(os.fspath(path)),)

    def _open(self, stack) -> None:
        self._fh = stack.enter_context(atomic_write(self.path, option=self.option, compress=is_gzip_name(self.path)))

    def write(self, part: NbestSet) -> None:
        for u in part.utterances:
            self._fh.write(jsonl_line(u, part.total_scores))


def write_jsonl_nbest(nbest: NbestSet, path, option: Optional[str] = None) -> None:
    """Write ``nbest`` as JSON Lines (:func:`jsonl_line` per utterance, set order) to
    ``path``, atomically (the file appears whole or not at all), gzip-compressed when
    its name ends in ``.gz``. Reading it back with :func:`read_jsonl_nbest` gives the
    same ids, documents, words and float64 costs (a set of total scores is written as
    ``total_cost``, and read back so). ``option`` (e.g. ``"--out"``) names ``path`` in
    errors. Part after part: :class:`JsonlNbestWriter`.

    Raises:
        DataError: as :func:`jsonl_line`; the folder of ``path`` does not exist; the
            file cannot be written (no space, read-only file system, permission ...:
            :func:`~.atomic.atomic_write`). Nothing is written then.
    """
    write_parts(JsonlNbestWriter(path, option), [nbest])
