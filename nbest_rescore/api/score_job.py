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

import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from itertools import chain
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import DataError, examples
from ..evaluation.wer import WerReport, check_references, compute_wer, oracle_choice
from ..io.atomic import atomic_dir, atomic_write, check_output_dir
from ..io.kaldi_text import write_kaldi_text
from ..io.score_ark import write_cost_ark
from ..models.cache import cache_settings
from ..rescoring.combine import WEIGHT_SUM_TOL, Weights, flat_scores, segment_argmax
from ..rescoring.history import HISTORY_MODES, NonFiniteCostError, rescore
from ..rescoring.ngram import NgramScorer
from ..rescoring.scorer import DTYPES, OUTPUTS, QUANTIZE, SCORING_MODES, NnScorer, check_inference_options
from ..types import NbestSet, Words
from .checks import check_cache, check_choice, check_float, check_int, check_paths
from .inputs import (PLAIN_PATHS, LoadedLM, lm_names, load_job_nbest, load_lm, load_references,
                     read_weights_file, seed_everything, set_threads)

Progress = Callable[[int, int], None]

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


def wer_reports(nbest: NbestSet, refs, one_best, weights: Weights, ngram_cost=None) -> Dict[str, WerReport]:
    """WER (percent) of ``one_best``, of the first pass and of the oracle."""
    return {"rescored": compute_wer(refs, one_best),
            "first_pass": compute_wer(refs, first_pass_one_best(nbest, weights, ngram_cost)),
            "oracle": compute_wer(refs, oracle_choice(nbest, refs))}


def _vocab_stats(nbest: NbestSet, vocab) -> dict:
    counts = Counter(chain.from_iterable(h for u in nbest.utterances for h in u.hyps))
    tokens = sum(counts.values())
    oov = sum(c for w, c in counts.items() if w not in vocab)
    return {"nn_oov_rate": 100.0 * oov / max(1, tokens),
            "nn_vocab_coverage_of_list_words": 100.0 * sum(1 for w in counts if w in vocab) / max(1, len(counts))}


@dataclass(frozen=True)
class _LmRun:
    """One LM's pass over the lists: its rescoring result, seconds and records."""

    res: object  # RescoreResult
    seconds: float
    vocab_stats: dict
    settings: dict


def _score_one(nbest: NbestSet, lm: LoadedLM, weights: Weights, history: str, ngram_cost, opts: dict,
               progress: Optional[Callable[[int], None]]) -> _LmRun:
    """The one-LM path: ``lm``'s costs and 1-best over ``nbest`` at the two-model
    ``weights``. Raises DataError for non-finite costs (model and keys named)."""
    scorer = NnScorer(lm.model, lm.vocab, lm.device, opts["batch_size"], opts["max_tokens"], mode=opts["scoring"],
                      output=opts["output"], quantize=opts["quantize"], dtype=opts["dtype"], model_info=lm.info)
    t0 = time.perf_counter()
    try:
        res = rescore(nbest, scorer, weights, history, ngram_cost, progress)
    except NonFiniteCostError as exc:
        raise DataError(f"the NN LM {lm.path} ({lm.name}) gave non-finite costs (NaN or inf), e.g. for "
                        f"{examples(exc.keys)}: its weights are probably corrupt (a diverged training); use an "
                        f"earlier checkpoint or retrain") from None
    return _LmRun(res, time.perf_counter() - t0, _vocab_stats(nbest, lm.vocab),
                  {"lm": lm.path, "model": lm.name, "cache": cache_settings(lm.model), "scoring": scorer.settings()})


def _records(nbest: NbestSet, runs: Sequence[_LmRun], names, histories, weights: Weights, ngram_arpa):
    """``(stats, settings)`` of a run: as ever for one LM; with several, the lists'
    counts, the total time and, per LM, its records (``per_lm``, ``lms``)."""
    tokens = int(sum(len(h) + 1 for u in nbest.utterances for h in u.hyps))
    seconds = sum(r.seconds for r in runs)
    first = runs[0]
    arpa = None if ngram_arpa is None else os.fspath(ngram_arpa)
    if len(runs) == 1:
        stats = {"utterances": len(nbest), "hypotheses": nbest.num_hyps(), "tokens_scored": tokens,
                 **first.vocab_stats, "seconds": seconds, "tokens_per_s": tokens / max(seconds, 1e-9)}
        settings = {"lm": first.settings["lm"], "model": first.settings["model"], "nbest": nbest.source,
                    "cache": first.settings["cache"], "scoring": first.settings["scoring"], "ngram_arpa": arpa}
        return stats, settings
    tokens *= len(runs)
    stats = {"utterances": len(nbest), "hypotheses": nbest.num_hyps(), "tokens_scored": tokens, "seconds": seconds,
             "tokens_per_s": tokens / max(seconds, 1e-9),
             "per_lm": {n: {**r.vocab_stats, "seconds": r.seconds} for n, r in zip(names, runs)}}
    lms = [{"name": n, "lm": r.settings["lm"], "model": r.settings["model"], "history": h, "weight": w}
           for n, r, h, w in zip(names, runs, histories, weights.lm_weights_per_model)]
    settings = {"lm": [r.settings["lm"] for r in runs], "model": [r.settings["model"] for r in runs], "lms": lms,
                "nbest": nbest.source, "cache": first.settings["cache"], "scoring": first.settings["scoring"],
                "ngram_arpa": arpa}
    return stats, settings


def score(nbest: NbestSet, lm: Union[LoadedLM, Sequence[LoadedLM]], *,
          refs: Optional[Mapping[str, Sequence[str]]] = None, lm_weight: float = 9.5, interp: float = 0.5,
          acoustic_scale: float = 1.0, word_ins_penalty: float = -0.629606,
          history: Union[str, Sequence[str]] = "first-pass", nn_weights: Optional[Sequence[float]] = None,
          ngram_arpa=None, batch_size: int = 256, max_tokens: int = 8192, scoring: str = "tree",
          output: str = "softmax", quantize: str = "none", dtype: str = "float32",
          progress: Optional[Progress] = None) -> ScoreResult:
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
        scoring, output, quantize, dtype: see :class:`~nbest_rescore.rescoring.scorer.NnScorer`.
        progress: called as ``progress(hypotheses_done, hypotheses_total)`` (over all
            the LMs' passes).
    Returns:
        :class:`ScoreResult` (``nn_costs_by_lm``: each LM's float64 [H] costs).
    Raises:
        DataError: no LM, an option out of range, weights that do not sum to 1, not one
            history or NN weight per LM, references missing or empty, or non-finite NN
            costs (the model and a few hypothesis keys named).
    """
    lms = [lm] if isinstance(lm, LoadedLM) else list(lm)
    if not lms:
        raise DataError("score: no NN LM given; give at least one (load_lm / --lm)")
    weights = score_weights(acoustic_scale, lm_weight, interp, word_ins_penalty, nn_weights, len(lms))
    histories = lm_histories(history, len(lms))
    check_int("batch_size", batch_size)
    check_int("max_tokens", max_tokens)
    check_choice("scoring", scoring, SCORING_MODES)
    for one in lms:
        check_inference_options(one.device, output, quantize, dtype)
    if refs is not None:
        check_references(nbest, refs)
    ngram_cost = None
    if ngram_arpa is not None:
        ng = NgramScorer(ngram_arpa)
        ngram_cost = np.concatenate([ng.costs(u.hyps) for u in nbest.utterances])
    opts = {"batch_size": batch_size, "max_tokens": max_tokens, "scoring": scoring, "output": output,
            "quantize": quantize, "dtype": dtype}
    alone = replace(weights, nn_weights=None)  # each LM's pass: the two-model weights
    total, k = nbest.num_hyps(), len(lms)
    runs = [_score_one(nbest, one, alone, h, ngram_cost, opts,
                       None if progress is None else (lambda n, i=i: progress(i * total + n, k * total)))
            for i, (one, h) in enumerate(zip(lms, histories))]
    names = lm_names([one.path for one in lms])
    costs = [r.res.nn_cost for r in runs]
    if k == 1:
        nn_cost, best, one_best = costs[0], runs[0].res.best, runs[0].res.one_best
    else:
        flat = nbest.flat(ngram_cost)
        best = segment_argmax(flat_scores(flat, weights, costs), flat.offsets)
        one_best = {u.utt_id: flat.hyps[best[i]] for i, u in enumerate(nbest.utterances)}
        ws = np.asarray(weights.nn_weights)
        nn_cost = (ws / ws.sum() if ws.sum() > 0 else np.full(k, 1.0 / k)) @ np.stack(costs)
    keys = tuple(key for u in nbest.utterances for key in u.keys)
    stats, settings = _records(nbest, runs, names, histories, weights, ngram_arpa)
    wer = wer_reports(nbest, refs, one_best, weights, ngram_cost) if refs is not None else None
    history_name = histories[0] if len(set(histories)) == 1 else ",".join(histories)
    return ScoreResult(keys, nn_cost, one_best, best, weights, history_name, wer, stats, settings, names,
                       dict(zip(names, costs)))


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
    import json

    files = cost_files(result.names)
    by_lm = [result.nn_costs_by_lm[n] for n in result.names] if len(files) > 1 else [result.nn_cost]
    with atomic_dir(out_dir, SCORE_OUTPUTS + files, settings=result.summary()) as tmp:
        write_kaldi_text(tmp / "text", result.one_best.items())
        for name, costs in zip(files, by_lm):
            write_cost_ark(tmp / name, zip(result.keys, costs.tolist()))
        names = ["text", *files]
        if result.wer is not None:
            with atomic_write(tmp / "wer.json") as f:
                json.dump(result.summary(), f, indent=2)
            names.append("wer.json")
    return [os.path.join(out_dir, n) for n in names]


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
    caller prints ``one_best``).
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
    threads: Optional[int] = None
    cache_size: int = 0
    cache_theta: float = 0.3
    cache_lambda: float = 0.1
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
        check_cache(self)
        check_choice("scoring", self.scoring, SCORING_MODES)
        for name, choices in (("output", OUTPUTS), ("quantize", QUANTIZE), ("dtype", DTYPES)):
            check_choice(name, getattr(self, name), choices)
        check_inference_options(self.device, self.output, self.quantize, self.dtype)
        for path in self.lm_paths:
            if not os.path.exists(path):
                raise DataError(f"--lm {path}: no such file or folder")
        check_paths(self, ("nbest", "ref", *PLAIN_PATHS, "ngram_arpa"))
        if self.out is not None:
            check_output_dir(self.out, SCORE_OUTPUTS + cost_files(self.lm_names))

    def run(self, progress: Optional[Progress] = None) -> ScoreResult:
        """Read, score and (with ``out``) write; returns the :class:`ScoreResult`."""
        weights = self.weights()
        seed_everything(self.seed)
        threads = set_threads(self.threads)
        nbest = load_job_nbest(self)
        refs = load_references(self.ref) if self.ref else None
        if refs is not None:
            check_references(nbest, refs, self.ref)
        lms = [load_lm(p, self.device, cache_size=self.cache_size, cache_theta=self.cache_theta,
                       cache_lambda=self.cache_lambda) for p in self.lm_paths]
        res = score(nbest, lms, refs=refs, lm_weight=weights.lm_weight, interp=weights.interp,
                    acoustic_scale=weights.acoustic_scale, word_ins_penalty=weights.word_ins_penalty,
                    nn_weights=weights.nn_weights, history=self.history, ngram_arpa=self.ngram_arpa,
                    batch_size=self.batch_size, max_tokens=self.max_tokens, scoring=self.scoring, output=self.output,
                    quantize=self.quantize, dtype=self.dtype, progress=progress)
        extra = {} if self.weights_file is None else {"weights_file": self.weights_file}
        res = replace(res, settings={**res.settings, "nbest": self.nbest,
                                     "scoring": {**res.settings["scoring"], "threads": threads}, **extra})
        if self.out is not None:
            write_score_outputs(res, self.out)
        return res
