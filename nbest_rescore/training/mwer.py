"""Minimum word error rate (MWER) fine-tuning of a word-level LM on N-best lists.

The LM is trained for the decision rescoring makes (Prabhavalkar et al. 2018, minimum
word error rate training of attention models; RescoreBERT, Xu et al. 2022, arXiv
2202.01094). For an utterance with hypotheses ``h_1 .. h_N`` (the first ``top_n`` of
its list), word errors ``e_i`` against the reference and combined scores::

    s_i = f_i - c * nn_cost_i        (f_i: acoustic, n-gram, graph and penalty terms;
                                      c = delta * w_nn, docs/scoring.md)

the loss is the expected number of word errors under the posterior
``q = softmax(alpha * s)``, less the list's mean (the baseline of the papers)::

    L_mwer = sum_i q_i (e_i - mean_j e_j)

with ``alpha`` the posterior scale (``1 / delta`` by default: Kaldi's lattice
posteriors). Its gradient with respect to ``nn_cost_i`` is
``-alpha c q_i (e_i - E_q[e])``: a hypothesis with fewer errors than the expected
number gets a lower cost. ``nn_cost_i`` is the LM's cost (nats, words + ``</s>``)
of ``h_i`` from the state after the document's first-pass 1-best history, as in
scoring, and without dropout as in scoring (``posterior_dropout`` draws a mask per
hypothesis instead, the earlier behaviour); the history states come from the caller, recomputed with the current
weights each epoch, and carry no gradient. A cross-entropy term on LM text
(``ce_weight`` times the mean cost per token of sentences read from the
document-start state) keeps the LM an LM.
"""
from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from ..models.base import LanguageModel, State, select_state
from ..corpus import pad_batch  # (the padding scoring uses: </s> w_1 .. w_n -> w_1 .. w_n </s>)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MwerLists:
    """The training lists reduced to what the loss reads (U utterances, H hypotheses,
    in set order; the hypotheses of an utterance in first-pass rank order).

    Attributes:
        seqs: [H] word ids of each hypothesis (without ``</s>``).
        offsets: int64 [U + 1]; utterance u owns ``offsets[u]:offsets[u + 1]``.
        fixed: float64 [H] the combined score without its NN term (natural log).
        nn_scale: c, the factor of ``-nn_cost`` in the combined score (delta * w_nn).
        errors: float64 [H] word errors of each hypothesis against its reference.
    """

    seqs: Sequence[Sequence[int]]
    offsets: np.ndarray
    fixed: np.ndarray
    nn_scale: float
    errors: np.ndarray

    @property
    def num_utts(self) -> int:
        """U."""
        return len(self.offsets) - 1


@dataclass(frozen=True)
class MwerOptions:
    """The fine-tuning settings.

    Attributes:
        epochs: passes over the training utterances.
        lr: Adam's learning rate.
        alpha: the posterior scale of the combined score (None: ``1 / delta``, set by
            the caller).
        top_n: hypotheses of each list in the loss (the first-pass top ``top_n``;
            None: all of them).
        posterior_dropout: the hypotheses' costs in training mode (dropout on; a
            mask per hypothesis); False: in evaluation mode, as scoring computes them
            (the gradient flows either way; the cross-entropy term keeps dropout).
        utts_per_step: utterances per update.
        ce_weight: weight of the cross-entropy term (0: none).
        ce_sentences: LM-text sentences per update for that term.
        clip: gradient-norm clip.
        seed: the shuffle of the utterances and the dropout.
    """

    epochs: int = 2
    lr: float = 1e-4
    alpha: float = 0.1
    top_n: Optional[int] = None
    posterior_dropout: bool = False
    utts_per_step: int = 8
    ce_weight: float = 0.1
    ce_sentences: int = 16
    clip: float = 1.0
    seed: int = 0


def mwer_loss(nn_cost: Tensor, fixed: Tensor, nn_scale: float, errors: Tensor, alpha: float) -> Tensor:
    """The MWER loss of one list (see the module docstring): a scalar.

    Args:
        nn_cost: float [N] the LM's costs (nats; with gradient).
        fixed: float64 [N] the rest of the combined score.
        nn_scale: c >= 0. errors: float64 [N] word errors. alpha: the posterior scale.
    """
    s = fixed - nn_scale * nn_cost.double()
    q = torch.softmax(alpha * s, dim=0)
    return (q * (errors - errors.mean())).sum()


def hypothesis_costs(model: LanguageModel, seqs: Sequence[Sequence[int]], eos: int, states: State,
                     rows: Sequence[int]) -> Tensor:
    """float32 [B] costs (nats, words + ``</s>``) of ``seqs`` [B] (word ids), sequence b
    from row ``rows[b]`` of ``states``, with gradient (one padded forward)."""
    batch = pad_batch(seqs, eos, rows, range(len(seqs)))
    device = next(model.parameters()).device
    lengths = batch.lengths.to(device)
    st = select_state(states, batch.rows.to(device))
    logp, _ = model.log_probs(batch.inputs.to(device), batch.targets.to(device), st, lengths)
    mask = torch.arange(batch.inputs.shape[1], device=device)[None, :] < lengths[:, None]
    return -(logp * mask).sum(1)


#: ``list_costs(model, seqs, eos, states, rows)`` -> float [B] costs with gradient: the
#: padded :func:`hypothesis_costs`, or the prefix tree's (``rescoring.forest_grad``)
ListCosts = Callable[[LanguageModel, Sequence[Sequence[int]], int, State, Sequence[int]], Tensor]


def _step(model, lists: MwerLists, utts: Sequence[int], states: State, eos: int, o: MwerOptions,
          ce_batch: Optional[List[Sequence[int]]], list_costs: ListCosts = hypothesis_costs):
    """One update's loss over the utterances ``utts``: (loss tensor, expected errors, CE or NaN)."""
    seqs, rows, spans = [], [], []
    for u in utts:
        a = int(lists.offsets[u])
        b = int(lists.offsets[u + 1]) if o.top_n is None else min(int(lists.offsets[u + 1]), a + o.top_n)
        spans.append((len(seqs), a, b))
        seqs.extend(lists.seqs[a:b])
        rows.extend([u] * (b - a))
    model.train(o.posterior_dropout)
    costs = list_costs(model, seqs, eos, states, rows)
    model.train()
    losses, expected = [], 0.0
    for start, a, b in spans:
        fixed = torch.as_tensor(lists.fixed[a:b])
        errors = torch.as_tensor(lists.errors[a:b])
        loss = mwer_loss(costs[start:start + b - a], fixed, lists.nn_scale, errors, o.alpha)
        losses.append(loss)
        expected += float(loss.detach()) + float(errors.mean())
    loss = torch.stack(losses).mean()
    ce = float("nan")
    if ce_batch:
        ce_costs = hypothesis_costs(model, ce_batch, eos, model.init_state(1), [0] * len(ce_batch))
        ce_loss = ce_costs.sum() / sum(len(s) + 1 for s in ce_batch)
        loss = loss + o.ce_weight * ce_loss
        ce = float(ce_loss.detach())
    return loss, expected / len(utts), ce


def finetune_mwer(model: LanguageModel, eos: int, lists: MwerLists, history_states: Callable[[LanguageModel], State],
                  options: MwerOptions, ce_text: Sequence[Sequence[int]] = (),
                  list_costs: ListCosts = hypothesis_costs) -> List[dict]:
    """Fine-tune ``model`` in place by MWER on ``lists``.

    Args:
        model: the LM (its weights change).
        eos: the id of ``</s>``.
        lists: the training lists.
        history_states: ``history_states(model)`` -> the start state of every
            utterance (batch U, set order) after its first-pass 1-best history,
            computed without gradient (called at the start of every epoch).
        options: the settings.
        ce_text: sentences (word ids) of LM text for the cross-entropy term.
        list_costs: how the hypotheses' costs are computed (:data:`ListCosts`; the
            padded forward by default).
    Returns:
        per epoch ``{"epoch", "expected_errors" (mean per list over its top_n), "ce" (nats per
        token, NaN without text), "steps"}``.
    """
    o = options
    torch.manual_seed(o.seed)
    rng = random.Random(o.seed)
    opt = torch.optim.Adam(model.parameters(), lr=o.lr)
    order = list(range(lists.num_utts))
    ce_pos, history = 0, []
    for epoch in range(1, o.epochs + 1):
        model.eval()
        states = tuple(s.detach().clone() for s in history_states(model))
        model.train()
        rng.shuffle(order)
        exp_sum, ce_sum, steps = 0.0, 0.0, 0
        for start in range(0, len(order), o.utts_per_step):
            ce_batch = None
            if o.ce_weight > 0 and ce_text:
                ce_batch = [ce_text[(ce_pos + i) % len(ce_text)] for i in range(o.ce_sentences)]
                ce_pos += o.ce_sentences
            loss, expected, ce = _step(model, lists, order[start:start + o.utts_per_step], states, eos, o, ce_batch,
                                       list_costs)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), o.clip)
            opt.step()
            exp_sum, ce_sum, steps = exp_sum + expected, ce_sum + (0.0 if math.isnan(ce) else ce), steps + 1
        row = {"epoch": epoch, "expected_errors": exp_sum / max(steps, 1),
               "ce": ce_sum / steps if ce_text and o.ce_weight > 0 and steps else float("nan"), "steps": steps}
        log.info("MWER epoch %d: expected word errors per list %.4f, LM-text cost %.4f nats/token, %d updates",
                 epoch, row["expected_errors"], row["ce"], steps)
        history.append(row)
    model.eval()
    return history
