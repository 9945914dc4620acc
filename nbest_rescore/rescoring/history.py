"""Corpus-level N-best rescoring with 1-best history conditioning (``000`` 5.3.1).

Each utterance of a document is scored from the state the LM reached after reading the
chosen 1-best of the previous utterances of the same document (each followed by
``</s>``). The policies (:data:`HISTORY_MODES`, docs/scoring.md) are the thesis'
options 1-3, ``first-pass`` (all utterances batched, the histories known in advance),
``rescored`` and ``interpolated`` (documents advancing in parallel, one utterance
position at a time), and ``none``; the final 1-best always uses the full weights. A
backward model conditions each utterance on the FOLLOWING utterances of its document
(the reversed set of :func:`~.backward.reverse_nbest`, results mapped back).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import torch

from ..errors import DataError, HypothesisError, examples
from ..models.base import align_slots, cat_states, select_state
from ..options import HISTORY_MODES, ScoringOptions  # noqa: F401  (HISTORY_MODES: the docs)
from ..types import NbestSet
from ..validation import check_value
from .backward import reverse_nbest
from .combine import Weights, flat_scores, segment_argmax
from .interface import ContextScorer, Scorer
from .selective import Selection, fill_unscored

log = logging.getLogger(__name__)


@dataclass
class RescoreResult:
    """nn_cost: float64 [H] NN costs in set order (utterances, then hypotheses);
    offsets: int64 [U + 1]; best: int64 [U] flat index of each utterance's new 1-best;
    one_best: utt_id -> words; history: the policy used; scored: bool [H], the
    hypotheses the LM scored (the others were left out by selective rescoring,
    :mod:`.selective`: their NN costs are estimates); None: all of them."""

    nn_cost: np.ndarray
    offsets: np.ndarray
    best: np.ndarray
    one_best: Dict[str, tuple]
    history: str
    scored: Optional[np.ndarray] = None


class NonFiniteCostError(DataError):
    """The NN LM gave NaN or infinite costs; ``keys`` are those hypotheses' keys."""

    def __init__(self, keys: List[str]):
        self.keys = keys
        super().__init__(f"the NN LM gave non-finite costs (NaN or inf) for {examples(keys)}")


def _choice_weights(history: str, weights: Weights) -> Weights:
    if history == "first-pass":
        return replace(weights, interp=1.0)
    if history == "rescored":
        return replace(weights, interp=0.0)
    return weights


def rescore(nbest: NbestSet, scorer: Scorer, weights: Weights, history: str = "first-pass",
            ngram_cost: Optional[np.ndarray] = None,
            progress: Optional[Callable[[int], None]] = None,
            selection: Optional[Selection] = None) -> RescoreResult:
    """Score every hypothesis with the NN LM and pick the new 1-best per utterance.

    Args:
        nbest: the lists, in spoken order within documents.
        scorer: the NN LM's scorer (:class:`~.interface.Scorer`: an
            :class:`~.scorer.NnScorer` or :class:`~.hf_scorer.HfScorer`).
        weights: combination weights (see :mod:`nbest_rescore.rescoring.combine`).
        history: one of :data:`HISTORY_MODES`.
        ngram_cost: float64 [H] n-gram costs replacing the lists' ``lm_cost``.
        progress: called with the number of hypotheses scored so far, if given.
        selection: selective rescoring (:mod:`.selective`): the hypotheses it leaves
            unscored get :func:`~.selective.fill_unscored`'s estimate (a list left
            whole: its n-gram costs, so that every combination of the weights gives
            its first-pass score and keeps its first-pass 1-best, which feeds the
            history as any 1-best). None: every hypothesis is scored.

    A backward model's results (see the module docstring) are in the original order too.

    Raises:
        DataError (a ValueError): unknown history policy (checked as ``--history``,
            :class:`~nbest_rescore.options.ScoringOptions`). ValueError: ``ngram_cost`` not [H].
        NonFiniteCostError: the model gave a NaN or infinite cost (checked per batch,
            before any 1-best is picked from it).
    """
    check_value(ScoringOptions, "history", history)
    if scorer.direction == "backward":
        return _rescore_backward(nbest, scorer, weights, history, ngram_cost, progress, selection)
    return _rescore(nbest, scorer, weights, history, ngram_cost, progress, selection)


def _rescore_backward(nbest: NbestSet, scorer: Scorer, weights: Weights, history: str,
                      ngram_cost: Optional[np.ndarray], progress, selection) -> RescoreResult:
    """:func:`rescore` of a backward model: the forward machinery on the reversed set
    (:func:`~.backward.reverse_nbest`), results mapped back to the original order."""
    flat = nbest.flat(ngram_cost)  # (checks ngram_cost's shape)
    rev = reverse_nbest(nbest)
    log.debug("backward LM: documents read from their last utterance to their first, hypotheses reversed")
    res = _rescore(rev.nbest, scorer, weights, history,
                   None if ngram_cost is None else flat.lm_cost[rev.flat_index], progress, selection)
    best = np.empty_like(res.best)
    best[rev.utt_index] = rev.flat_index[res.best]
    one_best = {u.utt_id: flat.hyps[best[i]] for i, u in enumerate(nbest.utterances)}
    scored = None if res.scored is None else rev.to_original(res.scored)
    return RescoreResult(rev.to_original(res.nn_cost), flat.offsets, best, one_best, history, scored)


def _rescore(nbest: NbestSet, scorer: Scorer, weights: Weights, history: str,
             ngram_cost: Optional[np.ndarray], progress, selection: Optional[Selection] = None) -> RescoreResult:
    """:func:`rescore` reading the set in the given order (a forward model)."""
    flat = nbest.flat(ngram_cost)
    docs = nbest.documents()
    log.debug("history conditioning: %s (%d documents, %d utterances, grouping from %s)",
              history, len(docs), len(nbest), nbest.doc_source)
    unscored = None if selection is None else selection.unscored(flat, weights)
    utts = nbest.utterances
    costs = _Costs(flat, scorer, progress, unscored, [u.utt_id for u in utts])
    doc_ids = [utts[d[0]].doc_id for d in docs]
    if history == "none":
        for chunk in _chunks(list(range(len(nbest)))):  # bounded, so that progress is reported
            costs.score(chunk, *start_rows(scorer, [utts[u].doc_id for u in chunk]))
    elif history == "first-pass":
        all_states, start_utts = first_pass_states(flat, docs, scorer, weights, doc_ids)
        # several utterances per call, sorted by length inside the scorer
        for rows in _chunks(list(range(len(start_utts)))):
            costs.score([start_utts[r] for r in rows], all_states, rows)
    else:
        choose = _choice_weights(history, weights)

        def read_chosen(utts, cur):
            costs.score(utts, cur, list(range(len(utts))))
            return [flat.hyps[c] for c in costs.pick(utts, choose)]

        walk_documents(docs, scorer, read_chosen, doc_ids)
    best = segment_argmax(flat_scores(flat, weights, costs.nn_cost), flat.offsets)
    one_best = {u.utt_id: flat.hyps[best[i]] for i, u in enumerate(nbest.utterances)}
    return RescoreResult(costs.nn_cost, flat.offsets, best, one_best, history,
                         None if unscored is None else ~unscored)


def first_pass_states(flat, docs, scorer: Scorer, weights: Weights, doc_ids: Optional[List[str]] = None):
    """``(states, utts)``: the start state of every utterance after its document's
    first-pass 1-best history (``interp = 1`` at ``weights``), read with ``scorer``
    (:func:`walk_documents`, no gradient); row i of ``states`` is utterance ``utts[i]``
    (documents advance in parallel, so the rows are not in set order). ``flat``: the
    set's :class:`~nbest_rescore.types.FlatNbest`; ``docs``: its documents' utterances;
    ``doc_ids``: their ids (:func:`start_states`)."""
    fp_best = segment_argmax(flat_scores(flat, _choice_weights("first-pass", weights)), flat.offsets)
    starts, start_utts = [], []

    def read_first_pass(utts, cur):
        starts.append(cur)
        start_utts.extend(utts)
        return [flat.hyps[fp_best[u]] for u in utts]

    walk_documents(docs, scorer, read_first_pass, doc_ids)
    return cat_states(starts), start_utts


def _chunks(items: list, size: int = 64):
    """``items`` in consecutive pieces of at most ``size``."""
    return (items[s:s + size] for s in range(0, len(items), size))


def start_states(scorer: Scorer, doc_ids: Sequence[Optional[str]]):
    """The start states of the documents ``doc_ids`` (batch n): with their contexts
    for a :class:`~.interface.ContextScorer`, else ``scorer.initial_state(n)``."""
    if isinstance(scorer, ContextScorer):
        return scorer.document_states(doc_ids)
    return scorer.initial_state(len(doc_ids))


def start_rows(scorer: Scorer, doc_ids: Sequence[str]):
    """``(states, rows)``: the start state of each distinct document of ``doc_ids``
    (:func:`start_states`) and the row of each entry of ``doc_ids`` (a scorer without
    contexts: one initial state, row 0 for all)."""
    if not isinstance(scorer, ContextScorer):
        return scorer.initial_state(1), [0] * len(doc_ids)
    distinct = list(dict.fromkeys(doc_ids))
    row = {d: i for i, d in enumerate(distinct)}
    return start_states(scorer, distinct), [row[d] for d in doc_ids]


def walk_documents(docs, scorer: Scorer, visit: Callable, doc_ids: Optional[Sequence[str]] = None) -> None:
    """Read the documents in parallel, one utterance position at a time, from their
    start states (:func:`start_states` of ``doc_ids``; None: no ids):
    ``visit(utterance indices, their states)`` is called for the
    documents that have an utterance at the position and returns the words each of
    them continues with (read with ``scorer.advance``). ``docs``: lists of utterance
    (or sentence) indices; ``scorer``: a :class:`~.interface.Scorer`."""
    state = start_states(scorer, [None] * len(docs) if doc_ids is None else doc_ids)
    for pos in range(max(len(d) for d in docs)):
        active = [i for i, d in enumerate(docs) if pos < len(d)]
        idx = torch.as_tensor(active, device=scorer.device)
        cur = select_state(state, idx)
        words = visit([docs[i][pos] for i in active], cur)
        state = _scatter(state, idx, scorer.advance(cur, words))


class _Costs:
    """The NN costs of a flat set (float64 [H] ``nn_cost``), filled utterance by
    utterance; ``progress(hypotheses done)`` after each batch. ``unscored``: bool [H],
    the hypotheses the LM does not score (their costs: :func:`~.selective.fill_unscored`
    over their list), or None: all are scored; ``utt_ids``: the U utterance ids (a
    :class:`~.interface.ContextScorer`'s utterance contexts)."""

    def __init__(self, flat, scorer: Scorer, progress, unscored: Optional[np.ndarray] = None,
                 utt_ids: Sequence[str] = ()):
        self.flat, self.scorer, self.progress, self.unscored = flat, scorer, progress, unscored
        self.utt_ids = utt_ids if isinstance(scorer, ContextScorer) else None
        self.nn_cost = np.zeros(len(flat.hyps), dtype=np.float64)
        self.done = 0

    def score(self, utt_idx: List[int], states, state_rows: List[int]) -> None:
        """Score the hypotheses of the utterances ``utt_idx``, each from the state row of
        ``state_rows`` (those in ``unscored`` are estimated once their list's others are
        scored). Raises NonFiniteCostError for NaN or infinite costs, and DataError
        naming the hypothesis key for one the scorer cannot score."""
        flat = self.flat
        if self.utt_ids is not None:
            states, state_rows = self.scorer.utterance_states(states, state_rows, [self.utt_ids[u] for u in utt_idx])
        rows, flat_pos = [], []
        for u, r in zip(utt_idx, state_rows):
            pos = range(flat.offsets[u], flat.offsets[u + 1])
            if self.unscored is not None:
                pos = [h for h in pos if not self.unscored[h]]
            rows.extend([r] * len(pos))
            flat_pos.extend(pos)
        if flat_pos:
            hyps = [flat.hyps[p] for p in flat_pos]
            try:
                costs = self.scorer.costs(states, rows, hyps)
            except HypothesisError as e:
                raise DataError(f"hypothesis {flat.keys[flat_pos[e.index]]}: {e}") from None
            if not np.all(np.isfinite(costs)):
                raise NonFiniteCostError([flat.keys[p] for p, c in zip(flat_pos, costs) if not np.isfinite(c)])
            self.nn_cost[flat_pos] = costs
        if self.unscored is not None:
            for u in utt_idx:
                a, b = flat.offsets[u], flat.offsets[u + 1]
                self.nn_cost[a:b] = fill_unscored(flat.lm_cost[a:b], flat.offsets[u:u + 2], self.nn_cost[a:b],
                                                  self.unscored[a:b])
        self.done += sum(int(flat.offsets[u + 1] - flat.offsets[u]) for u in utt_idx)
        if self.progress:
            self.progress(self.done)

    def pick(self, utt_idx: List[int], w: Weights) -> List[int]:
        """Flat index of the best hypothesis of each utterance under ``w``."""
        flat = self.flat
        return [int(flat.offsets[u] + np.argmax(flat_scores(flat, w, self.nn_cost,
                                                            slice(flat.offsets[u], flat.offsets[u + 1]))))
                for u in utt_idx]


def _scatter(state, idx, new):
    """Write the rows ``new`` into ``state`` at positions ``idx`` (a cache that grew is
    aligned first, see :func:`~nbest_rescore.models.base.align_slots`)."""
    out = []
    for s, n in zip(state, new):
        s, n = align_slots((s, n))
        s = s.clone()
        s[idx] = n
        out.append(s)
    return tuple(out)
