"""The ``score`` job: NN costs for every hypothesis, the new 1-best, and WER.

The combined score of a hypothesis (natural log, larger = better) is::

    -acoustic_scale * ac_cost + lm_weight * (interp * -ngram_cost + (1 - interp) * -nn_cost)
        + word_ins_penalty * words

(:mod:`nbest_rescore.rescoring.combine`; costs are negated natural logs).
"""
from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from itertools import chain
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import DataError, examples
from ..evaluation.wer import WerReport, check_references, compute_wer, oracle_choice
from ..io.atomic import atomic_dir, atomic_write, check_output_dir
from ..io.kaldi_text import write_kaldi_text
from ..io.score_ark import write_cost_ark
from ..models.cache import cache_settings
from ..rescoring.combine import Weights, flat_scores, segment_argmax
from ..rescoring.history import HISTORY_MODES, NonFiniteCostError, rescore
from ..rescoring.ngram import NgramScorer
from ..rescoring.scorer import DTYPES, OUTPUTS, QUANTIZE, SCORING_MODES, NnScorer, check_inference_options
from ..types import NbestSet, Words
from .checks import check_cache, check_choice, check_float, check_int, check_paths
from .inputs import PLAIN_PATHS, LoadedLM, load_job_nbest, load_lm, load_references, seed_everything, set_threads

Progress = Callable[[int, int], None]

#: What a score run writes into its ``--out`` folder.
SCORE_OUTPUTS = ("text", "nn_cost", "wer.json")


@dataclass(frozen=True)
class ScoreResult:
    """What :func:`score` found.

    Attributes:
        keys: the H hypothesis keys, in set order (utterances, then rank).
        nn_cost: float64 [H] NN costs (negated natural-log probability of the words and
            ``</s>``, given the 1-best history).
        one_best: utterance id -> the new 1-best words, in set order.
        best: int64 [U] flat index (into ``keys``) of each utterance's new 1-best.
        weights: the combination weights used for ``one_best``.
        history: the 1-best history policy.
        wer: with references: ``rescored``, ``first_pass`` and ``oracle`` reports
            (WER in percent); else None.
        stats: counts, timing and the NN LM's vocabulary coverage of the lists.
        settings: model, data and scoring settings (recorded in the outputs).
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

    def nn_costs(self) -> Dict[str, float]:
        """Hypothesis key -> NN cost."""
        return dict(zip(self.keys, self.nn_cost.tolist()))

    def report(self, out_dir=None) -> str:
        """Printable report: counts and speed, cache and approximations in use, the NN
        vocabulary's coverage of the lists and, with references, the WER table."""
        from ..evaluation.report import format_wer_table

        s, sc = self.stats, self.settings["scoring"]
        where = f"wrote {out_dir}/text and {out_dir}/nn_cost" if out_dir else "scored"
        lines = [f"{where} ({s['hypotheses']} hypotheses, {s['seconds']:.1f} s, {s['tokens_per_s']:.0f} tokens/s, "
                 f"history {self.history})"]
        if self.settings["cache"]:
            lines.append("neural cache: size {size}, theta {theta:g}, lambda {lambda:g}".format(**self.settings["cache"]))
        if (sc["output"], sc["quantize"], sc["dtype"]) != ("softmax", "none", "float32"):
            lines.append(f"approximate NN costs: output {sc['output']}, quantize {sc['quantize']}, dtype {sc['dtype']}")
        lines.append(f"N-best words outside the NN vocabulary (scored as <unk>): {s['nn_oov_rate']:.2f}% of tokens, "
                     f"{100 - s['nn_vocab_coverage_of_list_words']:.2f}% of distinct words")
        if self.wer is not None:
            lines.append(format_wer_table(self.wer))
        return "\n".join(lines)

    def summary(self) -> dict:
        """JSON-ready record (``wer.json``): stats, history, weights, settings and WER."""
        out = {**self.stats, "history": self.history, "weights": asdict(self.weights), **self.settings}
        if self.wer is not None:
            out["wer"] = {name: r.to_dict() for name, r in self.wer.items()}
        return out


def _weights(acoustic_scale, lm_weight, interp, word_ins_penalty) -> Weights:
    check_float("acoustic_scale", acoustic_scale)
    check_float("lm_weight", lm_weight)
    check_float("interp", interp, 0.0, 1.0)
    check_float("word_ins_penalty", word_ins_penalty)
    return Weights(float(acoustic_scale), float(lm_weight), float(interp), float(word_ins_penalty))


def first_pass_one_best(nbest: NbestSet, weights: Weights, ngram_cost=None) -> Dict[str, Words]:
    """utterance id -> 1-best by acoustic + n-gram only (``interp = 1``) at ``weights``."""
    flat = nbest.flat(ngram_cost)
    best = segment_argmax(flat_scores(flat, replace(weights, interp=1.0)), flat.offsets)
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


def score(nbest: NbestSet, lm: LoadedLM, *, refs: Optional[Mapping[str, Sequence[str]]] = None,
          lm_weight: float = 9.5, interp: float = 0.5, acoustic_scale: float = 1.0,
          word_ins_penalty: float = -0.629606, history: str = "first-pass", ngram_arpa=None,
          batch_size: int = 256, max_tokens: int = 8192, scoring: str = "tree", output: str = "softmax",
          quantize: str = "none", dtype: str = "float32", progress: Optional[Progress] = None) -> ScoreResult:
    """Rescore ``nbest`` with ``lm`` and pick the new 1-best (nothing is written).

    Args:
        nbest: from :func:`load_nbest`; lm: from :func:`load_lm`.
        refs: utterance id -> reference words (:func:`load_references`); checked before
            scoring.
        lm_weight, interp, acoustic_scale, word_ins_penalty: the weights of the module
            formula (``interp`` = lambda of the n-gram, in [0, 1]; penalty in nats per word).
        history: 1-best history policy (``first-pass``, ``rescored``, ``interpolated``,
            ``none``; :mod:`nbest_rescore.rescoring.history`).
        ngram_arpa: recompute the n-gram costs from this ARPA file (kenlm).
        batch_size, max_tokens: most hypotheses and padded tokens per forward pass.
        scoring, output, quantize, dtype: see :class:`~nbest_rescore.rescoring.scorer.NnScorer`.
        progress: called as ``progress(hypotheses_done, hypotheses_total)``.
    Returns:
        :class:`ScoreResult`.
    Raises:
        DataError: an option out of range, references missing or empty, or non-finite
            NN costs (the model and a few hypothesis keys named).
    """
    weights = _weights(acoustic_scale, lm_weight, interp, word_ins_penalty)
    check_choice("history", history, HISTORY_MODES)
    check_int("batch_size", batch_size)
    check_int("max_tokens", max_tokens)
    check_choice("scoring", scoring, SCORING_MODES)
    check_inference_options(lm.device, output, quantize, dtype)
    if refs is not None:
        check_references(nbest, refs)
    ngram_cost = None
    if ngram_arpa is not None:
        ng = NgramScorer(ngram_arpa)
        ngram_cost = np.concatenate([ng.costs(u.hyps) for u in nbest.utterances])
    scorer = NnScorer(lm.model, lm.vocab, lm.device, batch_size, max_tokens, mode=scoring, output=output,
                      quantize=quantize, dtype=dtype, model_info=lm.info)
    total = nbest.num_hyps()
    t0 = time.perf_counter()
    try:
        res = rescore(nbest, scorer, weights, history, ngram_cost,
                      None if progress is None else (lambda n: progress(n, total)))
    except NonFiniteCostError as exc:
        raise DataError(f"the NN LM {lm.path} ({lm.name}) gave non-finite costs (NaN or inf), e.g. for "
                        f"{examples(exc.keys)}: its weights are probably corrupt (a diverged training); use an "
                        f"earlier checkpoint or retrain") from None
    seconds = time.perf_counter() - t0
    keys = tuple(k for u in nbest.utterances for k in u.keys)
    tokens = int(sum(len(h) + 1 for u in nbest.utterances for h in u.hyps))
    stats = {"utterances": len(nbest), "hypotheses": len(keys), "tokens_scored": tokens,
             **_vocab_stats(nbest, lm.vocab), "seconds": seconds, "tokens_per_s": tokens / max(seconds, 1e-9)}
    settings = {"lm": lm.path, "model": lm.name, "nbest": nbest.source, "cache": cache_settings(lm.model),
                "scoring": scorer.settings(), "ngram_arpa": None if ngram_arpa is None else os.fspath(ngram_arpa)}
    wer = wer_reports(nbest, refs, res.one_best, weights, ngram_cost) if refs is not None else None
    return ScoreResult(keys, res.nn_cost, res.one_best, res.best, weights, history, wer, stats, settings)


def write_score_outputs(result: ScoreResult, out_dir) -> List[str]:
    """Write ``text`` (new 1-best, Kaldi text), ``nn_cost`` (Kaldi text ark of NN
    costs, reusable by :func:`~nbest_rescore.api.tune`) and, with references,
    ``wer.json`` into ``out_dir`` as one set (:func:`~nbest_rescore.io.atomic.atomic_dir`:
    an older run's folder there is replaced as a whole).

    Returns:
        the paths written. Raises DataError when ``out_dir`` cannot be used.
    """
    import json

    with atomic_dir(out_dir, SCORE_OUTPUTS, settings=result.summary()) as tmp:
        write_kaldi_text(tmp / "text", result.one_best.items())
        write_cost_ark(tmp / "nn_cost", zip(result.keys, result.nn_cost.tolist()))
        names = ["text", "nn_cost"]
        if result.wer is not None:
            with atomic_write(tmp / "wer.json") as f:
                json.dump(result.summary(), f, indent=2)
            names.append("wer.json")
    return [os.path.join(out_dir, n) for n in names]


@dataclass(frozen=True)
class ScoreJob:
    """``nbest-rescore score`` as a value: every option is checked on construction,
    before anything is read; :meth:`run` reads the inputs, scores and writes.

    Field names and units as in :func:`load_nbest`, :func:`load_lm` and :func:`score`;
    ``out`` None writes nothing (the caller prints ``one_best``).
    """

    lm: str
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
    ngram_arpa: Optional[str] = None
    history: str = "first-pass"
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

    def __post_init__(self):
        _weights(self.acoustic_scale, self.lm_weight, self.interp, self.word_ins_penalty)
        check_choice("history", self.history, HISTORY_MODES)
        check_int("batch_size", self.batch_size)
        check_int("max_tokens", self.max_tokens)
        check_int("threads", self.threads, allow_none=True)
        check_cache(self)
        check_choice("scoring", self.scoring, SCORING_MODES)
        for name, choices in (("output", OUTPUTS), ("quantize", QUANTIZE), ("dtype", DTYPES)):
            check_choice(name, getattr(self, name), choices)
        check_inference_options(self.device, self.output, self.quantize, self.dtype)
        check_paths(self, ("lm", "nbest", "ref", *PLAIN_PATHS, "ngram_arpa"))
        if self.out is not None:
            check_output_dir(self.out, SCORE_OUTPUTS)

    def run(self, progress: Optional[Progress] = None) -> ScoreResult:
        """Read, score and (with ``out``) write; returns the :class:`ScoreResult`."""
        seed_everything(self.seed)
        threads = set_threads(self.threads)
        nbest = load_job_nbest(self)
        refs = load_references(self.ref) if self.ref else None
        if refs is not None:
            check_references(nbest, refs, self.ref)
        lm = load_lm(self.lm, self.device, cache_size=self.cache_size, cache_theta=self.cache_theta,
                     cache_lambda=self.cache_lambda)
        res = score(nbest, lm, refs=refs, lm_weight=self.lm_weight, interp=self.interp,
                    acoustic_scale=self.acoustic_scale, word_ins_penalty=self.word_ins_penalty, history=self.history,
                    ngram_arpa=self.ngram_arpa, batch_size=self.batch_size, max_tokens=self.max_tokens,
                    scoring=self.scoring, output=self.output, quantize=self.quantize, dtype=self.dtype,
                    progress=progress)
        res = replace(res, settings={**res.settings, "nbest": self.nbest,
                                     "scoring": {**res.settings["scoring"], "threads": threads}})
        if self.out is not None:
            write_score_outputs(res, self.out)
        return res
