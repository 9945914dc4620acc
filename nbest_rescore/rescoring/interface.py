"""The scorer interface: what rescoring (:mod:`.history`), perplexity
(:mod:`~nbest_rescore.evaluation.perplexity`) and the api read of a neural LM scorer.

:class:`Scorer` is implemented by :class:`~.scorer.NnScorer` (nbest-rescore's own
checkpoints) and :class:`~.hf_scorer.HfScorer` (Hugging Face causal LMs);
:class:`SubwordScorer` adds the token counters of a scorer whose LM reads subword
tokens (the hf: one), which history perplexity reports; :class:`ContextScorer` adds the
text put before a document's history and an utterance's hypotheses (the hf: one,
``--prompt``/``--context-file``), which rescoring reads when a scorer has it. All are
``runtime_checkable`` (``isinstance`` checks that the members exist, not their types).
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Protocol, Sequence, Tuple, runtime_checkable

import numpy as np
import torch

from ..models.base import State


@runtime_checkable
class Scorer(Protocol):
    """Costs of hypotheses after a document's history, and the history's states.

    A state is a tuple of tensors on :attr:`device`, batch first (row i: stream i), so
    that :func:`~nbest_rescore.models.base.select_state`,
    :func:`~nbest_rescore.models.base.cat_states` and
    :func:`~nbest_rescore.models.base.align_slots` apply; its contents are the
    scorer's own. Costs are negated natural-log probabilities (nats) of a hypothesis'
    words and its end (``</s>``, or the LM's end tokens), in the order given: for a
    ``"backward"`` :attr:`direction` the caller reverses documents and hypotheses
    (:func:`~.history.rescore` does).
    """

    #: the device of the states (index tensors for :func:`select_state` go there)
    device: torch.device

    @property
    def direction(self) -> str:
        """``"forward"`` or ``"backward"``: the order in which the LM reads text."""

    def initial_state(self, n: int) -> State:
        """The document-start state of ``n`` streams (batch n)."""

    def advance(self, states: State, hyps: Sequence[Sequence[str]]) -> State:
        """The states (batch B) after row i of ``states`` (batch B) read ``hyps[i]`` (B
        word tuples, empty allowed) and its end, ready for the next utterance."""

    def costs(self, states: State, rows: Sequence[int], hyps: Sequence[Sequence[str]]) -> np.ndarray:
        """float64 [H] costs (-log P, natural log; words + end) of ``hyps`` [H] (word
        tuples, empty allowed: only the end is scored), hypothesis i from row
        ``rows[i]`` of ``states`` (batch U).

        Raises:
            HypothesisError: (a DataError) a hypothesis the model cannot score (e.g.
                longer than its positions); ``index`` is its position in ``hyps``.
        """

    def settings(self) -> dict:
        """JSON-ready scoring settings for ``wer.json``: at least ``direction``,
        ``mode``, ``output``, ``quantize``, ``dtype``, ``dtype_scope``, ``batch_size``,
        ``max_tokens``."""

    def word_stats(self, counts: Mapping[str, int]) -> dict:
        """JSON-ready statistics of the LM over the list words ``counts`` (word ->
        occurrences) and what was scored so far (vocabulary coverage, tokens per word)."""


@runtime_checkable
class SubwordScorer(Scorer, Protocol):
    """A :class:`Scorer` whose LM reads subword tokens, with its token counters."""

    #: tokens of the hypotheses scored by :meth:`costs` so far, the end tokens excluded
    tokens: int

    @property
    def end_tokens(self) -> int:
        """Tokens the LM reads after each sentence (its end); not in :attr:`tokens`."""


@runtime_checkable
class ContextScorer(Scorer, Protocol):
    """A :class:`Scorer` that puts texts before the history (:mod:`.hf_context`):
    per document at its start, per utterance before its hypotheses."""

    def document_states(self, doc_ids: Sequence[Optional[str]]) -> State:
        """The start states of the documents ``doc_ids`` (batch n; None: a document
        without an id), with their contexts: :meth:`initial_state`'s otherwise."""

    def utterance_states(self, states: State, rows: Sequence[int], utt_ids: Sequence[str]) -> Tuple[State, List[int]]:
        """(states, rows) to score the utterances ``utt_ids`` [u] from, which were at
        rows ``rows`` [u] of ``states``: with each utterance's context (the inputs
        as they are when none of them has one)."""
