"""Kaldi's ``steps/score_kaldi.sh`` over N-best lists (docs/kaldi-step.md), byte for
byte: the LM-weight x insertion-penalty sweep (:func:`best_path_sweep`), what
``compute-wer --text --mode=present`` counts and prints (:class:`KaldiWer`,
:func:`kaldi_wers`; percentages in float32 as Kaldi computes them, two decimals) and
the stderr line it starts with (:func:`compute_wer_command`), and
``utils/best_wer.sh``'s choice (:func:`best_wer_line`: the first of the lowest printed
``%WER``). Costs are negated natural logs; WIP is cost per word (Kaldi's sign).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import DataError
from ..rescoring.combine import segment_argmax
from .edit_distance import kaldi_error_counts
from .wer import WerCounts, WerReport, _as_words

__all__ = ["KaldiWer", "best_index", "best_path_sweep", "best_wer_line", "compute_wer_command", "kaldi_percent",
           "kaldi_wers", "sweep_grep_lines", "wer_file_name"]


def kaldi_percent(numerator: int, denominator: int) -> float:
    """``100.0 * float(n) / float(d)`` rounded to float32, as ``compute-wer`` computes
    ``percent_wer`` and ``percent_ser`` (BaseFloat), returned as a Python float so that
    ``f"{x:.2f}"`` prints what Kaldi prints. ``denominator`` > 0."""
    return float(np.float32(100.0 * float(np.float32(numerator)) / float(np.float32(denominator))))


@dataclass(frozen=True)
class KaldiWer:
    """The statistics of one ``compute-wer --mode=present`` run.

    Attributes:
        report: word error counts over the scored sentences (Kaldi's ins/del/sub split).
        sentence_errors: scored sentences whose hypothesis differs from the reference.
        absent: reference sentences with no hypothesis (not scored).
    """

    report: WerReport
    sentence_errors: int
    absent: int = 0

    @property
    def percent_wer(self) -> float:
        """WER in percent as Kaldi computes it (float32)."""
        return kaldi_percent(self.report.errors, self.report.ref_words)

    def lines(self) -> List[str]:
        """The three lines ``compute-wer`` prints on stdout (without newlines)."""
        r, n = self.report, self.report.num_utts
        partial = " [PARTIAL]" if self.absent else ""
        return [f"%WER {self.percent_wer:.2f} [ {r.errors} / {r.ref_words}, {r.insertions} ins, "
                f"{r.deletions} del, {r.substitutions} sub ]{partial}",
                f"%SER {kaldi_percent(self.sentence_errors, n):.2f} [ {self.sentence_errors} / {n} ]",
                f"Scored {n} sentences, {self.absent} not present in hyp."]


def kaldi_wers(refs: Mapping[str, Sequence[str]], hyp_sets: Sequence[Mapping[str, Sequence[str]]],
               source: str = "the references") -> List[KaldiWer]:
    """``compute-wer --mode=present`` of each hypothesis set against ``refs``.

    All sets are aligned in one batch (a pair that recurs across sets is aligned once).

    Args:
        refs: utterance id -> reference words, in reference-file order.
        hyp_sets: utterance id -> hypothesis words, one mapping per run.
        source: names the references in messages.
    Returns:
        one :class:`KaldiWer` per set.
    Raises:
        DataError: a set shares no utterance with ``refs``, or the references it scores
            are all empty (WER undefined: Kaldi would print ``nan``/``inf``).
    """
    refs_w = {u: _as_words(r) for u, r in refs.items()}
    scored = [[u for u in refs_w if u in hyps] for hyps in hyp_sets]
    pairs = [(refs_w[u], _as_words(hyps[u])) for hyps, utts in zip(hyp_sets, scored) for u in utts]
    counts = kaldi_error_counts(pairs)
    out: List[KaldiWer] = []
    start = 0
    for hyps, utts in zip(hyp_sets, scored):
        if not utts:
            raise DataError(f"{source}: none of its {len(refs_w)} utterances has a hypothesis (the hypotheses "
                            f"are keyed {', '.join(list(hyps)[:3])} ...); check that the references belong to "
                            f"these N-best lists")
        ref_words = sum(len(refs_w[u]) for u in utts)
        if ref_words == 0:
            raise DataError(f"{source}: the references of all {len(utts)} scored utterances are empty (0 "
                            f"reference words), so the WER is undefined; give them their transcripts")
        i, d, s = (int(x) for x in counts[start:start + len(utts)].sum(axis=0))
        start += len(utts)
        report = WerCounts(i, d, s, ref_words, len(utts)).report()
        sent = sum(1 for u in utts if _as_words(hyps[u]) != refs_w[u])
        out.append(KaldiWer(report, sent, len(refs_w) - len(utts)))
    return out


def best_path_sweep(ac_cost: np.ndarray, lm_cost: np.ndarray, num_words: np.ndarray, offsets: np.ndarray,
                    lmwts: Sequence[float], wips: Sequence[float]) -> np.ndarray:
    """The best path of every utterance at every (LMWT, WIP), as ``lattice-scale
    --inv-acoustic-scale=LMWT | lattice-add-penalty --word-ins-penalty=WIP |
    lattice-best-path`` picks it from the N-best paths.

    Args:
        ac_cost: float [H] acoustic costs (negated natural log, unscaled).
        lm_cost: float [H] LM-side graph costs (negated natural log).
        num_words: int [H] words per hypothesis.
        offsets: int [U + 1]: utterance ``u`` owns rows ``offsets[u]:offsets[u + 1]``
            (every utterance non-empty).
        lmwts: L language-model weights (> 0; the acoustic cost is divided by them).
        wips: W word insertion penalties (cost per word; positive = penalty).
    Returns:
        int64 [L, W, U]: flat index of the chosen hypothesis, minimising
        ``ac_cost / LMWT + lm_cost + WIP * num_words``; ties to the first in list order.
    """
    ac = np.asarray(ac_cost, dtype=np.float64)
    lm = np.asarray(lm_cost, dtype=np.float64)
    nw = np.asarray(num_words, dtype=np.float64)
    offsets = np.asarray(offsets, dtype=np.int64)
    out = np.empty((len(lmwts), len(wips), len(offsets) - 1), dtype=np.int64)
    for a, lmwt in enumerate(lmwts):
        scaled = ac / float(lmwt) + lm
        for b, wip in enumerate(wips):
            out[a, b] = segment_argmax(-(scaled + float(wip) * nw), offsets)
    return out


# ------------------------------------------------------------------ compute-wer's stderr

def _kaldi_escape(arg: str) -> str:
    """An argument as Kaldi's ``ParseOptions::Escape`` prints it (bash quoting)."""
    if arg != "" and all((c.isascii() and c.isalnum()) or c in "[]~#^_-+=:.,/" for c in arg):
        return arg
    if "'" in arg and not any(c in arg for c in "\"`$\\"):
        return '"' + arg + '"'
    return "'" + arg.replace("'", "'\\''") + "'"


def compute_wer_command(ref_rspecifier: str, hyp_rspecifier: str = "ark,p:-") -> str:
    """The line ``compute-wer --text --mode=present REF HYP`` writes on stderr when it
    starts (each argument escaped as Kaldi does, each followed by a space), with the
    newline."""
    args = ["compute-wer", "--text", "--mode=present", ref_rspecifier, hyp_rspecifier]
    return "".join(_kaldi_escape(a) + " " for a in args) + "\n"


# ------------------------------------------------------------------ utils/best_wer.sh

#: ``FILE:%WER N rest`` as ``grep WER FILE /dev/null`` prints compute-wer's line
_GREP_WER = re.compile(r"^(.*?):(%WER\s+(\S+).*)$", re.ASCII)


def best_wer_line(grep_lines: Iterable[str]) -> Optional[str]:
    """What ``utils/best_wer.sh`` prints for ``grep WER FILE... /dev/null`` lines of
    compute-wer's output (``FILE:%WER 26.87 [ ... ]``; sclite lines are not handled),
    without the newline; None when no line holds a ``%WER``.

    The first line with the lowest WER (compared as numbers, as printed) wins; it is
    rewritten as ``%WER ... FILE`` with runs of white space collapsed.
    """
    best, best_line = None, None
    for line in grep_lines:
        m = _GREP_WER.match(line)
        if m is None:
            continue
        try:
            wer = float(m.group(3))
        except ValueError:
            continue
        if best is None or wer < best:
            best, best_line = wer, re.sub(r"\s+", " ", f"{m.group(2)} {m.group(1)}", flags=re.ASCII).strip()
    return best_line


def sweep_grep_lines(wer_files: Iterable[Tuple[str, str]]) -> List[str]:
    """``grep WER FILE /dev/null`` over ``(file name, file text)`` pairs in order:
    ``FILE:line`` for every line holding ``WER``."""
    return [f"{name}:{line}" for name, text in wer_files for line in text.splitlines() if "WER" in line]


def wer_file_name(out_dir: str, lmwt: int, wip: str) -> str:
    """``score_kaldi.sh``'s ``$dir/wer_LMWT_WIP`` with ``out_dir`` as given."""
    return f"{out_dir}/wer_{lmwt}_{wip}"


def best_index(wer_files: Sequence[str], best_line: str) -> int:
    """Index of the file of ``wer_files`` that ends ``best_line`` (score_kaldi.sh reads
    the best LMWT and WIP from that name)."""
    for i, name in enumerate(wer_files):
        if best_line.endswith(" " + name):
            return i
    raise ValueError(f"best_wer line {best_line!r} names none of the wer files")
