"""Document-aware sharding (docs/scoring.md): :func:`split_nbest` cuts N-best lists into
jobs between documents only (the 1-best history runs through a document), and
:func:`merge_scores` concatenates the jobs' ``score --out`` files, giving the costs and
1-best of one run over the whole set. A shard is a benchmark-layout N-best directory
(``text``, ``ac_cost``, ``lm_cost`` or, with a graph cost, ``lmwt.lmonly`` and
``lmwt.nolm``, ``utt2doc`` and its ``ref.txt`` lines); costs have 6 decimals. Merged
WER: recomputed on the merged 1-best; the jobs' first-pass and oracle counts summed.
Both write their output folder as one set (:func:`~nbest_rescore.io.atomic.atomic_dir`):
after an error nothing is written.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import DataError, examples
from ..evaluation.kaldi_scoring import KaldiWer
from ..evaluation.wer import WerReport, compute_wer
from ..io.atomic import atomic_dir
from ..io.output_checks import check_output_dir, check_outside_inputs
from ..io.kaldi_nbest import split_hyp_key, write_kaldi_nbest_files
from ..io.kaldi_text import read_kaldi_text
from ..io.score_ark import read_cost_ark
from ..options import MergeOptions, SplitOptions
from ..types import NbestSet, Words
from ..validation import check_input_file
from .inputs import load_nbest, load_references, nbest_inputs, read_json_key, run_settings
from .score_outputs import write_score_set
from .score_result import SCORE_OUTPUTS, cost_files

__all__ = ["MergeJob", "MergeResult", "SplitJob", "SplitResult", "merge_scores", "plan_shards", "split_nbest"]

#: The files of a score job that :func:`merge_scores` needs (``wer.json`` is optional;
#: a job of several LMs has ``nn_cost.<name>`` files instead of ``nn_cost``).
MERGED_INPUTS = ("text", "nn_cost")
#: Settings of the score runs that must agree for their outputs to be merged.
_SAME_SETTINGS = ("lm", "model", "lms", "history", "weights", "cache", "ngram_arpa", "prompt")


# --------------------------------------------------------------------------- split

def plan_shards(doc_sizes: Sequence[int], nj: int) -> List[Tuple[int, int]]:
    """Cut documents (in order) into ``nj`` contiguous non-empty runs of about equal
    size.

    Greedy: each shard in turn aims at (hypotheses left) / (shards left) and takes the
    next document while that brings it closer to the aim, always leaving at least one
    document for every later shard; the last shard takes the rest.

    Args:
        doc_sizes: number of hypotheses of each document, in order.
        nj: number of shards, ``1 <= nj <= len(doc_sizes)``.
    Returns:
        ``[(first_doc, end_doc), ...]`` (end exclusive), ``nj`` runs covering all documents.
    Raises:
        ValueError: ``nj`` out of range.
    """
    n = len(doc_sizes)
    if not 1 <= nj <= n:
        raise ValueError(f"nj must be in [1, {n}], got {nj}")
    runs: List[Tuple[int, int]] = []
    start, left = 0, int(sum(doc_sizes))
    for shard in range(nj):
        shards_left = nj - shard
        if shards_left == 1:
            runs.append((start, n))
            break
        aim = left / shards_left
        end, size = start + 1, doc_sizes[start]  # at least one document
        while n - (end + 1) >= shards_left - 1 and abs(size + doc_sizes[end] - aim) <= abs(size - aim):
            size += doc_sizes[end]
            end += 1
        runs.append((start, end))
        start, left = end, left - size
    return runs


@dataclass(frozen=True)
class SplitResult:
    """What :func:`split_nbest` wrote.

    Attributes:
        out: the output folder; shard ``i`` (1-based) is ``out/i``.
        documents, utterances, hypotheses: per shard, in shard order.
        doc_source: where the documents came from (``utt2doc``, ``utt2spk``, ``none``
            = one per utterance, ``file`` = a plain list's single document).
        refs: whether ``ref.txt`` files were written.
    """

    out: str
    documents: Tuple[int, ...]
    utterances: Tuple[int, ...]
    hypotheses: Tuple[int, ...]
    doc_source: str
    refs: bool

    def report(self) -> str:
        """One line per shard."""
        lines = [f"wrote {len(self.documents)} shards of whole documents (documents from {self.doc_source}) "
                 f"into {self.out}/1 .. {self.out}/{len(self.documents)}"]
        for i, (d, u, h) in enumerate(zip(self.documents, self.utterances, self.hypotheses), 1):
            lines.append(f"  {i}: {d} documents, {u} utterances, {h} hypotheses")
        return "\n".join(lines)


def _check_nj(nj) -> None:
    if isinstance(nj, bool) or not isinstance(nj, int) or nj < 1:
        raise DataError(f"--nj {nj!r}: the number of shards must be an integer >= 1; e.g. --nj 4")


def _split_outputs(nj: int) -> List[str]:
    return [str(i) for i in range(1, nj + 1)]


def split_nbest(nbest_dir, out_dir, nj: int) -> SplitResult:
    """Split the lists at ``nbest_dir`` (anything :func:`~nbest_rescore.api.load_nbest`
    reads with defaults) into ``nj`` shards of whole documents in ``out_dir`` (replaced
    as a whole); returns the :class:`SplitResult`.

    Raises:
        DataError: ``nj`` < 1 or more than the documents (the message says how many
            there are and what to give); unreadable lists; ``out_dir`` unusable.
            Nothing is written then.
    """
    _check_nj(nj)
    check_output_dir(out_dir, _split_outputs(nj), option="OUT_DIR")
    nbest = load_nbest(nbest_dir)
    docs = nbest.documents()
    if nj > len(docs):
        how = {"none": "one per utterance: there is no utt2doc or utt2spk",
               "file": "a plain list without an utt2doc is one document"}.get(nbest.doc_source,
                                                                            f"from {nbest.doc_source}")
        raise DataError(f"--nj {nj}: {nbest_dir} has only {len(docs)} documents ({how}), and a document is never "
                        f"split (its 1-best history would break); give --nj {len(docs)} or fewer")
    ref_path = os.path.join(os.fspath(nbest_dir), "ref.txt")
    refs = load_references(ref_path) if os.path.isdir(nbest_dir) and os.path.isfile(ref_path) else None
    with_graph = any(np.any(u.graph_cost) for u in nbest.utterances)
    runs = plan_shards([sum(len(nbest.utterances[i]) for i in d) for d in docs], nj)
    counts = []
    with atomic_dir(out_dir, _split_outputs(nj), option="OUT_DIR",
                    settings={"nbest": os.fspath(nbest_dir), "nj": nj, "doc_source": nbest.doc_source}) as tmp:
        for i, (a, b) in enumerate(runs, 1):
            part = NbestSet(tuple(nbest.utterances[j] for d in docs[a:b] for j in d), nbest.doc_source,
                            f"{nbest.source} shard {i}/{nj}")
            (tmp / str(i)).mkdir()
            write_kaldi_nbest_files(tmp / str(i), part, refs, with_graph)
            counts.append((b - a, len(part), part.num_hyps()))
    return SplitResult(os.fspath(out_dir), *zip(*counts), nbest.doc_source, refs is not None)


@dataclass(frozen=True)
class SplitJob(SplitOptions):
    """``nbest-rescore split`` as a value (options: :class:`SplitOptions`); ``nj`` and
    ``out`` are checked on construction, before anything is read."""

    nbest: str
    out: str

    def __post_init__(self):
        _check_nj(self.nj)
        super().__post_init__()
        if not os.path.exists(self.nbest):
            raise DataError(f"NBEST_DIR {self.nbest}: no such file or folder")
        check_outside_inputs(self.out, [("NBEST_DIR", self.nbest), *nbest_inputs("NBEST_DIR", self.nbest)],
                             option="OUT_DIR")
        check_output_dir(self.out, _split_outputs(self.nj), option="OUT_DIR")

    def run(self) -> SplitResult:
        """Read, split and write; returns the :class:`SplitResult`."""
        return split_nbest(self.nbest, self.out, self.nj)


# --------------------------------------------------------------------------- merge

@dataclass(frozen=True)
class MergeResult:
    """What :func:`merge_scores` found: the ``jobs`` in merge order; ``one_best``
    (utterance id -> words) and ``nn_cost`` (hypothesis key -> negated natural log; empty
    for jobs of several LMs, whose costs are ``nn_costs_by_lm``: name -> key -> cost) in
    job order; with references ``wer`` (name -> :class:`WerReport`, percent; see the
    module docstring), ``sentence_errors`` and ``absent_refs`` (references with no merged
    1-best, not scored), else None, None, 0; ``settings``: the jobs' shared score settings.
    """

    jobs: Tuple[str, ...]
    one_best: Mapping[str, Words] = field(repr=False)
    nn_cost: Mapping[str, float] = field(repr=False)
    wer: Optional[Dict[str, WerReport]]
    sentence_errors: Optional[int]
    settings: dict
    absent_refs: int = 0
    nn_costs_by_lm: Mapping[str, Mapping[str, float]] = field(default_factory=dict, repr=False)

    @property
    def cost_files(self) -> Tuple[str, ...]:
        """The merged NN cost files: ``nn_cost``, or ``nn_cost.<name>`` per LM."""
        return cost_files(tuple(self.nn_costs_by_lm))

    def _hypotheses(self) -> int:
        return len(next(iter(self.nn_costs_by_lm.values()))) if self.nn_costs_by_lm else len(self.nn_cost)

    def summary(self) -> dict:
        """JSON-ready record (the merged ``wer.json``)."""
        out = {"jobs": list(self.jobs), "utterances": len(self.one_best), "hypotheses": self._hypotheses(),
               **self.settings}
        if self.wer is not None:
            out["wer"] = {name: r.to_dict() for name, r in self.wer.items()}
            out["sentence_errors"] = self.sentence_errors
            out["absent_refs"] = self.absent_refs
        return out

    def kaldi_wer_lines(self) -> List[str]:
        """What Kaldi's ``compute-wer --text --mode=present ark:REF ark,p:TEXT`` prints
        for the merged 1-best (``%WER``, ``%SER`` and ``Scored`` lines); empty without
        references."""
        if self.wer is None:
            return []
        return KaldiWer(self.wer["rescored"], self.sentence_errors, self.absent_refs).lines()

    def report(self, out_dir=None) -> str:
        """Printable report: counts and, with references, the Kaldi-style WER lines."""
        costs = ", ".join(f"{out_dir}/{n}" for n in self.cost_files)
        where = f" into {out_dir}/text and {costs}" if out_dir else ""
        lines = [f"merged {len(self.jobs)} jobs{where} ({len(self.one_best)} utterances, "
                 f"{self._hypotheses()} hypotheses)"]
        return "\n".join(lines + self.kaldi_wer_lines())


def _check_jobs(job_dirs: Sequence[str]) -> None:
    if not job_dirs:
        raise DataError("merge: no job folders given; name the --out folders of the score jobs, in order")
    seen: Dict[str, int] = {}
    for i, d in enumerate(job_dirs):
        real = os.path.realpath(d)
        if real in seen:
            raise DataError(f"merge: job folder {d} is given twice (as job {seen[real] + 1} and job {i + 1})")
        seen[real] = i
        if not os.path.isdir(d):
            raise DataError(f"merge: job folder {d} not found: every score job must have finished (its --out "
                            f"folder holds {' and '.join(MERGED_INPUTS)}); rerun the missing job")
        for name in MERGED_INPUTS:
            if not os.path.isfile(os.path.join(d, name)) and not (name == "nn_cost" and _job_cost_files(d)):
                raise DataError(f"merge: {os.path.join(d, name)} not found: {d} is not a finished score job "
                                f"(expected {', '.join(MERGED_INPUTS)}, or nn_cost.NAME per LM); rerun that job")


def _job_cost_files(job_dir: str) -> Tuple[str, ...]:
    """The NN cost files of a score job folder: ``("nn_cost",)``, or its ``nn_cost.<name>`` files, sorted."""
    if os.path.isfile(os.path.join(job_dir, "nn_cost")):
        return ("nn_cost",)
    return tuple(sorted(n for n in os.listdir(job_dir)
                        if n.startswith("nn_cost.") and os.path.isfile(os.path.join(job_dir, n))))


def _check_out(out_dir, job_dirs: Sequence[str]) -> None:
    """``out_dir`` can hold the merged outputs and is none of the job folders."""
    check_output_dir(out_dir, SCORE_OUTPUTS)
    real = os.path.realpath(out_dir)
    for d in job_dirs:
        if os.path.realpath(d) == real:
            raise DataError(f"merge: --out {out_dir} is also a job folder; the merge would replace that job's "
                            f"outputs - choose a new --out folder")


def merge_scores(job_dirs: Sequence, out_dir=None, refs: Optional[Mapping[str, Sequence[str]]] = None,
                 ref_source: str = "the references") -> MergeResult:
    """Concatenate the score outputs of ``job_dirs`` (in order) and, with ``out_dir``,
    write ``text``, ``nn_cost`` (jobs of several LMs: each ``nn_cost.<name>``, merged
    per name) and (with ``refs``) ``wer.json`` there as one set.

    Args:
        job_dirs: the ``--out`` folders of the score jobs, in the order of the data.
        out_dir: output folder (replaced as a whole), or None to write nothing.
        refs: utterance id -> reference words, to compute the WER of the merged 1-best.
        ref_source: names the references in messages (the ``--ref`` file).
    Returns:
        :class:`MergeResult`.
    Raises:
        DataError: no jobs, a job folder given twice, a missing job folder or file; an
            utterance or hypothesis key in two jobs (both folders named); a job whose
            ``nn_cost`` keys do not belong to its ``text`` utterances, or whose LMs'
            cost files differ in keys; jobs with other NN cost files (other LMs), or
            scored with different models, weights or history (their run markers); references
            missing for merged utterances, or all of them empty (an empty reference
            is scored as Kaldi scores it). Nothing is written then.
    """
    job_dirs = [os.fspath(d) for d in job_dirs]
    _check_jobs(job_dirs)
    if out_dir is not None:
        _check_out(out_dir, job_dirs)
    files = _job_cost_files(job_dirs[0])
    one_best, merged, settings = _gather(job_dirs, files)
    wer, sentence_errors, absent = _merged_wer(job_dirs, one_best, refs, ref_source)
    by_lm = {name[len("nn_cost."):]: c for name, c in merged.items() if name != "nn_cost"}
    res = MergeResult(tuple(job_dirs), one_best, merged.get("nn_cost", {}), wer, sentence_errors,
                      dict(settings or {}), absent, by_lm)
    if out_dir is not None:
        keys = list(merged[files[0]])
        costs = [np.fromiter((merged[name][k] for k in keys), np.float64, len(keys)) for name in files]
        write_score_set(out_dir, res, files, one_best.items(), keys, costs)
    return res


def _gather(job_dirs: Sequence[str], files: Tuple[str, ...]):
    """(1-best of every utterance, cost file name -> hypothesis key -> cost, the jobs'
    common run settings or None) of the jobs, checked as :func:`merge_scores` says."""
    one_best: Dict[str, Words] = {}
    merged: Dict[str, Dict[str, float]] = {f: {} for f in files}
    owner_utt: Dict[str, str] = {}
    owner_key: Dict[str, str] = {}
    settings: Optional[dict] = None
    settings_from = None
    for d in job_dirs:
        text = read_kaldi_text(os.path.join(d, "text"))
        costs = _read_job_costs(d, files, job_dirs[0])
        keys = costs[files[0]]
        for what, entries, owner in (("utterance", text, owner_utt), ("hypothesis key", keys, owner_key)):
            dup = [k for k in entries if k in owner]
            if dup:
                raise DataError(f"merge: {len(dup)} {what}s are in both {owner[min(dup)]} and {d}: "
                                f"{examples(dup)}; each utterance must be scored by exactly one job (split "
                                f"with 'nbest-rescore split' and merge each shard's output once)")
        stray = sorted({k for k in keys if _utt_of(k, d) not in text})
        if stray:
            raise DataError(f"merge: {d}: {len(stray)} keys of {files[0]} belong to no utterance of its text: "
                            f"{examples(stray)}; text and {files[0]} come from different runs - rerun that job")
        run = run_settings(d)
        if run:
            mine = {k: run.get(k) for k in _SAME_SETTINGS}
            if settings is None:
                settings, settings_from = mine, d
            if mine != settings:
                diff = [k for k in _SAME_SETTINGS if mine[k] != settings[k]]
                raise DataError(f"merge: {settings_from} and {d} were scored with different settings "
                                f"({', '.join(f'{k} {settings[k]!r} vs {mine[k]!r}' for k in diff)}); "
                                f"rescore every job with the same options")
        one_best.update(text)
        for name in files:
            merged[name].update(costs[name])
        owner_utt.update(dict.fromkeys(text, d))
        owner_key.update(dict.fromkeys(keys, d))
    return one_best, merged, settings


def _merged_wer(job_dirs: Sequence[str], one_best: Mapping[str, Words], refs, ref_source: str):
    """(name -> :class:`WerReport`: the merged 1-best's ``rescored`` and, where every
    job has them, the summed ``first_pass`` and ``oracle``; sentence errors; references
    without an utterance), or (None, None, 0) without ``refs``."""
    if refs is None:
        return None, None, 0
    absent = sum(1 for u in refs if u not in one_best)
    wer = {"rescored": compute_wer(refs, one_best, ref_source)}
    sentence_errors = sum(1 for u, h in one_best.items() if tuple(h) != tuple(refs[u]))
    job_wer = [read_json_key(os.path.join(d, "wer.json"), "wer") for d in job_dirs]
    for name in ("first_pass", "oracle"):
        if all(w is not None and name in w for w in job_wer):
            wer[name] = WerReport(**{f.name: int(sum(w[name][f.name] for w in job_wer)) for f in fields(WerReport)})
    return wer, sentence_errors, absent


def _read_job_costs(job_dir: str, files: Tuple[str, ...], first: str) -> Dict[str, Dict[str, float]]:
    """Cost file name -> (hypothesis key -> NN cost) of a job; DataError unless it has the
    ``files`` of the first job ``first``, each with the same keys in the same order."""
    mine = _job_cost_files(job_dir)
    if mine != files:
        raise DataError(f"merge: {first} has {', '.join(files)} but {job_dir} has {', '.join(mine)}: the jobs were "
                        f"scored with different --lm checkpoints; rescore every job with the same --lm options")
    costs = {f: read_cost_ark(os.path.join(job_dir, f)) for f in files}
    keys = list(costs[files[0]])
    for f in files[1:]:
        if list(costs[f]) != keys:
            raise DataError(f"merge: {job_dir}: {f} and {files[0]} hold different hypothesis keys; they come from "
                            f"different runs - rerun that job")
    return costs


def _utt_of(key: str, job_dir: str) -> str:
    try:
        return split_hyp_key(key)[0]
    except ValueError as exc:
        raise DataError(f"merge: {job_dir}/nn_cost: {exc}") from None


@dataclass(frozen=True)
class MergeJob(MergeOptions):
    """``nbest-rescore merge`` as a value (options: :class:`MergeOptions`): the job
    folders, ``ref`` and ``out`` are checked on construction, before anything is read."""

    jobs: Tuple[str, ...]

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "jobs", tuple(os.fspath(j) for j in self.jobs))
        _check_jobs(self.jobs)
        if self.ref is not None:  # a named pipe is read once, as a stream
            check_input_file(self.ref, "--ref", "the references (Kaldi text)")
        _check_out(self.out, self.jobs)  # (--out being a job folder: its own message)
        check_outside_inputs(self.out, [("JOB_DIR", self.jobs), ("--ref", self.ref)])

    def run(self) -> MergeResult:
        """Read, merge and write; returns the :class:`MergeResult`."""
        refs = load_references(self.ref) if self.ref else None
        return merge_scores(self.jobs, self.out, refs, self.ref or "the references")
