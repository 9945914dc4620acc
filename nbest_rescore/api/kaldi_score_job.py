"""The ``kaldi-score`` job: Kaldi's ``steps/score_kaldi.sh`` over N-best lists, without
lattices or Kaldi. The sweep (WIP outer, LMWT inner; 1-best by
:func:`~nbest_rescore.evaluation.kaldi_scoring.best_path_sweep`), the files written into
``DIR`` as one set (:func:`~nbest_rescore.io.atomic.atomic_entries`), the stale
``wer_?``/``cer_?`` removal and where the results may differ from Kaldi's are in
docs/kaldi-step.md (kaldi-score).
"""
from __future__ import annotations

import logging
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import DataError, examples
from ..evaluation.kaldi_scoring import (KaldiWer, best_index, best_path_sweep, best_wer_line, compute_wer_command,
                                        kaldi_wers, sweep_grep_lines, wer_file_name)
from ..io.atomic import atomic_entries, atomic_write
from ..io.output_checks import check_writable_dir
from ..io.kaldi_nbest import read_kaldi_nbest_dir
from ..io.kaldi_text import read_kaldi_text, write_kaldi_text
from ..os_errors import os_error_message
from ..types import NbestSet, Words
from ..options import KaldiScoreOptions
from ..options.parse import parse_number_list
from ..validation import check_input_file, flag

log = logging.getLogger("nbest_rescore")

__all__ = ["KaldiScoreJob", "KaldiScorePoint", "KaldiScoreResult", "check_kaldi_score_options"]

#: The names score_kaldi.sh removes at its end (``rm $dir/wer_{?,??} $dir/cer_{?,??}``).
_STALE = re.compile(r"[wc]er_.{1,2}", re.DOTALL)


@dataclass(frozen=True)
class KaldiScorePoint:
    """One (LMWT, WIP) of the sweep.

    Attributes:
        lmwt: the LM weight (the acoustic cost is divided by it).
        wip: the word insertion penalty as given (names the files, e.g. ``"0.5"``).
        one_best: utterance id -> 1-best words (after the hyp filter), in list order.
        wer: what compute-wer counted (:class:`~nbest_rescore.evaluation.kaldi_scoring.KaldiWer`).
        wer_file: ``DIR/wer_LMWT_WIP`` with ``DIR`` as given.
    """

    lmwt: int
    wip: str
    one_best: Mapping[str, Words] = field(repr=False)
    wer: KaldiWer
    wer_file: str


@dataclass(frozen=True)
class KaldiScoreResult:
    """What :meth:`KaldiScoreJob.run` found and wrote.

    Attributes:
        out: ``DIR`` as given.
        points: every point in score_kaldi.sh's order (WIP outer, LMWT inner).
        best: the point best_wer.sh picked.
        best_wer_line: best_wer.sh's line (``%WER 26.87 [ ... ] DIR/wer_12_0.5``).
        removed: stale ``wer_?``/``wer_??``/``cer_?``/``cer_??`` files deleted from ``DIR``.
    """

    out: str
    points: Tuple[KaldiScorePoint, ...]
    best: KaldiScorePoint
    best_wer_line: str
    removed: Tuple[str, ...] = ()


def check_kaldi_score_options(min_lmwt, max_lmwt, word_ins_penalty) -> Tuple[str, ...]:
    """Check the sweep options across fields (each LM weight, an integer >= 1, is
    checked by :class:`~nbest_rescore.options.KaldiScoreOptions`) and return the
    penalties as written (``"0.0,0.5,1.0"`` -> ``("0.0", "0.5", "1.0")``).

    Raises:
        DataError: ``min_lmwt > max_lmwt``, a penalty that is not a finite decimal
            number or one given twice.
    """
    if min_lmwt > max_lmwt:
        raise DataError(f"--min-lmwt {min_lmwt} is above --max-lmwt {max_lmwt} (the sweep would be empty); "
                        f"e.g. --min-lmwt 7 --max-lmwt 17")
    return parse_number_list(word_ins_penalty, "word_ins_penalty")


_FILTER_CONTRACT = "the filter must read Kaldi text on stdin and write it on stdout (e.g. 'sed s/<unk>//g')"


def _run_filter(command: str, data: bytes, option: str, what: str) -> bytes:
    """``bash -c command`` with ``data`` on stdin; its stdout.

    Raises:
        DataError: bash cannot be run; the filter fails (its exit status, or the
            signal that ended it, and its last stderr line); it prints nothing for
            input with text.
    """
    try:
        proc = subprocess.run(["bash", "-c", command], input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              check=False)
    except OSError as exc:
        raise DataError(f"{option} {command!r}: cannot run bash: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        status = f"exit status {proc.returncode}" if proc.returncode > 0 else f"signal {-proc.returncode}"
        raise DataError(f"{option} {command!r} failed on {what} with {status}"
                        f"{': ' + err[-1].strip() if err else ''}; {_FILTER_CONTRACT}")
    if data.strip() and not proc.stdout:
        lines = len(data.splitlines())
        raise DataError(f"{option} {command!r} printed nothing for {what} ({lines} lines in); {_FILTER_CONTRACT}")
    if proc.stderr:
        log.debug("%s %r on %s: %s", option, command, what, proc.stderr.decode("utf-8", "replace").strip())
    return proc.stdout


def _read_text(path: Path, shown: str, what: Optional[str] = None) -> Dict[str, Words]:
    """A staged Kaldi text file, errors naming it as ``shown`` (its final name or the
    file it copies) and, if given, ``what`` it holds."""
    try:
        return read_kaldi_text(path)
    except DataError as exc:
        raise DataError(str(exc).replace(str(path), shown) + (f" ({what})" if what else "")) from None


def _read_lists(dirs: Sequence[str], lm_cost: str) -> NbestSet:
    """The N-best folders read in order and concatenated (an utterance in one only)."""
    owner: Dict[str, str] = {}
    utterances = []
    for d in dirs:
        part = read_kaldi_nbest_dir(d, log=log.info, lm_cost_name=lm_cost)
        twice = [u for u in part.utt_ids if u in owner]
        if twice:
            raise DataError(f"{len(twice)} utterances are in both {owner[twice[0]]} and {d}: {examples(twice)}; "
                            f"give each N-best archive folder once (each utterance must be in one folder only)")
        owner.update(dict.fromkeys(part.utt_ids, d))
        utterances.extend(part.utterances)
    return NbestSet(tuple(utterances), "none", " ".join(dirs))


def _remove_stale(out: str) -> Tuple[str, ...]:
    """Delete ``out/wer_{?,??}`` and ``out/cer_{?,??}`` (not folders), as score_kaldi.sh does."""
    removed = []
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name)
        if _STALE.fullmatch(name) and (os.path.islink(path) or not os.path.isdir(path)):
            os.unlink(path)
            removed.append(path)
    return tuple(removed)


@dataclass(frozen=True, kw_only=True)
class KaldiScoreJob(KaldiScoreOptions):
    """``nbest-rescore kaldi-score`` as a value; options and paths are checked on
    construction, before anything is read (DataError). Fields:
    :class:`~nbest_rescore.options.KaldiScoreOptions` (nbest_rescore/options/commands.py;
    ``word_ins_penalty`` may also be a sequence, kept as written) and ``nbest_dirs``: the
    N-best archive folders (``words_text`` | ``words`` + ``words.txt`` ...; ``acwt`` |
    ``ac_cost``), read in order and concatenated."""

    nbest_dirs: Tuple[str, ...]

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "word_ins_penalty",
                           check_kaldi_score_options(self.min_lmwt, self.max_lmwt, self.word_ins_penalty))
        object.__setattr__(self, "nbest_dirs", tuple(os.fspath(d) for d in self.nbest_dirs))
        object.__setattr__(self, "out", os.fspath(self.out))
        if not self.nbest_dirs:
            raise DataError("kaldi-score: no NBEST_DIR given; name the N-best archive folders (archives.1 ...)")
        check_input_file(self.ref, "--ref", "the data folder's text (references)")  # a pipe: read once
        if not self.lm_cost or os.sep in self.lm_cost:
            raise DataError(f"--lm-cost {self.lm_cost!r}: expected a file name inside each NBEST_DIR, "
                            f"e.g. --lm-cost lmwt.interp")
        for d in self.nbest_dirs:
            if not os.path.isdir(d):
                raise DataError(f"NBEST_DIR {d}: no such folder")
            if not os.path.isfile(os.path.join(d, self.lm_cost)):
                raise DataError(f"--lm-cost {self.lm_cost}: {os.path.join(d, self.lm_cost)} not found; every "
                                f"NBEST_DIR must hold it ('<hyp-key> <cost>' lines for all its hypotheses)")
        for name in ("hyp_filter", "ref_filter"):
            cmd = getattr(self, name)
            if cmd is not None and not cmd.strip():
                raise DataError(f"{flag(name)}: the command is empty; give e.g. {flag(name)} "
                                f"local/wer_output_filter, or leave the option out")
        check_writable_dir(self.out)

    def _points(self) -> List[Tuple[int, str]]:
        """(LMWT, WIP) in score_kaldi.sh's order: WIP outer, LMWT inner."""
        return [(lmwt, wip) for wip in self.word_ins_penalty for lmwt in range(self.min_lmwt, self.max_lmwt + 1)]

    def _sweep(self, nbest: NbestSet) -> List[Dict[str, Words]]:
        """The 1-best (utterance id -> words, list order) of every point of :meth:`_points`."""
        flat = nbest.flat()
        lmwts = list(range(self.min_lmwt, self.max_lmwt + 1))
        chosen = best_path_sweep(flat.ac_cost, flat.lm_cost, flat.num_words, flat.offsets, lmwts,
                                 [float(w) for w in self.word_ins_penalty])
        return [{u.utt_id: flat.hyps[i]
                 for u, i in zip(nbest.utterances, chosen[lmwts.index(lmwt), self.word_ins_penalty.index(wip)])}
                for lmwt, wip in self._points()]

    def run(self) -> KaldiScoreResult:
        """Read the lists and references, sweep, score, and write the set; returns the
        :class:`KaldiScoreResult` (``best_wer_line`` is what score_kaldi.sh prints into
        ``scoring_kaldi/best_wer``)."""
        one_bests = self._sweep(_read_lists(self.nbest_dirs, self.lm_cost))
        test_filt = f"{self.out}/scoring_kaldi/test_filt.txt"
        with atomic_entries(self.out) as tmp:
            scoring = tmp / "scoring_kaldi"
            scoring.mkdir()
            refs = self._references(scoring / "test_filt.txt")
            hyp_sets = [self._one_best(scoring, lmwt, wip, one_best)
                        for (lmwt, wip), one_best in zip(self._points(), one_bests)]
            extra = [u for u in hyp_sets[0] if u not in refs]
            if extra:
                log.warning("%d utterances of the N-best lists have no reference in %s and are not scored (as "
                            "compute-wer --mode=present ignores them): %s", len(extra), self.ref, examples(extra))
            command = compute_wer_command(f"ark:{test_filt}")
            points, texts = [], []
            for (lmwt, wip), hyps, wer in zip(self._points(), hyp_sets, kaldi_wers(refs, hyp_sets, test_filt)):
                text = command + "".join(line + "\n" for line in wer.lines())  # stderr, then stdout
                with atomic_write(tmp / f"wer_{lmwt}_{wip}") as f:
                    f.write(text)
                points.append(KaldiScorePoint(lmwt, wip, hyps, wer, wer_file_name(self.out, lmwt, wip)))
                texts.append((points[-1].wer_file, text))
            line = best_wer_line(sweep_grep_lines(texts))
            best = points[best_index([p.wer_file for p in points], line)]
            (scoring / "wer_details").mkdir()
            for name, value in (("best_wer", line), ("wer_details/lmwt", best.lmwt), ("wer_details/wip", best.wip)):
                with atomic_write(scoring / name) as f:
                    f.write(f"{value}\n")
        removed = _remove_stale(self.out)
        if removed:
            log.info("removed old-style %s (as score_kaldi.sh does)", ", ".join(removed))
        return KaldiScoreResult(self.out, tuple(points), best, line, removed)

    def _references(self, staged: Path) -> Dict[str, Words]:
        """``test_filt.txt``: ``--ref`` (read once: it may be a pipe) through the ref
        filter, written and read back."""
        try:
            with open(self.ref, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise DataError(os_error_message(exc, self.ref, "--ref", writing=False)) from None
        if self.ref_filter is None:
            staged.write_bytes(data)
            refs = _read_text(staged, self.ref)
        else:
            staged.write_bytes(_run_filter(self.ref_filter, data, "--ref-filter", self.ref))
            refs = _read_text(staged, f"{self.out}/scoring_kaldi/test_filt.txt",
                              f"the output of --ref-filter {self.ref_filter!r} on {self.ref}")
        if not refs:
            raise DataError(f"--ref {self.ref}: no references"
                            f"{' after --ref-filter ' + repr(self.ref_filter) if self.ref_filter else ''}; "
                            f"expected '<utterance-id> words...' lines")
        return refs

    def _one_best(self, scoring: Path, lmwt: int, wip: str, one_best: Dict[str, Words]) -> Dict[str, Words]:
        """``penalty_WIP/LMWT.txt``: the 1-best through the hyp filter, written and read back."""
        folder = scoring / f"penalty_{wip}"
        folder.mkdir(exist_ok=True)
        path = folder / f"{lmwt}.txt"
        write_kaldi_text(path, one_best.items())
        if self.hyp_filter is None:
            return one_best
        path.write_bytes(_run_filter(self.hyp_filter, path.read_bytes(), "--hyp-filter",
                                     f"the 1-best at LMWT {lmwt}, WIP {wip}"))
        return _read_text(path, f"{self.out}/scoring_kaldi/penalty_{wip}/{lmwt}.txt",
                          f"the output of --hyp-filter {self.hyp_filter!r}")
