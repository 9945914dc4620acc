"""The ``finetune`` job: MWER fine-tuning of a word-level checkpoint on N-best lists
(:mod:`nbest_rescore.training.mwer`), honest by folds of documents.

Without folds, one model is fine-tuned on all the lists and written as a normal
checkpoint. With ``--folds K`` (documents dealt as ``tune --folds``), fold k's lists
are scored (first-pass history, as ``score``) by a model fine-tuned on the other folds
only, and the held-out WER at the given weights is compared with the checkpoint's WER
at the same weights: pooled WER of each, the paired bootstrap's P(fine-tuned better)
and the 95% interval of each. Both cost files are written for ``tune --folds``.
"""
from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass
from typing import Callable, Dict, List

import numpy as np
import torch

from ..errors import DataError
from ..evaluation.bootstrap import bootstrap_wer, improvement_probability
from ..evaluation.folds import document_folds
from ..evaluation.wer import check_references, nbest_errors
from ..io.atomic import atomic_dir, check_output_dir, check_outside_inputs
from ..io.lm_text import read_lm_text
from ..io.score_ark import write_cost_ark
from ..models import save_model
from ..models.base import LanguageModel, State, select_state
from ..options import FinetuneOptions
from ..rescoring.combine import Weights, flat_scores, segment_argmax
from ..rescoring.history import first_pass_states as history_states, rescore
from ..rescoring.scorer import NnScorer
from ..training.mwer import MwerLists, MwerOptions, finetune_mwer
from ..types import NbestSet
from ..validation import check_paths, named_paths
from ..vocab import Vocabulary
from .inputs import PLAIN_PATHS, load_job_nbest, load_nbest, load_references
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


@dataclass(frozen=True, kw_only=True)
class FinetuneJob(FinetuneOptions):
    """``nbest-rescore finetune`` as a value: the options
    (:class:`~nbest_rescore.options.FinetuneOptions`) checked on construction
    (DataError); :meth:`run` reads, fine-tunes, evaluates and writes ``out``."""

    seed: int = 0

    def __post_init__(self):
        super().__post_init__()
        check_paths(self, ("lm", "nbest", "ref", "text", "weights_file", "eval_nbest", "eval_ref", *PLAIN_PATHS))
        if (self.eval_nbest is None) != (self.eval_ref is None):
            raise DataError("--eval-nbest and --eval-ref go together: give the other lists and their references")
        if self.eval_nbest is not None and self.folds >= 2:
            raise DataError(f"--eval-nbest with --folds {self.folds}: the folds are the evaluation; give one of them")
        if self.lm.startswith("hf:"):
            raise DataError(f"--lm {self.lm}: finetune takes a checkpoint trained by 'train' (a word-level LM); "
                            f"an hf: LM is not fine-tuned here")
        self.weights()
        check_outside_inputs(self.out, named_paths(self, ("lm", "nbest", "ref", "text", "weights_file", "eval_nbest",
                                                          "eval_ref", *PLAIN_PATHS)))
        check_output_dir(self.out, FINETUNE_OUTPUTS + tuple(f"fold_{k}.pt" for k in range(1, self.folds + 1)))

    def weights(self) -> Weights:
        """The combination weights (one NN LM): ``--weights`` or the weight options."""
        return job_weights(self, ("nn",))

    def options(self, weights: Weights) -> MwerOptions:
        """The loss and update settings."""
        alpha = self.posterior_scale or (1.0 / weights.lm_weight if weights.lm_weight > 0 else 1.0)
        return MwerOptions(epochs=self.epochs, lr=self.lr, alpha=alpha, top_n=self.top_n,
                           utts_per_step=self.utts_per_step, ce_weight=self.ce_weight, seed=self.seed)

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
        report = {"lm": self.lm, "nbest": self.nbest, "weights": _weights_dict(weights), "threads": threads,
                  "options": {**self.options(weights).__dict__, "text": self.text or "references"}}
        with atomic_dir(self.out, FINETUNE_OUTPUTS, settings=report) as tmp:
            if self.folds < 2:
                model, history = self._finetune(base, nbest, refs, weights, text)
                save_model(tmp / "finetuned.pt", model, base.vocab, {**base.info, "mwer": history})
                report["history"] = history
                if self.eval_nbest is not None:
                    report.update(self._evaluate(base, model, weights, tmp))
            else:
                report.update(self._folds(base, nbest, refs, weights, text, tmp))
            (tmp / "finetune.json").write_text(json.dumps(report, indent=2) + "\n")
        return report

    def _text(self, vocab: Vocabulary, nbest: NbestSet, refs) -> List[List[int]]:
        """The cross-entropy term's sentences (word ids): --text, else the references."""
        if self.ce_weight == 0:
            return []
        if self.text:
            return [vocab.encode(s) for doc in read_lm_text(self.text, self.max_text_words) for s in doc]
        return [vocab.encode(refs[u.utt_id]) for u in nbest.utterances]

    def _finetune(self, base, nbest: NbestSet, refs, weights: Weights, text):
        """A copy of ``base``'s model fine-tuned on ``nbest``: (model, history)."""
        model = copy.deepcopy(base.model)
        lists = mwer_lists(nbest, refs, base.vocab, weights)
        history = finetune_mwer(model, base.vocab.eos, lists, first_pass_states(nbest, base.vocab, weights),
                                self.options(weights), text)
        return model, history

    def _evaluate(self, base, model, weights: Weights, tmp) -> Dict[str, object]:
        """Score --eval-nbest with ``base`` and the fine-tuned ``model``; compare."""
        nbest, refs = load_nbest(self.eval_nbest), load_references(self.eval_ref)
        check_references(nbest, refs, self.eval_ref)
        costs = {name: rescore(nbest, NnScorer(m, base.vocab), weights).nn_cost
                 for name, m in (("base", base.model), ("mwer", model))}
        _write_costs(tmp, nbest, costs)
        return {"eval_nbest": self.eval_nbest, **self._compare(nbest, refs, weights, costs)}

    def _folds(self, base, nbest: NbestSet, refs, weights: Weights, text, tmp) -> Dict[str, object]:
        """Fine-tune per fold, score each fold with its model, compare with ``base``."""
        docs = nbest.documents()
        fold_of_doc = document_folds(len(docs), self.folds, self.fold_seed)
        flat = nbest.flat()
        costs = {"base": rescore(nbest, NnScorer(base.model, base.vocab), weights).nn_cost,
                 "mwer": np.zeros(len(flat.hyps))}
        per_fold = []
        for k in range(self.folds):
            held = [u for d, utts in zip(fold_of_doc, docs) if d == k for u in utts]
            train = [u for d, utts in zip(fold_of_doc, docs) if d != k for u in utts]
            train_refs = {nbest.utterances[u].utt_id: refs[nbest.utterances[u].utt_id] for u in train}
            fold_text = text if self.text else [base.vocab.encode(train_refs[i]) for i in train_refs]
            model, history = self._finetune(base, _subset(nbest, train), train_refs, weights, fold_text)
            save_model(tmp / f"fold_{k + 1}.pt", model, base.vocab, {**base.info, "mwer": history})
            rows = np.concatenate([np.arange(flat.offsets[u], flat.offsets[u + 1]) for u in held])
            costs["mwer"][rows] = rescore(_subset(nbest, held), NnScorer(model, base.vocab), weights).nn_cost
            per_fold.append({"documents": int((fold_of_doc == k).sum()), "utterances": len(held),
                             "history": history})
        _write_costs(tmp, nbest, costs)
        return {"folds": self.folds, "fold_seed": self.fold_seed, "per_fold": per_fold,
                **self._compare(nbest, refs, weights, costs)}

    def _compare(self, nbest: NbestSet, refs, weights: Weights, costs) -> Dict[str, object]:
        """Held-out WER of each cost set at ``weights``, intervals and P(mwer better)."""
        flat = nbest.flat()
        errors, offsets, words = nbest_errors(nbest, refs, flat)
        utt_words = np.asarray([len(refs[u.utt_id]) for u in nbest.utterances])
        utt_errors = {n: errors[segment_argmax(flat_scores(flat, weights, c), offsets)] for n, c in costs.items()}
        out = {"wer": {n: 100.0 * e.sum() / words for n, e in utt_errors.items()}}
        if self.replications:
            out["bootstrap"] = {n: bootstrap_wer(e, utt_words, self.replications, self.seed).to_dict()
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


def _weights_dict(w: Weights) -> Dict[str, object]:
    return {"acoustic_scale": w.acoustic_scale, "lm_weight": w.lm_weight, "interp": w.interp,
            "word_ins_penalty": w.word_ins_penalty}
