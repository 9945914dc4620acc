"""NeMo beam files with their manifest, as docs/formats.md ("NeMo beams file") says:
the ``.tsv`` that ``scripts/asr_language_modeling/ngram_lm/eval_beamsearch_ngram_ctc.py``
(and ``..._transducer.py``) write with ``preds_output_folder`` and that
``scripts/asr_language_modeling/neural_rescorer/eval_neural_rescorer.py`` reads
(NeMo commit 8cfedd7, 2025-09)::

    some words<TAB>-12.345     one hypothesis: its text, then its score
    (beam_size consecutive lines per utterance, utterances in manifest order)

The score is ``candidate.score``: the beam search's total log score (natural log, the
acoustic score with the n-gram fused at alpha/beta; larger = better), read as one total
cost per hypothesis (:mod:`.total_scores`: ``ac_cost = -score``, no n-gram term). A
number or the text of a torch scalar (``tensor(-12.3)``) is accepted. The manifest
(JSON Lines, one object per utterance with ``audio_filepath``, ``text``, ``duration``)
gives the utterance ids: the audio file's name without its folder and last suffix
(``/data/a/u1.wav``: ``u1``). The beam size is the number of beam lines divided by the
number of manifest entries; each utterance is its own document; keys ``<utt_id>-<n>``.
"""
from __future__ import annotations

import json
import logging
import os
from itertools import islice
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from ..errors import DataError, format_location
from ..types import NbestList, NbestSet, Words
from ._common import check_key, file_kind, iter_lines, split_fields
from .spans import StreamSource, open_stream
from .total_scores import parse_log_score, total_list

__all__ = ["NEMO_SUFFIX", "is_nemo_beams", "iter_nemo_nbest", "nemo_utt_id", "open_nemo_nbest", "read_manifest",
           "read_nemo_nbest"]

logger = logging.getLogger(__name__)

#: A file whose name ends so is a NeMo beams file (:func:`is_nemo_beams`).
NEMO_SUFFIX = ".tsv"
_MANIFEST_EXAMPLE = '{"audio_filepath": "/data/u1.wav", "text": "some words", "duration": 2.5}'


def is_nemo_beams(path) -> bool:
    """Whether the file ``path`` looks like a NeMo beams file: its name ends in ``.tsv``,
    or its first line holds a tab (a plain N-best line has none). False for a folder."""
    return file_kind(path, NEMO_SUFFIX, lambda p: "\t" in next(iter_lines(p), (0, ""))[1])


def nemo_utt_id(audio_filepath: str) -> str:
    """The utterance id of a manifest entry: the audio file's name without folder and
    last suffix (``/data/a/u1.wav``: ``u1``)."""
    return os.path.splitext(os.path.basename(audio_filepath))[0]


def _entry(line: str, loc: str) -> dict:
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise DataError(f"{loc}: invalid JSON ({e}); a NeMo manifest has one object per line, e.g. "
                        f"{_MANIFEST_EXAMPLE}") from None
    audio = obj.get("audio_filepath") if isinstance(obj, dict) else None
    if not isinstance(audio, str) or split_fields(nemo_utt_id(audio)) != [nemo_utt_id(audio)]:  # (also: no id)
        raise DataError(f"{loc}: expected an object with 'audio_filepath' (a path whose file name, the utterance id, "
                        f"has no white space), e.g. {_MANIFEST_EXAMPLE}")
    if "text" in obj and not isinstance(obj["text"], str):
        raise DataError(f"{loc}: 'text' must be a string (the reference transcript), found {obj['text']!r:.40}")
    return obj


def read_manifest(path) -> List[Tuple[str, Optional[Words]]]:
    """``[(utt_id, reference words or None), ...]`` of a NeMo manifest in file order
    (ids: :func:`nemo_utt_id`; references: ``text`` split on white space, None without
    it). Blank lines are skipped.

    Raises:
        DataError: ``file:line`` for invalid JSON, no ``audio_filepath``, a ``text``
            that is not a string, two entries with the same utterance id (both lines);
            no entries.
    """
    out, line_of = [], {}
    for line_no, line in iter_lines(path):
        if not line.strip():
            continue
        loc = format_location(path, line_no)
        obj = _entry(line, loc)
        utt = check_key(nemo_utt_id(obj["audio_filepath"]), loc, "utterance id")
        if utt in line_of:
            raise DataError(f"{loc}: utterance id {utt!r} (the audio file's name) is also on line {line_of[utt]}; "
                            f"each utterance needs an audio file of its own name")
        line_of[utt] = line_no
        out.append((utt, tuple(split_fields(obj["text"])) if "text" in obj else None))
    if not out:
        raise DataError(f"{path}: no entries (the manifest is empty); expected one JSON object per line, e.g. "
                        f"{_MANIFEST_EXAMPLE}")
    return out


def _beams(path) -> Iterator[Tuple[int, Words, float]]:
    """``(line_no, words, score)`` per line of a beams file. Raises DataError: a line
    without exactly one tab, or a score that is not a number."""
    for line_no, line in iter_lines(path):
        loc = format_location(path, line_no)
        fields = line.split("\t")
        if len(fields) != 2:
            raise DataError(f"{loc}: expected 2 tab-separated columns 'text<TAB>score', found {len(fields)}; a NeMo "
                            f"beams file has one hypothesis per line")
        yield line_no, tuple(split_fields(fields[0])), parse_log_score(fields[1].strip(), loc, "score")


def beam_size(path, manifest, n_utts: int) -> int:
    """The hypotheses per utterance: lines of ``path`` / ``n_utts``. Raises DataError:
    no lines, or a count that ``n_utts`` does not divide."""
    n_lines = sum(1 for _ in iter_lines(path))
    if n_lines == 0 or n_lines % n_utts:
        raise DataError(f"{path}: {n_lines} beam lines for the {n_utts} utterances of {manifest}: not a multiple "
                        f"(each utterance has beam_size consecutive lines); give the manifest the beams were "
                        f"decoded from" if n_lines else f"{path}: no beam lines (the file is empty)")
    return n_lines // n_utts


def iter_nemo_nbest(path, manifest, *, log: Optional[Callable[[str], None]] = None) -> Iterator[NbestList]:
    """:func:`read_nemo_nbest` one utterance at a time (``manifest``: its manifest): units and errors as
    it, each list yielded once checked; the log line comes after the last list."""
    utts = read_manifest(manifest)
    n = beam_size(path, manifest, len(utts))
    rows = _beams(path)
    for utt, _ in utts:
        group = list(islice(rows, n))
        yield total_list(utt, utt, [w for _, w, _ in group], [-s for _, _, s in group])
    (log if log is not None else logger.info)(
        f"{os.fspath(path)}: {len(utts)} utterances x {n} hypotheses (NeMo beams, ids from {manifest}); one total "
        f"score per hypothesis (no n-gram term); one document per utterance")


def read_nemo_nbest(path, manifest=None, *, log: Optional[Callable[[str], None]] = None) -> NbestSet:
    """Read a NeMo beams file and its manifest (module docstring, docs/formats.md) into
    an :class:`~nbest_rescore.types.NbestSet` with ``total_scores`` set: utterances in
    manifest order, float64 ``ac_cost`` = -score (negated natural log), ``lm_cost`` =
    ``graph_cost`` = 0; keys ``<utt_id>-<n>``; ``doc_source`` ``none``.

    Raises:
        DataError: one line naming the file (and line) for: no manifest given; a beams
            line without exactly two tab-separated columns or with a score that is not
            a number; a line count that the manifest's utterance count does not divide;
            a malformed manifest (:func:`read_manifest`).
    """
    return NbestSet(utterances=tuple(iter_nemo_nbest(path, _need(path, manifest), log=log)), doc_source="none",
                    source=os.fspath(path), total_scores=True)


def _need(path, manifest):
    if manifest is None:
        raise DataError(f"{path}: a NeMo beams file needs its manifest (the utterance ids and order): give "
                        f"--nemo-manifest MANIFEST.json")
    return manifest


def open_nemo_nbest(path, manifest=None, *, log: Optional[Callable[[str], None]] = None) -> StreamSource:
    """:func:`iter_nemo_nbest` read once into a span source (:func:`~.spans.open_stream`).
    Raises DataError as :func:`read_nemo_nbest`."""
    return open_stream(iter_nemo_nbest(path, _need(path, manifest), log=log), os.fspath(path),
                       lambda: {"doc_source": "none", "total_scores": True})


def manifest_references(path) -> Dict[str, Words]:
    """The references of a NeMo manifest: utterance id -> ``text`` words. Raises
    DataError as :func:`read_manifest`, or an entry without ``text`` (file named)."""
    refs = dict(read_manifest(path))
    missing = [u for u, words in refs.items() if words is None]
    if missing:
        raise DataError(f"{path}: {len(missing)} entries have no 'text' (e.g. {missing[0]!r}); references need "
                        f"the transcript of every utterance")
    return refs
