"""The ``score`` job: NN costs for every hypothesis, the new 1-best, and WER.

The combined score of a hypothesis (natural log, larger = better) with K neural LMs is::

    -acoustic_scale * ac_cost
        + lm_weight * (w_0 * -ngram_cost + sum_k w_k * -nn_cost_k - graph_cost)
        + word_ins_penalty * words

with ``w_0 = interp`` and ``w_0 + w_1 + .. + w_K = 1`` (one LM: ``w_1 = 1 - interp``;
:mod:`nbest_rescore.rescoring.combine`; costs are negated natural logs).

Several LMs are scored one after the other, each by the one-LM path exactly as if it
were scored alone (its costs are those of a run with that LM only, and for the
``rescored`` / ``interpolated`` histories the 1-best it reads as history is its own,
picked with ``w_0`` and ``1 - w_0`` on that LM); only the final 1-best combines them.
"""
from __future__ import annotations

import logging
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from itertools import chain
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import DataError, examples
from ..evaluation.wer import WerCounts, WerReport, check_references, oracle_choice, wer_counts
from ..io.atomic import atomic_dir, atomic_write, check_output_dir
from ..io.score_outputs import ScoreFilesWriter
from ..io.spans import NbestSource, SetSource
from ..models.cache import cache_settings
from ..models.fused_output import SOFTMAX_IMPLS
from ..rescoring.combine import WEIGHT_SUM_TOL, Weights, flat_scores, segment_argmax
from ..rescoring.history import HISTORY_MODES, NonFiniteCostError, rescore
from ..rescoring.ngram import NgramScorer
from ..rescoring.scorer import DTYPES, OUTPUTS, QUANTIZE, SCORING_MODES, NnScorer, check_inference_options
from ..types import NbestSet, Words
from .checks import check_cache, check_choice, check_float, check_int, check_paths
from .inputs import (PLAIN_PATHS, LoadedLM, lm_names, load_lm, load_references, open_job_nbest,
                     read_weights_file, seed_everything, set_threads)

Progress = Callable[[int, int], None]
log = logging.getLogger(__name__)

#: Hypotheses per span of whole documents that :class:`ScoreJob` reads, scores and
#: writes at a time (a larger document is a span of its own): about 20 MB of lists.
SPAN_HYPS = 10_000

#: What a score run writes into its ``--out`` folder (with several LMs ``nn_cost`` is
#: replaced by :func:`cost_files`: ``nn_cost.<name>`` per LM).
SCORE_OUTPUTS = ("text", "nn_cost", "wer.json")


def cost_files(names: Sequence[str]) -> Tuple[str, ...]:
    """The NN cost files of a run with the LMs ``names``: ``("nn_cost",)`` for one LM,
    else ``nn_cost.<name>`` per LM, in order."""
    return ("nn_cost",) if len(names) <= 1 else tuple(f"nn_cost.{n}" for n in names)


@dataclass(frozen=True)
class ScoreResult:
    """What :func:`score` found.

    Attributes:
        keys: the H hypothesis keys, in set order (utterances, then rank).
        nn_cost: float64 [H] NN costs (negated natural-log probability of the words and
            ``</s>``, given the 1-best history). With K > 1 LMs: their weighted mean
            ``sum_k w_k * nn_cost_k / sum_k w_k`` (plain mean when every w_k is 0), the
            cost one LM of weight ``1 - interp`` would need for the same scores.
        one_best: utterance id -> the new 1-best words, in set order.
        best: int64 [U] flat index (into ``keys``) of each utterance's new 1-best.
        weights: the combination weights used for ``one_best``.
        history: the 1-best history policy (with several LMs of different policies:
            theirs, comma-separated in LM order).
        wer: with references: ``rescored``, ``first_pass`` and ``oracle`` reports
            (WER in percent); else None.
        stats: counts, timing and the NN LM's vocabulary coverage of the lists.
        settings: model, data and scoring settings (recorded in the outputs).
        names: the LM names (:func:`~nbest_rescore.api.inputs.lm_names`), in order.
        nn_costs_by_lm: LM name -> float64 [H] its NN costs (each as if scored alone).

    ``keys``, ``nn_cost`` and ``nn_costs_by_lm`` are empty in the result of
    :meth:`ScoreJob.run`, which streams the costs to its ``out`` files instead of
    keeping them.
    """

    keys: Tuple[str, ...]
    nn_cost: np.ndarray = field(repr=False)
    one_best: Mapping[str, Words] = field(repr=False)
    best: np.ndarray = field(repr=False)
    weights: Weights
    history: str
    wer: Optional[Dict[str, WerReport]]
    stats: dict
    settings: dict
    names: Tuple[str, ...] = ()
    nn_costs_by_lm: Mapping[str, np.ndarray] = field(default_factory=dict, repr=False)

    def nn_costs(self) -> Dict[str, float]:
        """Hypothesis key -> NN cost (``nn_cost``)."""
        return dict(zip(self.keys, self.nn_cost.tolist()))

    def report(self, out_dir=None) -> str:
        """Printable report: counts and speed, cache and approximations in use, the NN
        vocabulary's coverage of the lists and, with references, the WER table."""
        from ..evaluation.report import format_wer_table

        s, sc = self.stats, self.settings["scoring"]
        costs = ", ".join(f"{out_dir}/{n}" for n in cost_files(self.names))
        where = f"wrote {out_dir}/text and {costs}" if out_dir else "scored"
        lines = [f"{where} ({s['hypotheses']} hypotheses, {s['seconds']:.1f} s, {s['tokens_per_s']:.0f} tokens/s, "
                 f"history {self.history})"]
        if self.settings["cache"]:
            lines.append("neural cache: size {size}, theta {theta:g}, lambda {lambda:g}".format(**self.settings["cache"]))
        if (sc["output"], sc["quantize"], sc["dtype"]) != ("softmax", "none", "float32"):
            lines.append(f"approximate NN costs: output {sc['output']}, quantize {sc['quantize']}, dtype {sc['dtype']}")
        for name, lm in s.get("per_lm", {"": s}).items():
            lines.append(f"{name + ': ' if name else ''}N-best words outside the NN vocabulary (scored as <unk>): "
                         f"{lm['nn_oov_rate']:.2f}% of tokens, "
                         f"{100 - lm['nn_vocab_coverage_of_list_words']:.2f}% of distinct words")
        if len(self.names) > 1:
            lines.append(f"weights: n-gram {self.weights.interp:g}, " + ", ".join(
                f"{n} {w:g}" for n, w in zip(self.names, self.weights.lm_weights_per_model)))
        if self.wer is not None:
            lines.append(format_wer_table(self.wer))
        return "\n".join(lines)

    def summary(self) -> dict:
        """JSON-ready record (``wer.json``): stats, history, weights, settings and WER
        (with several LMs ``settings["lms"]`` lists each one's name, checkpoint,
        model, history and weight)."""
        weights = {k: v for k, v in asdict(self.weights).items() if k != "nn_weights" or v is not None}
        out = {**self.stats, "history": self.history, "weights": weights, **self.settings}
        if self.wer is not None:
            out["wer"] = {name: r.to_dict() for name, r in self.wer.items()}
        return out


def _example_split(interp: float, k: int) -> str:
    """``1 - interp`` split in ``k`` weights of 4 decimals that sum to it."""
    each = [round((1.0 - interp) / k, 4)] * (k - 1)
    return ",".join(f"{w:g}" for w in each + [round(1.0 - interp - sum(each), 4)])


def parse_nn_weights(spec) -> Optional[Tuple[float, ...]]:
    """``"0.3,0.2"`` (or a sequence of numbers) -> ``(0.3, 0.2)``; None stays None.
    Raises DataError for an empty list or an item that is not a number."""
    if spec is None:
        return None
    items = [x.strip() for x in spec.split(",")] if isinstance(spec, str) else list(spec)
    try:
        values = tuple(float(x) for x in items)
    except (TypeError, ValueError):
        values = ()
    if not values:
        raise DataError(f"--nn-weights {spec!r}: expected the weights of the --lm models, comma-separated in "
                        f"--lm order, e.g. --nn-weights 0.3,0.2")
    return values


def score_weights(acoustic_scale, lm_weight, interp, word_ins_penalty, nn_weights=None, n_lms: int = 1) -> Weights:
    """The combination weights of a run with ``n_lms`` LMs: ``nn_weights`` = ``w_1 ..
    w_K`` (a sequence or ``"0.3,0.2"``) or None for ``1 - interp`` split equally. One
    LM gives ``nn_weights=None`` (the two-model case).

    Raises:
        DataError: a weight not finite or out of range, not one NN weight per LM, or
            ``interp + sum(nn_weights) != 1`` (the options named, with a valid example).
    """
    check_float("acoustic_scale", acoustic_scale)
    check_float("lm_weight", lm_weight)
    check_float("interp", interp, 0.0, 1.0)
    check_float("word_ins_penalty", word_ins_penalty)
    head = (float(acoustic_scale), float(lm_weight), float(interp), float(word_ins_penalty))
    nn = parse_nn_weights(nn_weights)
    if nn is None:
        return Weights(*head, nn_weights=None if n_lms == 1 else ((1.0 - interp) / n_lms,) * n_lms)
    shown = ",".join(f"{w:g}" for w in nn)
    if len(nn) != n_lms:
        raise DataError(f"--nn-weights {shown}: {len(nn)} weights for {n_lms} --lm checkpoints; give one weight "
                        f"per --lm, in the same order (e.g. --nn-weights {_example_split(interp, n_lms)})")
    for w in nn:
        check_float("nn_weights", w, 0.0, 1.0)
    total = interp + sum(nn)
    if abs(total - 1.0) > WEIGHT_SUM_TOL:
        raise DataError(f"--interp {interp:g} (the n-gram weight) and --nn-weights {shown} must sum to 1, they sum "
                        f"to {total:g}; e.g. --nn-weights {_example_split(interp, n_lms)}, or leave --nn-weights "
                        f"out to split 1 - interp equally")
    return Weights(*head, nn_weights=None if n_lms == 1 else nn)


def lm_histories(history: Union[str, Sequence[str]], n_lms: int) -> Tuple[str, ...]:
    """One history policy per LM: ``history`` given once applies to all, else one per
    LM in order. Raises DataError for another count or an unknown policy."""
    hs = (history,) if isinstance(history, str) else tuple(history)
    if len(hs) == 1:
        hs = hs * n_lms
    if len(hs) != n_lms:
        raise DataError(f"--history is given {len(hs)} times for {n_lms} --lm checkpoints; give it once (for "
                        f"every LM) or once per --lm, in the same order")
    for h in hs:
        check_choice("history", h, HISTORY_MODES)
    return hs


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


def _vocab_stats(counts: Counter, vocab) -> dict:
    """The NN vocabulary's coverage of the list words ``counts`` (word -> tokens)."""
    tokens = sum(counts.values())
    oov = sum(c for w, c in counts.items() if w not in vocab)
    return {"nn_oov_rate": 100.0 * oov / max(1, tokens),
            "nn_vocab_coverage_of_list_words": 100.0 * sum(1 for w in counts if w in vocab) / max(1, len(counts))}


def _scorer(lm: LoadedLM, opts: dict) -> NnScorer:
    return NnScorer(lm.model, lm.vocab, lm.device, opts["batch_size"], opts["max_tokens"], mode=opts["scoring"],
                    output=opts["output"], quantize=opts["quantize"], dtype=opts["dtype"], model_info=lm.info,
                    softmax_impl=opts["softmax_impl"])


def _rescore_lm(nbest: NbestSet, scorer: NnScorer, lm: LoadedLM, weights: Weights, history: str, ngram_cost,
                progress: Optional[Callable[[int], None]]):
    """The one-LM path over the lists ``nbest``: ``lm``'s costs and 1-best at the
    two-model ``weights``. Raises DataError for non-finite costs (model and keys named)."""
    try:
        return rescore(nbest, scorer, weights, history, ngram_cost, progress)
    except NonFiniteCostError as exc:
        raise DataError(f"the NN LM {lm.path} ({lm.name}) gave non-finite costs (NaN or inf), e.g. for "
                        f"{examples(exc.keys)}: its weights are probably corrupt (a diverged training); use an "
                        f"earlier checkpoint or retrain") from None


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
    :class:`ScoreResult` (per-hypothesis fields empty: the caller keeps those)."""

    def __init__(self, lms: Sequence[LoadedLM], weights: Weights, histories: Tuple[str, ...], refs, ngram_arpa,
                 opts: dict, progress: Optional[Progress], total_hyps: int):
        self.lms, self.weights, self.histories, self.refs = list(lms), weights, histories, refs
        self.ngram_arpa = ngram_arpa
        self.ngram = None if ngram_arpa is None else NgramScorer(ngram_arpa)
        self.scorers = [_scorer(lm, opts) for lm in self.lms]
        self.progress, self.total = progress, total_hyps
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
            runs.append(_rescore_lm(nbest, scorer, lm, alone, history, ngram_cost, report))
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
        vocab = [_vocab_stats(self.words, lm.vocab) for lm in self.lms]
        lm_set = [{"lm": lm.path, "model": lm.name, "cache": cache_settings(lm.model), "scoring": sc.settings()}
                  for lm, sc in zip(self.lms, self.scorers)]
        seconds = sum(self.seconds)
        first = lm_set[0]
        arpa = None if self.ngram_arpa is None else os.fspath(self.ngram_arpa)
        if len(self.lms) == 1:
            stats = {"utterances": self.utts, "hypotheses": self.hyps, "tokens_scored": self.tokens, **vocab[0],
                     "seconds": seconds, "tokens_per_s": self.tokens / max(seconds, 1e-9)}
            settings = {"lm": first["lm"], "model": first["model"], "nbest": source, "cache": first["cache"],
                        "scoring": first["scoring"], "ngram_arpa": arpa}
            return stats, settings
        tokens = self.tokens * len(self.lms)
        stats = {"utterances": self.utts, "hypotheses": self.hyps, "tokens_scored": tokens, "seconds": seconds,
                 "tokens_per_s": tokens / max(seconds, 1e-9),
                 "per_lm": {n: {**v, "seconds": t} for n, v, t in zip(names, vocab, self.seconds)}}
        lms = [{"name": n, "lm": r["lm"], "model": r["model"], "history": h, "weight": w}
               for n, r, h, w in zip(names, lm_set, self.histories, self.weights.lm_weights_per_model)]
        settings = {"lm": [r["lm"] for r in lm_set], "model": [r["model"] for r in lm_set], "lms": lms,
                    "nbest": source, "cache": first["cache"], "scoring": first["scoring"], "ngram_arpa": arpa}
        return stats, settings


def _start(source: NbestSource, lm, *, refs, lm_weight, interp, acoustic_scale, word_ins_penalty, history,
           nn_weights, ngram_arpa, batch_size, max_tokens, scoring, output, quantize, dtype, softmax_impl,
           progress) -> _SpanRun:
    """The checks of :func:`score` (options, then references), then a run ready for
    the spans of ``source``."""
    lms = [lm] if isinstance(lm, LoadedLM) else list(lm)
    if not lms:
        raise DataError("score: no NN LM given; give at least one (load_lm / --lm)")
    weights = score_weights(acoustic_scale, lm_weight, interp, word_ins_penalty, nn_weights, len(lms))
    histories = lm_histories(history, len(lms))
    check_int("batch_size", batch_size)
    check_int("max_tokens", max_tokens)
    check_choice("scoring", scoring, SCORING_MODES)
    check_choice("softmax_impl", softmax_impl, SOFTMAX_IMPLS)
    for one in lms:
        check_inference_options(one.device, output, quantize, dtype)
    index = source.index
    if refs is not None:
        check_references(index, refs)
    opts = {"batch_size": batch_size, "max_tokens": max_tokens, "scoring": scoring, "output": output,
            "quantize": quantize, "dtype": dtype, "softmax_impl": softmax_impl}
    run = _SpanRun(lms, weights, histories, refs, ngram_arpa, opts, progress, index.num_hyps())
    docs = len(index.doc_bounds()) - 1
    for one, h in zip(lms, histories):
        log.info("%s: history conditioning %s (%d documents, %d utterances, grouping from %s)%s", one.path, h,
                 docs, len(index), index.doc_source,
                 "; backward LM: documents read from their last utterance to their first, hypotheses reversed"
                 if getattr(one.model, "direction", "forward") == "backward" else "")
    return run


def score(nbest: NbestSet, lm: Union[LoadedLM, Sequence[LoadedLM]], *,
          refs: Optional[Mapping[str, Sequence[str]]] = None, lm_weight: float = 9.5, interp: float = 0.5,
          acoustic_scale: float = 1.0, word_ins_penalty: float = -0.629606,
          history: Union[str, Sequence[str]] = "first-pass", nn_weights: Optional[Sequence[float]] = None,
          ngram_arpa=None, batch_size: int = 256, max_tokens: int = 8192, scoring: str = "tree",
          output: str = "softmax", quantize: str = "none", dtype: str = "float32", softmax_impl: str = "fused",
          progress: Optional[Progress] = None, span_hyps: Optional[int] = None) -> ScoreResult:
    """Rescore ``nbest`` with one or several NN LMs and pick the new 1-best (nothing
    is written).

    Args:
        nbest: from :func:`load_nbest`.
        lm: from :func:`load_lm`: one LM, or a sequence of K LMs (named by
            :func:`~nbest_rescore.api.inputs.lm_names` from their checkpoint paths).
            Each LM is scored in its own pass, exactly as if scored alone.
        refs: utterance id -> reference words (:func:`load_references`); checked before
            scoring.
        lm_weight, interp, acoustic_scale, word_ins_penalty: the weights of the module
            formula (``interp`` = w_0 of the n-gram, in [0, 1]; penalty in nats per word).
        history: 1-best history policy (``first-pass``, ``rescored``, ``interpolated``,
            ``none``; :mod:`nbest_rescore.rescoring.history`): one for every LM, or one
            per LM in order. With several LMs, an LM's ``rescored``/``interpolated``
            history is its own 1-best (at ``interp`` and ``1 - interp`` on that LM).
        nn_weights: ``w_1 .. w_K`` of the LMs, in order, each in [0, 1], summing to
            ``1 - interp``; None splits ``1 - interp`` equally.
        ngram_arpa: recompute the n-gram costs from this ARPA file (kenlm).
        batch_size, max_tokens: most hypotheses and padded tokens per forward pass.
        scoring, output, quantize, dtype, softmax_impl: see
            :class:`~nbest_rescore.rescoring.scorer.NnScorer` (``softmax_impl``: how the
            exact full softmax is computed, ``fused`` or ``plain``; the same costs).
        progress: called as ``progress(hypotheses_done, hypotheses_total)`` (over all
            the LMs' passes).
        span_hyps: score the set one span of whole documents at a time, each of at
            most this many hypotheses unless one document has more
            (:func:`~nbest_rescore.io.spans.plan_spans`; what ``ScoreJob`` does with
            :data:`SPAN_HYPS`); None (default): the whole set at once. The results do
            not depend on it: on the CPU the NN costs are the same to the last bit
            whatever other hypotheses share a batch (:mod:`nbest_rescore.models.rows`).
    Returns:
        :class:`ScoreResult` (``nn_costs_by_lm``: each LM's float64 [H] costs).
    Raises:
        DataError: no LM, an option out of range, weights that do not sum to 1, not one
            history or NN weight per LM, references missing or empty, or non-finite NN
            costs (the model and a few hypothesis keys named).
    """
    source = SetSource(nbest)
    run = _start(source, lm, refs=refs, lm_weight=lm_weight, interp=interp, acoustic_scale=acoustic_scale,
                 word_ins_penalty=word_ins_penalty, history=history, nn_weights=nn_weights, ngram_arpa=ngram_arpa,
                 batch_size=batch_size, max_tokens=max_tokens, scoring=scoring, output=output, quantize=quantize,
                 dtype=dtype, softmax_impl=softmax_impl, progress=progress)
    parts = [run.span(span) for span in source.spans(span_hyps)]
    res = run.result(nbest.source)

    def cat(arrays):
        return np.concatenate(arrays) if arrays else np.zeros(0)

    by_lm = {n: cat([p.costs_by_lm[i] for p in parts]) for i, n in enumerate(res.names)}
    return replace(res, keys=tuple(k for p in parts for k in p.keys), nn_cost=cat([p.nn_cost for p in parts]),
                   nn_costs_by_lm=by_lm)


def write_score_outputs(result: ScoreResult, out_dir) -> List[str]:
    """Write ``text`` (new 1-best, Kaldi text), the NN costs (Kaldi text arks, reusable
    by :func:`~nbest_rescore.api.tune`: ``nn_cost`` for one LM, ``nn_cost.<name>`` per
    LM for several) and, with references, ``wer.json`` into ``out_dir`` as one set
    (:func:`~nbest_rescore.io.atomic.atomic_dir`: an older run's folder there is
    replaced as a whole; its run marker records the names, checkpoints, histories and
    weights).

    Returns:
        the paths written. Raises DataError when ``out_dir`` cannot be used.
    """
    files = cost_files(result.names)
    by_lm = [result.nn_costs_by_lm[n] for n in result.names] if len(files) > 1 else [result.nn_cost]
    with atomic_dir(out_dir, SCORE_OUTPUTS + files, settings=result.summary()) as tmp:
        with ScoreFilesWriter(tmp, files) as writer:
            writer.write(result.one_best.items(), result.keys, by_lm)
        return [os.path.join(out_dir, n) for n in _finish(tmp, result, files)]


def _finish(tmp, result: ScoreResult, files) -> List[str]:
    """Write ``wer.json`` (with references) beside the other outputs; their names."""
    import json

    names = ["text", *files]
    if result.wer is not None:
        with atomic_write(tmp / "wer.json") as f:
            json.dump(result.summary(), f, indent=2)
        names.append("wer.json")
    return names


@dataclass(frozen=True)
class ScoreJob:
    """``nbest-rescore score`` as a value: every option is checked on construction,
    before anything is read (the weights file and the weights included); :meth:`run`
    reads the inputs, scores and writes.

    Field names and units as in :func:`load_nbest`, :func:`load_lm` and :func:`score`;
    ``lm``: one checkpoint or a sequence of them; ``history``: one policy, or one per
    LM; ``nn_weights``: ``w_1 .. w_K`` (sequence or ``"0.3,0.2"``); ``weights_file``: a
    ``tune.json`` whose ``weights`` block (:func:`~nbest_rescore.api.inputs.read_weights_file`,
    NN LMs by name) replaces the weight options; ``out`` None writes nothing (the
    caller prints ``one_best``); ``span_hyps``: the hypothesis budget of a span of
    whole documents (:meth:`run`; None: the whole set as one span).
    """

    lm: Union[str, Sequence[str]]
    nbest: str
    out: Optional[str] = None
    ref: Optional[str] = None
    plain_ac: Optional[str] = None
    plain_ngram: Optional[str] = None
    plain_costs: bool = False
    plain_utt2doc: Optional[str] = None
    plain_utt_ids: Optional[str] = None
    acoustic_scale: float = 1.0
    lm_weight: float = 9.5
    interp: float = 0.5
    word_ins_penalty: float = -0.629606
    nn_weights: Union[None, str, Sequence[float]] = None
    weights_file: Optional[str] = None
    ngram_arpa: Optional[str] = None
    history: Union[str, Sequence[str]] = "first-pass"
    device: str = "cpu"
    batch_size: int = 256
    max_tokens: int = 8192
    scoring: str = "tree"
    output: str = "softmax"
    quantize: str = "none"
    dtype: str = "float32"
    softmax_impl: str = "fused"
    threads: Optional[int] = None
    cache_size: int = 0
    cache_theta: float = 0.3
    cache_lambda: float = 0.1
    seed: int = 0
    span_hyps: Optional[int] = SPAN_HYPS

    @property
    def lm_paths(self) -> Tuple[str, ...]:
        """The checkpoints, in order."""
        return (os.fspath(self.lm),) if isinstance(self.lm, (str, os.PathLike)) else tuple(map(os.fspath, self.lm))

    @property
    def lm_names(self) -> Tuple[str, ...]:
        """The LM names (file names of the checkpoints, made unique)."""
        return lm_names(self.lm_paths)

    def weights(self) -> Weights:
        """The combination weights: from ``weights_file`` (its NN weights put in the
        order of ``lm``) or the weight options. Raises DataError (see
        :func:`score_weights`; a weights file naming other LMs than ``lm``)."""
        n = len(self.lm_paths)
        if self.weights_file is None:
            return score_weights(self.acoustic_scale, self.lm_weight, self.interp, self.word_ins_penalty,
                                 self.nn_weights, n)
        w, names = read_weights_file(self.weights_file)
        mine = self.lm_names
        if sorted(names) != sorted(mine):
            raise DataError(f"--weights {self.weights_file} has weights for the NN LMs {', '.join(names)}, but the "
                            f"--lm checkpoints are named {', '.join(mine)} (from their file names); give the "
                            f"checkpoints that file was tuned with, under the same file names")
        by_name = dict(zip(names, w.lm_weights_per_model))
        return score_weights(w.acoustic_scale, w.lm_weight, w.interp, w.word_ins_penalty,
                             tuple(by_name[m] for m in mine), n)

    def __post_init__(self):
        if not self.lm_paths:
            raise DataError("--lm: no checkpoint given; give at least one --lm M.pt")
        check_paths(self, ("weights_file",))
        self.weights()
        lm_histories(self.history, len(self.lm_paths))
        check_int("batch_size", self.batch_size)
        check_int("max_tokens", self.max_tokens)
        check_int("threads", self.threads, allow_none=True)
        check_int("span_hyps", self.span_hyps, allow_none=True)
        check_cache(self)
        check_choice("scoring", self.scoring, SCORING_MODES)
        for name, choices in (("output", OUTPUTS), ("quantize", QUANTIZE), ("dtype", DTYPES),
                              ("softmax_impl", SOFTMAX_IMPLS)):
            check_choice(name, getattr(self, name), choices)
        check_inference_options(self.device, self.output, self.quantize, self.dtype)
        for path in self.lm_paths:
            if not os.path.exists(path):
                raise DataError(f"--lm {path}: no such file or folder")
        check_paths(self, ("nbest", "ref", *PLAIN_PATHS, "ngram_arpa"))
        if self.out is not None:
            check_output_dir(self.out, SCORE_OUTPUTS + cost_files(self.lm_names))

    def run(self, progress: Optional[Progress] = None) -> ScoreResult:
        """Read, score and (with ``out``) write, one span of whole documents at a time
        (at most ``span_hyps`` hypotheses unless one document has more; see
        :func:`~nbest_rescore.io.spans.plan_spans`): the lists are checked in one cheap
        pass first (:func:`~nbest_rescore.api.inputs.open_nbest`), then read, scored
        and written span by span into the hidden folder that becomes ``out`` at the
        end (:func:`~nbest_rescore.io.atomic.atomic_dir`), so memory follows the
        largest span, not the set.

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
        lms = [load_lm(p, self.device, cache_size=self.cache_size, cache_theta=self.cache_theta,
                       cache_lambda=self.cache_lambda) for p in self.lm_paths]
        run = _start(source, lms, refs=refs, lm_weight=weights.lm_weight, interp=weights.interp,
                     acoustic_scale=weights.acoustic_scale, word_ins_penalty=weights.word_ins_penalty,
                     nn_weights=weights.nn_weights, history=self.history, ngram_arpa=self.ngram_arpa,
                     batch_size=self.batch_size, max_tokens=self.max_tokens, scoring=self.scoring, output=self.output,
                     quantize=self.quantize, dtype=self.dtype, softmax_impl=self.softmax_impl, progress=progress)
        extra = {} if self.weights_file is None else {"weights_file": self.weights_file}

        def result() -> ScoreResult:
            res = run.result(self.nbest)
            return replace(res, settings={**res.settings, "nbest": self.nbest,
                                          "scoring": {**res.settings["scoring"], "threads": threads}, **extra})

        if self.out is None:
            for span in source.spans(self.span_hyps):
                run.span(span)
            return result()
        files = cost_files(self.lm_names)
        marker: dict = {}  # the run marker's settings, filled in before the folder is committed
        with atomic_dir(self.out, SCORE_OUTPUTS + files, settings=marker) as tmp:
            with ScoreFilesWriter(tmp, files) as writer:
                for span in source.spans(self.span_hyps):
                    part = run.span(span)
                    writer.write(part.one_best.items(), part.keys,
                                 part.costs_by_lm if len(files) > 1 else (part.nn_cost,))
            res = result()
            _finish(tmp, res, files)
            marker.update(res.summary())
        return res
