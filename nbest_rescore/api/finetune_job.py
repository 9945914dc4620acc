"""The ``finetune`` job: MWER fine-tuning of a word-level checkpoint on N-best lists
(:mod:`nbest_rescore.training.mwer`), honest by folds of documents.

Without folds, one model is fine-tuned on all the lists and written as a normal
checkpoint. With ``--folds K`` (documents dealt as ``tune --folds``), fold k's lists
are scored (first-pass history, as ``score``) by a model fine-tuned on the other folds
only, and the held-out WER at the given weights is compared with the checkpoint's WER
at the same weights: pooled WER of each, the paired bootstrap's P(fine-tuned better)
and the 95% interval of each. Both cost files are written for ``tune --folds``.

A grid of posterior scales (``--posterior-scale a,b,c``) fine-tunes every value on
every fold; fold k then takes the value whose models (trained on fold k among others)
give the fewest errors on the other folds' held-out lists, so fold k's own held-out
errors never choose its value. Every value's pooled held-out WER is reported beside
the chosen ones'.
"""
from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass
from typing import Callable, Dict, List, NamedTuple, Sequence, Tuple

import numpy as np
import torch

from ..errors import DataError
from ..evaluation.bootstrap import bootstrap_wer, improvement_probability
from ..evaluation.folds import document_folds
from ..evaluation.wer import check_references, nbest_errors
from ..io.atomic import atomic_dir
from ..io.output_checks import check_output_dir, check_outside_inputs
from ..io.lm_text import read_lm_text
from ..io.score_ark import write_cost_ark
from ..models import save_model
from ..models.base import LanguageModel, State, select_state
from ..options import FinetuneOptions
from ..rescoring.combine import Weights, flat_scores, segment_argmax
from ..rescoring.forest_grad import forest_costs
from ..rescoring.history import first_pass_states as history_states, rescore
from ..rescoring.scorer import NnScorer
from ..training.mwer import MwerLists, MwerOptions, finetune_mwer, hypothesis_costs
from ..types import NbestSet
from ..validation import check_paths
from ..vocab import Vocabulary
from .inputs import job_inputs, load_job_nbest, load_nbest, load_references
from .lm_loading import load_lm, seed_everything, set_threads
from .score_job import job_weights

log = logging.getLogger(__name__)
FINETUNE_OUTPUTS = ("finetune.json", "finetuned.pt", "mwer", "base")


def mwer_lists(nbest: NbestSet, refs, vocab: Vocabulary, weights: Weights) -> MwerLists:
    """The lists as :func:`~nbest_rescore.training.mwer.finetune_mwer` reads them: word
    ids, the combined score without its NN term, ``c = delta * w_nn`` and word errors."""
    flat = nbest.flat()
    errors, offsets, _ = nbest_errors(nbest, refs, flat)
    fixed = flat_scores(flat, weights, np.zeros(len(flat.hyps)))
    return MwerLists([vocab.encode(h) for h in flat.hyps], offsets, fixed,
                     weights.lm_weight * weights.lm_weights_per_model[0], errors.astype(np.float64))


def first_pass_states(nbest: NbestSet, vocab: Vocabulary, weights: Weights) -> Callable[[LanguageModel], State]:
    """``states(model)``: each utterance's start state (batch U, set order) after its
    document's first-pass 1-best history (``interp = 1`` at ``weights``), without
    gradient, as :func:`~nbest_rescore.rescoring.history.rescore` reads them
    (:func:`~nbest_rescore.rescoring.history.first_pass_states`)."""
    flat, docs = nbest.flat(), nbest.documents()

    def states(model: LanguageModel) -> State:
        rows, order = history_states(flat, docs, NnScorer(model, vocab), weights)
        where = np.empty(len(order), dtype=np.int64)
        where[np.asarray(order)] = np.arange(len(order))
        return select_state(rows, torch.as_tensor(where))

    return states


def _subset(nbest: NbestSet, utts) -> NbestSet:
    return NbestSet(tuple(nbest.utterances[i] for i in utts), nbest.doc_source)


def _rows(flat, utts) -> np.ndarray:
    """int [H'] the flat hypothesis rows of the utterances ``utts`` (in that order)."""
    return np.concatenate([np.arange(flat.offsets[u], flat.offsets[u + 1]) for u in utts])


class Judge(NamedTuple):
    """The word errors of every hypothesis of a set, computed once: ``flat`` (the set's
    flat view), ``errors`` int [H], ``offsets`` int [U + 1], ``words`` (reference
    words in all) and ``utt_words`` int [U]."""

    flat: object
    errors: np.ndarray
    offsets: np.ndarray
    words: int
    utt_words: np.ndarray

    @classmethod
    def of(cls, nbest: NbestSet, refs) -> "Judge":
        """The errors of ``nbest`` against ``refs`` (utterance id -> reference words).
        Raises DataError for an utterance without a reference (as
        :func:`~nbest_rescore.evaluation.wer.nbest_errors`)."""
        flat = nbest.flat()
        errors, offsets, words = nbest_errors(nbest, refs, flat)
        return cls(flat, errors, offsets, words, np.asarray([len(refs[u.utt_id]) for u in nbest.utterances]))

    def one_best_errors(self, weights: Weights, nn_cost: np.ndarray) -> np.ndarray:
        """int [U] word errors of each utterance's 1-best at ``weights`` with ``nn_cost``."""
        return self.errors[segment_argmax(flat_scores(self.flat, weights, nn_cost), self.offsets)]


class FoldRun(NamedTuple):
    """One posterior scale fine-tuned on every fold: the held-out costs float64 [H]
    (set order; fold k's from the model trained without it), the models [K] and what
    each fold's run reports."""

    costs: np.ndarray
    models: List[LanguageModel]
    per_fold: List[dict]


def choose_per_fold(utt_errors: Dict[float, np.ndarray], held: Sequence[Sequence[int]]) -> List[float]:
    """Each fold's posterior scale: the one whose held-out 1-bests have the fewest word
    errors over the *other* folds' utterances (ties: the first in grid order).
    ``utt_errors``: scale -> int [U] errors of each utterance's 1-best; ``held``: the
    utterance indices of each fold."""
    total = {a: e.sum() for a, e in utt_errors.items()}
    return [min(utt_errors, key=lambda a: total[a] - utt_errors[a][list(h)].sum()) for h in held]


@dataclass(frozen=True, kw_only=True)
class FinetuneJob(FinetuneOptions):
    """``nbest-rescore finetune`` as a value: the options
    (:class:`~nbest_rescore.options.FinetuneOptions`) checked on construction
    (DataError); :meth:`run` reads, fine-tunes, evaluates and writes ``out``."""

    seed: int = 0

    def __post_init__(self):
        super().__post_init__()
        if str(self.lm).startswith("hf:"):
            raise DataError(f"--lm {self.lm}: finetune takes a word-level checkpoint (.pt) written by 'nbest-rescore "
                            f"train', not a Hugging Face model ('score --lm hf:...' scores one; it is not fine-tuned "
                            f"here); give such a .pt checkpoint")
        check_paths(self)
        if (self.eval_nbest is None) != (self.eval_ref is None):
            raise DataError("--eval-nbest and --eval-ref go together: give the other lists and their references")
        if self.eval_nbest is not None and self.folds >= 2:
            raise DataError(f"--eval-nbest with --folds {self.folds}: the folds are the evaluation; give one of them")
        grid = self.posterior_scales(self.weights())
        if len(grid) > 1 and self.folds < 2:
            raise DataError(f"--posterior-scale {','.join(f'{a:g}' for a in grid)}: a grid of {len(grid)} values is "
                            f"chosen by folds; add --folds 2 (or more), or give one value")
        check_outside_inputs(self.out, job_inputs(self))
        check_output_dir(self.out, self._outputs(grid))

    def weights(self) -> Weights:
        """The combination weights (one NN LM): ``--weights`` or the weight options."""
        return job_weights(self, ("nn",))

    def _outputs(self, grid: Sequence[float]) -> Tuple[str, ...]:
        """The names this job writes into ``out``."""
        return (FINETUNE_OUTPUTS + tuple(f"fold_{k}.pt" for k in range(1, self.folds + 1))
                + tuple(_grid_dir(a) for a in grid if len(grid) > 1))

    def posterior_scales(self, weights: Weights) -> Tuple[float, ...]:
        """The posterior scales alpha to fine-tune with: ``--posterior-scale`` (one
        value or a grid, checked on construction), else ``1 / LM weight``."""
        if self.posterior_scale is None:
            return (1.0 / weights.lm_weight if weights.lm_weight > 0 else 1.0,)
        return self.posterior_scale

    def options(self, alpha: float) -> MwerOptions:
        """The loss and update settings at posterior scale ``alpha``."""
        return MwerOptions(epochs=self.epochs, lr=self.lr, alpha=alpha, top_n=self.top_n,
                           posterior_dropout=self.posterior_dropout, utts_per_step=self.utts_per_step,
                           ce_weight=self.ce_weight, seed=self.seed)

    def run(self) -> Dict[str, object]:
        """Read, fine-tune (per fold), evaluate and write; returns finetune.json's dict."""
        weights = self.weights()
        seed_everything(self.seed)
        threads = set_threads(self.threads)
        nbest = load_job_nbest(self)
        refs = load_references(self.ref)
        check_references(nbest, refs, self.ref)
        base = load_lm(self.lm)
        text = self._text(base.vocab, nbest, refs)
        grid = self.posterior_scales(weights)
        options = {**self.options(grid[0]).__dict__, "text": self.text or "references"}
        if len(grid) > 1:
            options["alpha"] = list(grid)
        report = {"lm": self.lm, "nbest": self.nbest,
                  "weights": {"acoustic_scale": weights.acoustic_scale, "lm_weight": weights.lm_weight,
                              "interp": weights.interp, "word_ins_penalty": weights.word_ins_penalty},
                  "threads": threads, "options": options}
        with atomic_dir(self.out, self._outputs(grid), settings=report) as tmp:
            if self.folds < 2:
                model, history = self._finetune(base, nbest, refs, weights, text, grid[0])
                save_model(tmp / "finetuned.pt", model, base.vocab, {**base.info, "mwer": history})
                report["history"] = history
                if self.eval_nbest is not None:
                    report.update(self._evaluate(base, model, weights, tmp))
            else:
                report.update(self._folds(base, nbest, refs, weights, text, grid, tmp))
            (tmp / "finetune.json").write_text(json.dumps(report, indent=2) + "\n")
        return report

    def _text(self, vocab: Vocabulary, nbest: NbestSet, refs) -> List[List[int]]:
        """The cross-entropy term's sentences (word ids): --text, else the references."""
        if self.ce_weight == 0:
            return []
        if self.text:
            return [vocab.encode(s) for doc in read_lm_text(self.text, self.max_text_words) for s in doc]
        return [vocab.encode(refs[u.utt_id]) for u in nbest.utterances]

    def _finetune(self, base, nbest: NbestSet, refs, weights: Weights, text, alpha: float):
        """A copy of ``base``'s model fine-tuned on ``nbest`` at posterior scale
        ``alpha``: (model, history)."""
        model = copy.deepcopy(base.model)
        lists = mwer_lists(nbest, refs, base.vocab, weights)
        # without dropout the prefix tree reads each shared prefix once; with it, a mask per hypothesis
        list_costs = hypothesis_costs if self.posterior_dropout else forest_costs
        history = finetune_mwer(model, base.vocab.eos, lists, first_pass_states(nbest, base.vocab, weights),
                                self.options(alpha), text, list_costs)
        return model, history

    def _evaluate(self, base, model, weights: Weights, tmp) -> Dict[str, object]:
        """Score --eval-nbest with ``base`` and the fine-tuned ``model``; compare."""
        nbest, refs = load_nbest(self.eval_nbest), load_references(self.eval_ref)
        check_references(nbest, refs, self.eval_ref)
        costs = {name: rescore(nbest, NnScorer(m, base.vocab), weights).nn_cost
                 for name, m in (("base", base.model), ("mwer", model))}
        _write_costs(tmp, nbest, costs)
        return {"eval_nbest": self.eval_nbest, **self._compare(Judge.of(nbest, refs), weights, costs)}

    def _folds(self, base, nbest: NbestSet, refs, weights: Weights, text, grid, tmp) -> Dict[str, object]:
        """Fine-tune per fold (and per posterior scale of ``grid``), score each fold
        with its model, choose each fold's scale on the other folds, compare with ``base``."""
        docs = nbest.documents()
        fold_of_doc = document_folds(len(docs), self.folds, self.fold_seed)
        held = [[u for d, utts in zip(fold_of_doc, docs) if d == k for u in utts] for k in range(self.folds)]
        train = [[u for d, utts in zip(fold_of_doc, docs) if d != k for u in utts] for k in range(self.folds)]
        base_costs = rescore(nbest, NnScorer(base.model, base.vocab), weights).nn_cost
        runs = {a: self._fold_run(base, nbest, refs, weights, text, list(zip(held, train)), a) for a in grid}
        judge = Judge.of(nbest, refs)
        chosen = choose_per_fold({a: judge.one_best_errors(weights, r.costs) for a, r in runs.items()}, held)
        flat = nbest.flat()
        costs = {"base": base_costs, "mwer": np.zeros(len(flat.hyps))}
        per_fold = []
        for k, (a, utts) in enumerate(zip(chosen, held)):
            rows = _rows(flat, utts)
            costs["mwer"][rows] = runs[a].costs[rows]
            save_model(tmp / f"fold_{k + 1}.pt", runs[a].models[k], base.vocab,
                       {**base.info, "mwer": runs[a].per_fold[k]["history"]})
            per_fold.append({**runs[a].per_fold[k], "posterior_scale": a})
        _write_costs(tmp, nbest, costs)
        out = {"folds": self.folds, "fold_seed": self.fold_seed, "per_fold": per_fold,
               **self._compare(judge, weights, costs)}
        if len(grid) > 1:
            _write_costs(tmp, nbest, {_grid_dir(a): r.costs for a, r in runs.items()})
            out["posterior_scales"] = [
                {"alpha": a, **self._compare(judge, weights, {"base": base_costs, "mwer": r.costs}),
                 "per_fold": r.per_fold} for a, r in runs.items()]
        return out

    def _fold_run(self, base, nbest: NbestSet, refs, weights: Weights, text, splits, alpha: float) -> FoldRun:
        """Fine-tune one model per fold at ``alpha`` on ``splits`` [(held-out
        utterances, training utterances)] and score each fold with its own model."""
        flat = nbest.flat()
        costs, models, per_fold = np.zeros(len(flat.hyps)), [], []
        for utts, train in splits:
            train_refs = {nbest.utterances[u].utt_id: refs[nbest.utterances[u].utt_id] for u in train}
            fold_text = text if self.text else [base.vocab.encode(train_refs[i]) for i in train_refs]
            model, history = self._finetune(base, _subset(nbest, train), train_refs, weights, fold_text, alpha)
            costs[_rows(flat, utts)] = rescore(_subset(nbest, utts), NnScorer(model, base.vocab), weights).nn_cost
            models.append(model)
            per_fold.append({"documents": len({nbest.utterances[u].doc_id for u in utts}), "utterances": len(utts),
                             "history": history})
        return FoldRun(costs, models, per_fold)

    def _compare(self, judge: Judge, weights: Weights, costs) -> Dict[str, object]:
        """Held-out WER of each cost set at ``weights``, intervals and P(mwer better)."""
        utt_errors = {n: judge.one_best_errors(weights, c) for n, c in costs.items()}
        out = {"wer": {n: 100.0 * e.sum() / judge.words for n, e in utt_errors.items()}}
        if self.replications:
            out["bootstrap"] = {n: bootstrap_wer(e, judge.utt_words, self.replications, self.seed).to_dict()
                                for n, e in utt_errors.items()}
            out["p_mwer_better_than_base"] = improvement_probability(utt_errors["base"], utt_errors["mwer"],
                                                                     self.replications, self.seed)
        log.info("held-out WER at the given weights: base %.2f%%, MWER fine-tuned %.2f%%", out["wer"]["base"],
                 out["wer"]["mwer"])
        return out


def _write_costs(tmp, nbest: NbestSet, costs) -> None:
    """``tmp/NAME/nn_cost`` for each ``NAME -> float64 [H]`` of ``costs`` (set order)."""
    keys = nbest.flat().keys
    for name, c in costs.items():
        (tmp / name).mkdir()
        write_cost_ark(tmp / name / "nn_cost", zip(keys, c))


def _grid_dir(alpha: float) -> str:
    """The output folder of one grid point's costs: ``mwer_alpha0.03``."""
    return f"mwer_alpha{alpha:g}"
