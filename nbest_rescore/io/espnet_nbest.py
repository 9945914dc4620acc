"""ESPnet2 N-best output directories, as ``espnet2/bin/asr_inference.py`` writes them
(``--nbest N``) through ``espnet2.fileio.datadir_writer.DatadirWriter`` (espnet
202511 from PyPI; docs/formats.md, "ESPnet2 N-best directory")::

    DIR/1best_recog/text    <utt_id> w1 w2 ...     (a bare key: an empty hypothesis)
    DIR/1best_recog/score   <utt_id> <total log score>
    DIR/2best_recog/...     ... up to DIR/Nbest_recog/

``score`` is ``str(hyp.score)``: the beam search's total log score (natural log, the
weighted sum of the decoder, CTC and LM scores; larger = better), a number or the text
of a torch scalar (``tensor(-12.3456)``, ``tensor(-12.3, device='cuda:0')``). It is read
as one total cost per hypothesis (:mod:`.total_scores`: ``ac_cost = -score``, no
n-gram term). ``token`` and ``token_int`` are not read. Utterances are in the order of
``1best_recog/text``; hypothesis k of an utterance comes from ``{k}best_recog`` (an
utterance whose beam gave fewer than N hypotheses is absent from the last folders);
each is its own document. Keys ``<utt_id>-<k>``.
"""
from __future__ import annotations

import logging
import os
import re
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from ..errors import DataError, format_location
from ..types import NbestList, NbestSet, Words
from ._common import iter_lines, split_fields
from .kaldi_text import iter_kaldi_text
from .spans import StreamSource, open_stream
from .total_scores import parse_log_score, total_list

__all__ = ["ESPNET_FIRST", "espnet_nbest_files", "is_espnet_dir", "iter_espnet_nbest", "open_espnet_nbest",
           "read_espnet_nbest"]

logger = logging.getLogger(__name__)

#: The folder that makes a directory an ESPnet N-best directory.
ESPNET_FIRST = "1best_recog"
_RANK_DIR = re.compile(r"([1-9][0-9]*)best_recog")


def is_espnet_dir(path) -> bool:
    """Whether ``path`` is a folder holding ``1best_recog/`` (an ESPnet N-best directory)."""
    return os.path.isdir(os.path.join(os.fspath(path), ESPNET_FIRST))


def rank_dirs(path) -> List[str]:
    """``[DIR/1best_recog, ..., DIR/Nbest_recog]``. Raises DataError: ``path`` is not a
    folder, has no ``1best_recog``, or a rank is missing (2best and 4best, no 3best)."""
    p = os.fspath(path)
    if not os.path.isdir(p):
        raise DataError(f"{p}: not a folder; expected an ESPnet N-best directory (1best_recog/, 2best_recog/ ...)")
    ranks = sorted(int(m.group(1)) for m in map(_RANK_DIR.fullmatch, os.listdir(p)) if m)
    if not ranks or ranks[0] != 1:
        raise DataError(f"{p}: no {ESPNET_FIRST}/ folder; expected the --output_dir of espnet2/bin/asr_inference.py "
                        f"(1best_recog/text, 1best_recog/score, ...)")
    gap = next(((i, r) for i, r in enumerate(ranks, start=1) if r != i), None)
    if gap is not None:
        raise DataError(f"{p}: has {gap[1]}best_recog/ but no {gap[0]}best_recog/; the ranks must be "
                        f"1best_recog .. Nbest_recog without gaps (copy the whole --output_dir)")
    return [os.path.join(p, f"{r}best_recog") for r in ranks]


def espnet_nbest_files(path) -> Tuple[str, ...]:
    """Every file :func:`iter_espnet_nbest` reads: ``text`` and ``score`` of each rank
    folder (:func:`rank_dirs`). Raises DataError as :func:`rank_dirs`."""
    return tuple(os.path.join(d, name) for d in rank_dirs(path) for name in ("text", "score"))


def _scores(path) -> Iterator[Tuple[int, str, str]]:
    """``(line_no, key, value text)`` per line of a ``score`` file (the value may hold
    spaces: ``tensor(-1.5, device='cuda:0')``). Raises DataError: a line without a value."""
    for line_no, line in iter_lines(path):
        fields = split_fields(line)
        if len(fields) < 2:
            raise DataError(f"{format_location(path, line_no)}: expected '<utt_id> <score>' (2 columns), found "
                            f"{len(fields)}; the score file of asr_inference.py has one score per utterance")
        yield line_no, fields[0], line.strip()[len(fields[0]):].strip()


class _Rank:
    """One ``{k}best_recog`` folder read in lock-step: its ``text`` and ``score`` lines
    paired (same keys, same order), taken while their key is the utterance asked for."""

    def __init__(self, folder: str):
        self.text, self.score = os.path.join(folder, "text"), os.path.join(folder, "score")
        for f in (self.text, self.score):
            if not os.path.isfile(f):
                raise DataError(f"{f}: file not found; an ESPnet N-best folder holds text and score (run "
                                f"asr_inference.py with a tokenizer so that it writes text)")
        self._rows = zip(iter_kaldi_text(self.text), _scores(self.score))
        self.next = self.advance()

    def advance(self) -> Optional[Tuple[int, str, Words, float]]:
        """The next ``(text line, key, words, score)``, or None after the last line."""
        pair = next(self._rows, None)
        if pair is None:
            return None
        (line_no, key, words), (s_line, s_key, value) = pair
        loc = format_location(self.score, s_line)
        if s_key != key:
            raise DataError(f"{loc}: key {s_key!r} where {self.text}:{line_no} has "
                            f"{key!r}; text and score of a folder must list the same utterances in the same order")
        return line_no, key, words, parse_log_score(value, loc, f"score of {key!r}")

    def take(self, utt: str) -> Optional[Tuple[Words, float]]:
        """``(words, score)`` of ``utt`` when it is this folder's next line, else None."""
        if self.next is None or self.next[1] != utt:
            return None
        _, _, words, score = self.next
        self.next = self.advance()
        return words, score

    def check_done(self, seen: Dict[str, int]) -> None:
        """After the last utterance: no line left (a key not in 1best, or out of its order)."""
        if self.next is not None:
            line_no, key = self.next[:2]
            why = "is not in" if key not in seen else "comes out of the order of"
            raise DataError(f"{format_location(self.text, line_no)}: utterance {key!r} {why} {ESPNET_FIRST}/text; "
                            f"each Nbest_recog folder lists utterances of 1best_recog in its order")
        if sum(1 for _ in iter_lines(self.score)) != sum(1 for _ in iter_lines(self.text)):
            raise DataError(f"{self.score}: has another number of lines than {self.text}; the folder is incomplete")


def _utterance(ranks: List[_Rank], utt: str, words: Words, score: float) -> NbestList:
    """The list of ``utt`` (its 1best ``words``/``score``), the other ranks taken."""
    hyps, scores = [words], [score]
    for rank in ranks[1:]:
        got = rank.take(utt)
        if got is None:
            break
        hyps.append(got[0])
        scores.append(got[1])
    for k in range(len(hyps) + 1, len(ranks) + 1):  # a rank after a missing one
        if ranks[k - 1].next is not None and ranks[k - 1].next[1] == utt:
            raise DataError(f"{format_location(ranks[k - 1].text, ranks[k - 1].next[0])}: utterance {utt!r} has a "
                            f"{k}-best hypothesis but no {len(hyps) + 1}-best one")
    return total_list(utt, utt, hyps, [-s for s in scores])


def iter_espnet_nbest(path, *, log: Optional[Callable[[str], None]] = None) -> Iterator[NbestList]:
    """:func:`read_espnet_nbest` one utterance at a time, every rank folder read in lock-step: units and
    errors as it, each list yielded once checked; the log line comes after the last list."""
    ranks = [_Rank(d) for d in rank_dirs(path)]
    first = ranks[0]
    seen: Dict[str, int] = {}
    n_hyps = 0
    while first.next is not None:
        line_no, utt, words, score = first.next
        if utt in seen:
            raise DataError(f"{format_location(first.text, line_no)}: duplicate utterance {utt!r} (first on line "
                            f"{seen[utt]}); each utterance must be decoded once")
        seen[utt] = line_no
        first.next = first.advance()
        u = _utterance(ranks, utt, words, score)
        n_hyps += len(u)
        yield u
    for rank in ranks:
        rank.check_done(seen)
    if not seen:
        raise DataError(f"{first.text}: no utterances (the file is empty)")
    (log if log is not None else logger.info)(
        f"{os.fspath(path)}: {len(seen)} utterances, {n_hyps} hypotheses (ESPnet, {len(ranks)} ranks); one total "
        f"score per hypothesis (no n-gram term); one document per utterance")


def read_espnet_nbest(path, *, log: Optional[Callable[[str], None]] = None) -> NbestSet:
    """Read an ESPnet N-best directory (module docstring, docs/formats.md) into an
    :class:`~nbest_rescore.types.NbestSet` with ``total_scores`` set: utterances in the
    order of ``1best_recog/text``; float64 ``ac_cost`` = -score (the total, negated
    natural log), ``lm_cost`` = ``graph_cost`` = 0; keys ``<utt_id>-<k>``;
    ``doc_source`` ``none``.

    Raises:
        DataError: one line naming ``file:line`` for: no ``1best_recog/``, a rank
            folder missing between others, a folder without ``text`` or ``score``; a
            blank ``text`` line, a ``score`` line without a score or with one that is
            not a number (or ``tensor(number)``); ``text`` and ``score`` keys that
            differ; a duplicate utterance; an utterance of a later folder that is not
            in ``1best_recog/text`` or out of its order, or with a k-best hypothesis but
            no (k-1)-best one; no utterances.
    """
    lists = tuple(iter_espnet_nbest(path, log=log))
    return NbestSet(utterances=lists, doc_source="none", source=os.fspath(path), total_scores=True)


def open_espnet_nbest(path, *, log: Optional[Callable[[str], None]] = None) -> StreamSource:
    """:func:`iter_espnet_nbest` read once into a span source (:func:`~.spans.open_stream`).
    Raises DataError as :func:`read_espnet_nbest`."""
    return open_stream(iter_espnet_nbest(path, log=log), os.fspath(path),
                       lambda: {"doc_source": "none", "total_scores": True})
