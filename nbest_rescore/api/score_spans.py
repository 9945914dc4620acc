"""The span accumulator of ``score``: one run over the spans of whole documents of a
set (:class:`_SpanRun`), each span's scores (:class:`SpanScores`) and the run's totals
(counts, time, WER counts, 1-bests) as a :class:`~.score_result.ScoreResult`."""
from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import DataError, examples
from ..evaluation.wer import WerCounts, oracle_choice, wer_counts
from ..models.cache import cache_settings
from ..options import ScorerOptions
from ..rescoring.combine import Weights, flat_scores, segment_argmax
from ..rescoring.hf_context import TextContext
from ..rescoring.history import NonFiniteCostError, rescore
from ..rescoring.ngram import NgramScorer
from ..rescoring.selective import Selection
from ..types import NbestSet, Words
from .inputs import Progress
from .lm_loading import LoadedLM, lm_names
from .score_result import ScoreResult


def first_pass_one_best(nbest: NbestSet, weights: Weights, ngram_cost=None) -> Dict[str, Words]:
    """utterance id -> 1-best by acoustic + n-gram only (``interp = 1``) at ``weights``."""
    flat = nbest.flat(ngram_cost)
    best = segment_argmax(flat_scores(flat, replace(weights, interp=1.0, nn_weights=None)), flat.offsets)
    return {u.utt_id: flat.hyps[best[i]] for i, u in enumerate(nbest.utterances)}


def wer_span_counts(nbest: NbestSet, refs, one_best, weights: Weights, ngram_cost=None) -> Dict[str, WerCounts]:
    """Word error counts (to be summed over spans) of ``one_best``, of the first pass
    and of the oracle of the lists ``nbest`` (``ngram_cost``: float64 [H] or None;
    the references of a span may all be empty, :meth:`WerCounts.report` checks the total)."""
    return {"rescored": wer_counts(refs, one_best),
            "first_pass": wer_counts(refs, first_pass_one_best(nbest, weights, ngram_cost)),
            "oracle": wer_counts(refs, oracle_choice(nbest, refs, part=True))}


@dataclass(frozen=True)
class SpanScores:
    """The scores of one span of whole documents (h hypotheses of u utterances).

    Attributes:
        keys: the h hypothesis keys, in set order.
        costs_by_lm: per LM (in order) float64 [h] NN costs (negated natural logs).
        nn_cost: float64 [h]: the one LM's costs, or with several their weighted mean
            (as :attr:`ScoreResult.nn_cost`).
        best: int64 [u] index (into ``keys``) of each utterance's new 1-best.
        one_best: utterance id -> new 1-best words, in set order.
        wer: ``rescored``, ``first_pass``, ``oracle`` -> word error counts of the
            span (:class:`~nbest_rescore.evaluation.wer.WerCounts`), or None without
            references.
    """

    keys: Tuple[str, ...]
    costs_by_lm: Tuple[np.ndarray, ...] = field(repr=False)
    nn_cost: np.ndarray = field(repr=False)
    best: np.ndarray = field(repr=False)
    one_best: Mapping[str, Words] = field(repr=False)
    wer: Optional[Dict[str, WerCounts]]


class _SpanRun:
    """One score run, span after span: the LMs' scorers (made once), the weights,
    and the totals so far (counts, words, seconds per LM, WER counts, 1-bests).
    :meth:`span` scores one span; :meth:`result` gives the run's
    :class:`ScoreResult` (per-hypothesis fields empty: the caller keeps those).
    ``context``: the texts before the history of hf: LMs (``--prompt``/``--context-file``)."""

    def __init__(self, lms: Sequence[LoadedLM], weights: Weights, histories: Tuple[str, ...], refs, ngram_arpa,
                 opts: ScorerOptions, progress: Optional[Progress], total_hyps: int,
                 selection: Optional[Selection] = None, context: Optional[TextContext] = None):
        self.lms, self.weights, self.histories, self.refs = list(lms), weights, histories, refs
        self.selection = selection
        self.hyps_scored = 0
        self.ngram_arpa = ngram_arpa
        self.ngram = None if ngram_arpa is None else NgramScorer(ngram_arpa)
        self.scorers = [lm.scorer(opts, context) for lm in self.lms]
        self.progress, self.total = progress, total_hyps
        if progress is not None:  # the clock starts now: the first line (or bar) before any scoring
            progress(0, len(self.lms) * total_hyps)
        self.words: Counter = Counter()
        self.seconds = [0.0] * len(self.lms)
        self.utts = self.hyps = self.tokens = 0
        self.wer: Optional[Dict[str, WerCounts]] = None
        self.one_best: Dict[str, Words] = {}
        self.best: List[np.ndarray] = []

    def span(self, nbest: NbestSet) -> SpanScores:
        """Score the span ``nbest`` (whole documents) with every LM; add it to the totals.
        Raises DataError for non-finite NN costs."""
        k, weights = len(self.lms), self.weights
        ngram_cost = None if self.ngram is None else np.concatenate([self.ngram.costs(u.hyps)
                                                                     for u in nbest.utterances])
        alone = replace(weights, nn_weights=None)  # each LM's pass: the two-model weights
        h = nbest.num_hyps()
        runs = []
        for i, (lm, scorer, history) in enumerate(zip(self.lms, self.scorers, self.histories)):
            base = k * self.hyps + i * h
            report = None if self.progress is None else (lambda n, b=base: self.progress(b + n, k * self.total))
            t0 = time.perf_counter()
            try:  # the one-LM path
                runs.append(rescore(nbest, scorer, alone, history, ngram_cost, report, self.selection))
            except NonFiniteCostError as exc:
                raise DataError(f"the NN LM {lm.path} ({lm.name}) gave non-finite costs (NaN or inf), e.g. for "
                                f"{examples(exc.keys)}: its weights are probably corrupt (a diverged training); use "
                                f"an earlier checkpoint or retrain") from None
            self.seconds[i] += time.perf_counter() - t0
        costs = tuple(r.nn_cost for r in runs)
        if k == 1:
            nn_cost, best, one_best = costs[0], runs[0].best, runs[0].one_best
        else:
            flat = nbest.flat(ngram_cost)
            best = segment_argmax(flat_scores(flat, weights, list(costs)), flat.offsets)
            one_best = {u.utt_id: flat.hyps[best[i]] for i, u in enumerate(nbest.utterances)}
            ws = np.asarray(weights.nn_weights)
            nn_cost = (ws / ws.sum() if ws.sum() > 0 else np.full(k, 1.0 / k)) @ np.stack(costs)
        wer = None if self.refs is None else wer_span_counts(nbest, self.refs, one_best, weights, ngram_cost)
        self.words.update(chain.from_iterable(h for u in nbest.utterances for h in u.hyps))
        self.tokens += int(sum(len(x) + 1 for u in nbest.utterances for x in u.hyps))
        if runs[0].scored is not None:  # (the same hypotheses for every LM: first-pass posteriors)
            self.hyps_scored += int(runs[0].scored.sum())
        self.best.append(np.asarray(best, dtype=np.int64) + self.hyps)
        self.utts += len(nbest)
        self.hyps += h
        self.one_best.update(one_best)
        if wer is not None:
            self.wer = wer if self.wer is None else {n: self.wer[n] + c for n, c in wer.items()}
        keys = tuple(key for u in nbest.utterances for key in u.keys)
        return SpanScores(keys, costs, nn_cost, np.asarray(best, dtype=np.int64), one_best, wer)

    def result(self, source: str) -> ScoreResult:
        """The run's :class:`ScoreResult` over every span so far (``source``: the lists
        read), with empty ``keys``, ``nn_cost`` and ``nn_costs_by_lm``."""
        names = lm_names([one.path for one in self.lms])
        stats, settings = self._records(names, source)
        history = self.histories[0] if len(set(self.histories)) == 1 else ",".join(self.histories)
        wer = None if self.wer is None else {n: c.report() for n, c in self.wer.items()}
        best = np.concatenate(self.best) if self.best else np.zeros(0, dtype=np.int64)
        return ScoreResult((), np.zeros(0), self.one_best, best, self.weights, history, wer, stats, settings, names,
                           {})

    def _records(self, names, source: str):
        """``(stats, settings)`` of the run: as ever for one LM; with several, the
        lists' counts, the total time and, per LM, its records (``per_lm``, ``lms``)."""
        vocab = [sc.word_stats(self.words) for sc in self.scorers]
        lm_set = [{"lm": lm.path, "model": lm.name, "cache": cache_settings(lm.model), "scoring": sc.settings()}
                  for lm, sc in zip(self.lms, self.scorers)]
        k, first, seconds = len(self.lms), lm_set[0], sum(self.seconds)
        arpa = None if self.ngram_arpa is None else os.fspath(self.ngram_arpa)
        tokens = self.tokens * k
        stats = {"utterances": self.utts, "hypotheses": self.hyps, "tokens_scored": tokens,
                 **(vocab[0] if k == 1 else {}), "seconds": seconds, "tokens_per_s": tokens / max(seconds, 1e-9)}
        if self.selection is not None:  # (tokens_scored: of every list, as without the option)
            stats["selective"] = {**self.selection.settings(), "hypotheses_scored": self.hyps_scored,
                                  "fraction_scored": self.hyps_scored / max(self.hyps, 1)}
        if k == 1:
            return stats, {"lm": first["lm"], "model": first["model"], "nbest": source, "cache": first["cache"],
                           "scoring": first["scoring"], "ngram_arpa": arpa}
        stats["per_lm"] = {n: {**v, "seconds": t} for n, v, t in zip(names, vocab, self.seconds)}
        lms = [{"name": n, "lm": r["lm"], "model": r["model"], "history": h, "weight": w}
               for n, r, h, w in zip(names, lm_set, self.histories, self.weights.lm_weights_per_model)]
        settings = {"lm": [r["lm"] for r in lm_set], "model": [r["model"] for r in lm_set], "lms": lms,
                    "nbest": source, "cache": first["cache"], "scoring": first["scoring"], "ngram_arpa": arpa}
        return stats, settings
