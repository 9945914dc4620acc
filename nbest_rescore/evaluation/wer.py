"""Word error rate of chosen hypotheses and per-hypothesis word errors of N-best lists.

Units: WER is in **percent** (``errors / ref_words * 100``); error counts are word-level
edit operations (substitutions + deletions + insertions), split into the three as
Kaldi's ``compute-wer`` splits them (:mod:`~nbest_rescore.evaluation.edit_distance`).
References and hypotheses are word tuples (``tuple[str, ...]``). Empty ones are scored
as ``compute-wer`` scores them: an empty hypothesis makes every reference word a
deletion; an empty reference (a bare key in Kaldi's ``data/text``) adds no reference
word and makes every hypothesis word an insertion. Only a set of utterances whose
references are *all* empty is refused: its WER is undefined (0 reference words).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import DataError, examples
from ..types import FlatNbest, NbestSet, Words
from .edit_distance import kaldi_error_counts


@dataclass(frozen=True)
class WerReport:
    """Corpus-level word error counts.

    Attributes:
        errors: substitutions + deletions + insertions.
        substitutions, deletions, insertions, hits: alignment counts, summed over utterances.
        ref_words: number of reference words (``hits + substitutions + deletions``).
        num_utts: number of scored utterances.
    Raises:
        ValueError: (on construction) negative counts or inconsistent totals.
    """

    errors: int
    substitutions: int
    deletions: int
    insertions: int
    hits: int
    ref_words: int
    num_utts: int

    def __post_init__(self):
        for name in ("errors", "substitutions", "deletions", "insertions", "hits", "ref_words", "num_utts"):
            if getattr(self, name) < 0:
                raise ValueError(f"WerReport.{name} must be >= 0, got {getattr(self, name)}")
        for parts, total in ((("hits", "substitutions", "deletions"), "ref_words"),
                             (("substitutions", "deletions", "insertions"), "errors")):
            if sum(getattr(self, p) for p in parts) != getattr(self, total):
                raise ValueError("inconsistent WerReport: " + " + ".join(f"{p} {getattr(self, p)}" for p in parts)
                                 + f" != {total} {getattr(self, total)}")

    @property
    def wer(self) -> float:
        """Word error rate in percent (NaN when there are no reference words)."""
        if self.ref_words == 0:
            return float("nan")
        return self.errors / self.ref_words * 100.0

    def to_dict(self) -> Dict[str, float]:
        """All counts plus ``wer`` (percent), JSON-serialisable."""
        d = asdict(self)
        d["wer"] = self.wer
        return d

    def __str__(self) -> str:
        return (f"WER {self.wer:.2f}% [ {self.errors} / {self.ref_words}, "
                f"{self.insertions} ins, {self.deletions} del, {self.substitutions} sub ] "
                f"{self.num_utts} utterances")


def _as_words(x) -> Words:
    """A word tuple from a tuple/list of words (a ``str`` is split on whitespace)."""
    if isinstance(x, str):
        return tuple(x.split())
    return tuple(x)


def _no_ref_words(n: int, source: str) -> DataError:
    return DataError(f"{source}: the references of all {n} scored utterances are empty (0 reference words), "
                     f"so the WER is undefined; give them their transcripts (an empty reference is fine "
                     f"as long as some other scored utterance has words)")


def check_references(nbest: NbestSet, refs: Mapping[str, Sequence[str]], source="the references") -> None:
    """Check, before any scoring, that every utterance of ``nbest`` has a reference in
    ``refs`` and that they are not all empty (``source`` names the file in messages;
    an empty reference is valid, see the module docstring).

    Raises:
        DataError: utterances without a reference (a few listed), or every reference of
            the utterances empty (WER undefined).
    """
    missing = [u for u in nbest.utt_ids if u not in refs]
    if missing:
        raise DataError(f"{len(missing)} of {len(nbest)} utterances of the N-best lists have no reference in "
                        f"{source}: {examples(missing)}; check that the reference file belongs to these lists "
                        f"(plain lists are keyed by utterance index unless --plain-utt-ids maps them)")
    if len(nbest) and not any(len(_as_words(refs[u])) for u in nbest.utt_ids):
        raise _no_ref_words(len(nbest), source)


@dataclass(frozen=True)
class WerCounts:
    """Word error counts of some utterances, to be added up over parts of a set
    (``a + b``): insertions, deletions, substitutions, reference words and
    utterances. :meth:`report` turns the total into a :class:`WerReport`."""

    insertions: int = 0
    deletions: int = 0
    substitutions: int = 0
    ref_words: int = 0
    num_utts: int = 0

    def __add__(self, other: "WerCounts") -> "WerCounts":
        return WerCounts(self.insertions + other.insertions, self.deletions + other.deletions,
                         self.substitutions + other.substitutions, self.ref_words + other.ref_words,
                         self.num_utts + other.num_utts)

    def report(self, source: str = "compute_wer") -> WerReport:
        """The :class:`WerReport` of these counts (WER in percent).

        Raises:
            DataError: no reference words (the references of all the utterances are
                empty: WER undefined; ``source`` names them).
        """
        if self.ref_words == 0:
            raise _no_ref_words(self.num_utts, source)
        i, d, s = self.insertions, self.deletions, self.substitutions
        return WerReport(errors=s + d + i, substitutions=s, deletions=d, insertions=i, hits=self.ref_words - s - d,
                         ref_words=self.ref_words, num_utts=self.num_utts)


def wer_counts(refs: Mapping[str, Sequence[str]], hyps: Mapping[str, Sequence[str]],
               source: str = "compute_wer") -> WerCounts:
    """Kaldi's word error counts of one hypothesis per utterance (see
    :func:`compute_wer`), without the check that some reference has words (a part of
    a set may have none; :meth:`WerCounts.report` checks the total).

    Raises:
        DataError: a hypothesis utterance has no reference (a few ids listed), or
            ``hyps`` is empty.
    """
    if len(hyps) == 0:
        raise DataError("compute_wer: no hypotheses to score (empty hypothesis mapping)")
    missing = [k for k in hyps if k not in refs]
    if missing:
        raise DataError(
            f"{source}: {len(missing)} of {len(hyps)} hypothesis utterances have no reference: "
            f"{examples(missing)}; check that the reference file belongs to this data set")
    pairs = [(_as_words(refs[u]), _as_words(h)) for u, h in hyps.items()]
    i, d, s = (int(x) for x in kaldi_error_counts(pairs).sum(axis=0))
    return WerCounts(i, d, s, sum(len(r) for r, _ in pairs), len(pairs))


def compute_wer(refs: Mapping[str, Sequence[str]], hyps: Mapping[str, Sequence[str]],
                source: str = "compute_wer") -> WerReport:
    """Corpus WER of one hypothesis per utterance, counted as Kaldi's ``compute-wer``
    counts it (:func:`~nbest_rescore.evaluation.edit_distance.kaldi_error_counts`).

    Args:
        refs: utterance id -> reference words (extra utterances are ignored; empty
            ones as the module docstring says).
        hyps: utterance id -> hypothesis words; scored in this mapping's key order.
        source: names the references in messages (e.g. the reference file).
    Returns:
        WerReport over the utterances of ``hyps`` (WER in percent).
    Raises:
        DataError: a hypothesis utterance has no reference (a few ids listed), ``hyps``
            is empty, or the references of all its utterances are empty (WER undefined).
    """
    return wer_counts(refs, hyps, source).report(source)


def utterance_ref_words(utt_ids: Sequence[str], refs: Mapping[str, Sequence[str]]) -> np.ndarray:
    """int64 [U]: the reference words of each utterance of ``utt_ids`` (every one must
    be a key of ``refs``; an empty reference counts 0)."""
    return np.array([len(_as_words(refs[u])) for u in utt_ids], dtype=np.int64)


def utterance_errors(refs: Mapping[str, Sequence[str]], hyps: Mapping[str, Sequence[str]],
                     source: str = "compute_wer") -> Tuple[Tuple[str, ...], np.ndarray, np.ndarray]:
    """Kaldi's word errors of one hypothesis per utterance, utterance by utterance (the
    per-utterance pairs of ``compute-wer-bootci``).

    Returns:
        ``(ids, errors, ref_words)``: the utterance ids of ``hyps`` in its order, int64
        [U] word errors (substitutions + deletions + insertions) and int64 [U]
        reference words.
    Raises:
        DataError: as :func:`wer_counts` (a hypothesis without a reference, none at all).
    """
    if len(hyps) == 0 or any(u not in refs for u in hyps):
        wer_counts(refs, hyps, source)  # raises the usual DataError
    ids = tuple(hyps)
    pairs = [(_as_words(refs[u]), _as_words(hyps[u])) for u in ids]
    errors = kaldi_error_counts(pairs).sum(axis=1).astype(np.int64)
    return ids, errors, utterance_ref_words(ids, refs)


def hyp_errors(ref: Sequence[str], hyps: Sequence[Sequence[str]]) -> np.ndarray:
    """int64 [N]: the word-level Levenshtein distance (substitutions + deletions +
    insertions) of each of the N ``hyps`` (word sequences, empty ones allowed) to
    ``ref``; rapidfuzz compares whole words, all hypotheses in one ``cdist`` call."""
    from rapidfuzz import process
    from rapidfuzz.distance import Levenshtein

    if len(hyps) == 0:
        return np.zeros(0, dtype=np.int64)
    return process.cdist([_as_words(ref)], [_as_words(h) for h in hyps], scorer=Levenshtein.distance, dtype=np.int64)[0]


def nbest_errors(nbest: NbestSet, refs: Mapping[str, Sequence[str]], flat: Optional[FlatNbest] = None, *,
                 part: bool = False) -> Tuple[np.ndarray, np.ndarray, int]:
    """Word errors of every hypothesis of an N-best set.

    Args:
        nbest: the lists (U utterances, H hypotheses in all).
        refs: utterance id -> reference words.
        flat: ``nbest.flat()`` when the caller has it already.
        part: ``nbest`` is a part (a span) of a set whose references were checked
            (:func:`check_references`): its references may all be empty.
    Returns:
        ``(errors, offsets, ref_words)``: errors int64 [H], flat over all hypotheses in
        set order; offsets int64 [U + 1], utterance ``u`` owns ``errors[offsets[u]:
        offsets[u + 1]]``; ref_words, the total number of reference words.
    Raises:
        DataError: an utterance has no reference (a few ids listed), or all of them
            are empty (an empty reference is fine: its hypotheses' errors are their
            lengths, all insertions).
    """
    if not part or any(u not in refs for u in nbest.utt_ids):
        check_references(nbest, refs)  # (a part: only for references missing)
    offsets = (flat or nbest.flat()).offsets
    errors = np.empty(int(offsets[-1]), dtype=np.int64)
    ref_words = 0
    for k, u in enumerate(nbest.utterances):
        ref = _as_words(refs[u.utt_id])
        ref_words += len(ref)
        errors[offsets[k]:offsets[k + 1]] = hyp_errors(ref, u.hyps)
    return errors, offsets, ref_words


def oracle_choice(nbest: NbestSet, refs: Mapping[str, Sequence[str]], *, part: bool = False) -> Dict[str, Words]:
    """The hypothesis with the fewest word errors in each list (ties: earliest rank).

    ``compute_wer(refs, oracle_choice(nbest, refs))`` is the oracle WER of the lists.
    ``part``: as :func:`nbest_errors`.

    Returns:
        utterance id -> chosen hypothesis words, in set order.
    Raises:
        DataError: as :func:`nbest_errors`.
    """
    errors, offsets, _ = nbest_errors(nbest, refs, part=part)
    out: Dict[str, Words] = {}
    for k, u in enumerate(nbest.utterances):
        seg = errors[offsets[k]:offsets[k + 1]]
        out[u.utt_id] = tuple(u.hyps[int(np.argmin(seg))])
    return out
