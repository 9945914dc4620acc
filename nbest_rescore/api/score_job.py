"""The ``score`` job: NN costs for every hypothesis, the new 1-best, and WER; the
combined score of a hypothesis with K neural LMs (``w_0 = interp``, ``w_0 + .. + w_K
= 1``) is that of docs/scoring.md (:mod:`nbest_rescore.rescoring.combine`).

Several LMs are scored one after the other, each by the one-LM path exactly as if
scored alone (for the ``rescored`` / ``interpolated`` histories the 1-best it reads is
its own, picked with ``w_0`` and ``1 - w_0`` on that LM); only the final 1-best
combines them. The weights: :mod:`.score_weights`, the span accumulator:
:mod:`.score_spans`, the result: :mod:`.score_result`, the outputs:
:mod:`.score_outputs`; their public names are importable from here too.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, fields, replace
from typing import Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import DataError
from ..evaluation.wer import check_references
from ..io.output_checks import check_output_dir, check_outside_inputs
from ..io.spans import NbestSource, SetSource
from ..options import SPAN_HYPS, ScoreOptions, ScorerOptions, ScoringOptions, WeightOptions
from ..rescoring.combine import Weights
from ..rescoring.selective import Selection
from ..rescoring.scorer import check_device
from ..types import NbestSet
from ..validation import check_paths, check_value
from .context_input import check_context_options, job_context
from .inputs import (Progress, job_inputs, load_references, open_job_nbest, read_tuned_order,
                     read_weights_file)
from .lm_loading import LoadedLM, lm_names, load_lm, seed_everything, set_threads
from .score_outputs import finish, stream_score_outputs, write_score_outputs
from .score_result import SCORE_OUTPUTS, ScoreResult, cost_files
from .score_spans import SpanScores, first_pass_one_best, wer_span_counts, _SpanRun
from .score_weights import lm_histories, parse_nn_weights, score_weights

__all__ = ["SCORE_OUTPUTS", "SPAN_HYPS", "ScoreJob", "ScoreResult", "SpanScores", "cost_files", "finish",
           "first_pass_one_best", "lm_histories", "parse_nn_weights", "score", "score_weights", "wer_span_counts",
           "write_score_outputs"]

log = logging.getLogger(__name__)
_WEIGHT_FIELDS = tuple(f.name for f in fields(WeightOptions) if f.name != "weights_file")
_SCORER_FIELDS = tuple(f.name for f in fields(ScorerOptions))


def _start(source: NbestSource, lms: Sequence[LoadedLM], weights: Weights, histories: Tuple[str, ...],
           opts: ScorerOptions, *, refs, ngram_arpa, progress, selection=None, context=None) -> _SpanRun:
    """A run ready for the spans of ``source`` (``refs`` checked by the caller;
    ``context``: the hf: LMs' :class:`~nbest_rescore.rescoring.hf_context.TextContext` or None)."""
    index = source.index
    run = _SpanRun(lms, weights, histories, refs, ngram_arpa, opts, progress, index.num_hyps(), selection, context)
    docs = len(index.doc_bounds()) - 1
    for one, h in zip(lms, histories):
        log.info("%s: history conditioning %s (%d documents, %d utterances, grouping from %s)%s", one.path, h,
                 docs, len(index), index.doc_source,
                 "; backward LM: documents read from their last utterance to their first, hypotheses reversed"
                 if getattr(one.model, "direction", "forward") == "backward" else "")
    return run


def _selection(skip_confident: Optional[float], prune_mass: Optional[float]) -> Optional[Selection]:
    """The selective-rescoring rules (None: every hypothesis is scored); DataError out of range."""
    return None if skip_confident is None and prune_mass is None else Selection(skip_confident, prune_mass)


def _split_options(options: dict, n_lms: int) -> Tuple[Weights, ScorerOptions]:
    """The keyword options of :func:`score`: (the weights, the scorer's knobs). Raises
    TypeError for an unknown name, DataError for a bad value or weights (:func:`score_weights`)."""
    unknown = sorted(set(options) - set(_WEIGHT_FIELDS) - set(_SCORER_FIELDS))
    if unknown:
        raise TypeError(f"score() got unexpected keyword arguments {', '.join(unknown)}")
    w = WeightOptions(**{k: v for k, v in options.items() if k in _WEIGHT_FIELDS})
    weights = score_weights(w.acoustic_scale, w.lm_weight, w.interp, w.word_ins_penalty, w.nn_weights, n_lms)
    return weights, ScorerOptions(**{k: v for k, v in options.items() if k in _SCORER_FIELDS})


def score(nbest: NbestSet, lm: Union[LoadedLM, Sequence[LoadedLM]], *,
          refs: Optional[Mapping[str, Sequence[str]]] = None, history: Union[str, Sequence[str]] = "first-pass",
          ngram_arpa=None, progress: Optional[Progress] = None, span_hyps: Optional[int] = None,
          skip_confident: Optional[float] = None, prune_mass: Optional[float] = None, prompt: Optional[str] = None,
          context_file=None, **options) -> ScoreResult:
    """Rescore ``nbest`` with one or several NN LMs and pick the new 1-best (nothing
    is written).

    Options: the fields of :class:`~nbest_rescore.options.ScoreOptions`
    (nbest_rescore/options/commands.py) as keywords: those of ``WeightOptions`` (not
    ``weights_file``; ``nn_weights`` None splits ``1 - interp`` equally) and
    ``ScorerOptions``, ``history`` (one for every LM, or one per LM in order),
    ``ngram_arpa``, ``span_hyps`` (None, the default: the whole set at once; the
    results do not depend on it), ``skip_confident`` and ``prune_mass`` (selective
    rescoring, :mod:`~nbest_rescore.rescoring.selective`; None: every hypothesis scored),
    ``prompt`` and ``context_file`` (hf: LMs: texts before the history,
    :mod:`~nbest_rescore.rescoring.hf_context`).

    Args:
        nbest: from :func:`load_nbest`.
        lm: from :func:`load_lm`: one LM, or a sequence of K LMs (named by
            :func:`~nbest_rescore.api.lm_loading.lm_names`), each scored in its own pass.
        refs: utterance id -> reference words (:func:`load_references`); checked first.
        progress: called as ``progress(hypotheses_done, hypotheses_total)`` (over all
            the LMs' passes).
    Returns:
        :class:`ScoreResult` (``nn_costs_by_lm``: each LM's float64 [H] costs).
    Raises:
        TypeError: an unknown option name.
        DataError: no LM, an option out of range, weights that do not sum to 1, not one
            history or NN weight per LM, references missing or empty, a prompt or context
            file with a word-level LM or a bad context file, or non-finite NN costs (the
            model and a few hypothesis keys named).
    """
    lms = [lm] if isinstance(lm, LoadedLM) else list(lm)
    if not lms:
        raise DataError("score: no NN LM given; give at least one (load_lm / --lm)")
    weights, opts = _split_options(options, len(lms))
    check_value(ScoringOptions, "history", history)  # as the option: each policy one of HISTORY_MODES
    selection = _selection(skip_confident, prune_mass)
    histories = lm_histories(history, len(lms))
    check_context_options([one.path for one in lms], prompt, context_file)
    source = SetSource(nbest)
    if refs is not None:
        check_references(source.index, refs)
    run = _start(source, lms, weights, histories, opts, refs=refs, ngram_arpa=ngram_arpa, progress=progress,
                 selection=selection, context=job_context(prompt, context_file, source.index))
    parts = [run.span(span) for span in source.spans(span_hyps)]
    res = run.result(nbest.source)

    def cat(arrays):
        return np.concatenate(arrays) if arrays else np.zeros(0)

    by_lm = {n: cat([p.costs_by_lm[i] for p in parts]) for i, n in enumerate(res.names)}
    return replace(res, keys=tuple(k for p in parts for k in p.keys), nn_cost=cat([p.nn_cost for p in parts]),
                   nn_costs_by_lm=by_lm)


def job_weights(opts: WeightOptions, names: Tuple[str, ...]) -> Weights:
    """The combination weights of a job with the NN LMs ``names``: from ``weights_file``
    (its NN weights put in the order of ``names``; with one LM and one NN weight in the
    file, that weight whatever its name) or the weight options. Raises DataError (see
    :func:`score_weights`; a weights file naming other LMs than ``names``)."""
    n = len(names)
    if opts.weights_file is None:
        return score_weights(opts.acoustic_scale, opts.lm_weight, opts.interp, opts.word_ins_penalty,
                             opts.nn_weights, n)
    w, in_file = read_weights_file(opts.weights_file)
    if n == 1 and len(in_file) == 1:  # one LM: its weight, whatever the name (tune calls a lone nn_cost 'nn')
        in_file = names
    if sorted(in_file) != sorted(names):
        raise DataError(f"--weights {opts.weights_file} has weights for the NN LMs {', '.join(in_file)}, but the "
                        f"--lm checkpoints are named {', '.join(names)} (from their file names); give the "
                        f"checkpoints that file was tuned with, under the same file names")
    by_name = dict(zip(in_file, w.lm_weights_per_model))
    return score_weights(w.acoustic_scale, w.lm_weight, w.interp, w.word_ins_penalty,
                         tuple(by_name[m] for m in names), n)


@dataclass(frozen=True, kw_only=True)
class ScoreJob(ScoreOptions):
    """``nbest-rescore score`` as a value: every option is checked on construction,
    before anything is read (the weights file and the weights included); :meth:`run`
    reads the inputs, scores and writes. Fields: :class:`~nbest_rescore.options.ScoreOptions`
    (nbest_rescore/options/commands.py); ``lm``, ``history`` and ``nn_weights`` may also
    be sequences; ``out`` None writes nothing (the caller prints ``one_best``)."""

    seed: int = 0

    @property
    def lm_paths(self) -> Tuple[str, ...]:
        """The checkpoints, in order."""
        return (os.fspath(self.lm),) if isinstance(self.lm, (str, os.PathLike)) else tuple(map(os.fspath, self.lm))

    @property
    def lm_names(self) -> Tuple[str, ...]:
        """The LM names (file names of the checkpoints, made unique)."""
        return lm_names(self.lm_paths)

    def weights(self) -> Weights:
        """The combination weights (:func:`job_weights` for the ``lm`` names)."""
        return job_weights(self, self.lm_names)

    def __post_init__(self):
        super().__post_init__()
        if not self.lm_paths:
            raise DataError("--lm: no checkpoint given; give at least one --lm M.pt")
        check_paths(self)
        self.weights()
        self.scorer_options()
        lm_histories(self.history, len(self.lm_paths))
        check_device(self.device, self)
        check_context_options(self.lm_paths, self.prompt, self.context_file)
        if self.out is not None:
            check_outside_inputs(self.out, job_inputs(self))
            check_output_dir(self.out, SCORE_OUTPUTS + cost_files(self.lm_names))

    def scorer_options(self) -> ScorerOptions:
        """The scorer's knobs: these options, with ``max_ngram_order`` from the
        ``weights_file`` (:func:`~.inputs.read_tuned_order`) when it is not given."""
        knobs = {k: getattr(self, k) for k in _SCORER_FIELDS}
        if self.weights_file is not None and self.max_ngram_order is None:
            knobs["max_ngram_order"] = read_tuned_order(self.weights_file)
        return ScorerOptions(**knobs)

    def run(self, progress: Optional[Progress] = None) -> ScoreResult:
        """Read, score and (with ``out``) write, one span of whole documents of at most
        ``span_hyps`` hypotheses at a time (:func:`~nbest_rescore.io.spans.plan_spans`):
        the lists are read and checked once first (:func:`~nbest_rescore.api.inputs.open_nbest`),
        then scored and written span by span into the hidden folder that becomes
        ``out`` at the end (:func:`~nbest_rescore.io.atomic.atomic_dir`).

        Returns:
            the :class:`ScoreResult` with the 1-best, WER, stats and settings; its
            per-hypothesis fields (``keys``, ``nn_cost``, ``nn_costs_by_lm``) are empty
            (the costs are in ``out``; :func:`score` keeps them in memory).
        """
        weights = self.weights()
        seed_everything(self.seed)
        threads = set_threads(self.threads)
        source = open_job_nbest(self)
        refs = load_references(self.ref) if self.ref else None
        if refs is not None:
            check_references(source.index, refs, self.ref)
        context = job_context(self.prompt, self.context_file, source.index)
        lms = [load_lm(p, self.device, **self.cache_kwargs(), **self.hf_kwargs()) for p in self.lm_paths]
        run = _start(source, lms, weights, lm_histories(self.history, len(lms)), self.scorer_options(), refs=refs,
                     ngram_arpa=self.ngram_arpa, progress=progress,
                     selection=_selection(self.skip_confident, self.prune_mass), context=context)
        extra = {k: getattr(self, k) for k in ("weights_file", "prompt", "context_file")
                 if getattr(self, k) is not None}

        def result() -> ScoreResult:
            res = run.result(self.nbest)
            return replace(res, settings={**res.settings, "nbest": self.nbest,
                                          "scoring": {**res.settings["scoring"], "threads": threads}, **extra})

        spans = source.spans(self.span_hyps or None)
        if self.out is None:
            for span in spans:
                run.span(span)
            return result()
        return stream_score_outputs(self.out, cost_files(self.lm_names), run, spans, result)
