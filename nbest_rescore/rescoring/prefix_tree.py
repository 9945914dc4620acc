"""Scoring a forest of hypotheses: every LM state of its :class:`~.history_graph.ScoringGraph`
read once, in batched model calls.

For the hypotheses handed to :meth:`NnScorer.costs <nbest_rescore.rescoring.scorer.NnScorer.costs>`
:func:`~.prefix_forest.build_forest` makes one prefix tree per start-state row and
:func:`~.history_graph.scoring_graph` the states the LM reads of it: every distinct
prefix (exact), or one per history of the last K - 1 words (``max_ngram_order`` K). Each
state node is read once (a root reads ``</s>``, any other node its last word) and its
output distribution gives log P(w | state) for the (state, word) pairs of the graph; a
hypothesis' cost is minus the sum along its path.

:func:`score_forest` walks the forest of states level by level with batched model calls,
states gathered from the parent nodes (:func:`~nbest_rescore.models.base.select_state`)
and kept only for the current frontier. A chain of nodes with one child each can be read
as one multi-token *segment* (``max_segment`` > 1): fewer, longer calls with padding,
for a large fixed cost per call (a GPU); ``max_segment = 1`` is the fastest on CPU.
Only ``model(tokens, state, lengths)`` and the output layer ``model.output``
(:mod:`~nbest_rescore.models.output_layer`) are used.

Output layer (the variants: :mod:`.scorer`): only the (state, word) pairs are scored.
The exact layers (``model.output.log_probs_at``) queue the features of successive levels and
score them once :data:`OUTPUT_ROWS` nodes are pending (products on hundreds of rows);
``softmax_impl = "plain"`` takes ``log_softmax`` of the whole [rows, V] product per
call; ``self_normalized`` the pairs' target logits (O(D) per pair).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np
import torch

from ..models.base import LanguageModel, State, cat_states, select_state
from ..models.rows import pad_rows
from .batching import invariant_forward
from .history_graph import ScoringGraph
from .prefix_forest import PrefixForest, ranges


@dataclass
class _Chunk:
    """One model call: B segments of at most T tokens (numpy, moved to the device in
    :func:`score_forest`).

    tokens int64 [B, T]; lengths int64 [B] or None (all T); valid int64 [n] flat
    positions (b * T + t) of the real tokens, or None (all); src int64 [B] rows of the
    previous level's kept states (of the caller's states at level 0); keep int64 [K]
    rows whose end state the next level needs, or None (all); g_pos, g_word, g_dst
    int64 [G]: position among the real tokens, target word and destination in the
    log-probability buffer of every gathered value."""

    tokens: np.ndarray
    lengths: Optional[np.ndarray]
    valid: Optional[np.ndarray]
    src: np.ndarray
    keep: Optional[np.ndarray]
    g_pos: np.ndarray
    g_word: np.ndarray
    g_dst: np.ndarray


def plan_segments(graph: ScoringGraph, eos: int, max_rows: int, max_tokens: int,
                  max_segment: int = 1) -> List[List[_Chunk]]:
    """Cut the forest of states of ``graph`` into segments and the segments into model
    calls, level by level.

    A segment is a chain of nodes, each (but the last) with exactly one child, at most
    ``max_segment`` long; it starts from the state after its parent segment (the
    caller's start state for a root). Segments of a level are sorted longest first and
    cut into calls of at most ``max_rows`` segments and ``max_tokens`` padded tokens
    (rows x longest). With ``max_segment = 1`` every call is one step (T = 1) over the
    nodes of one depth. Returns the calls (:class:`_Chunk`) of each segment level.
    """
    if max_rows < 1 or max_tokens < 1 or max_segment < 1:
        raise ValueError(f"max_rows, max_tokens, max_segment must be >= 1, got "
                         f"{max_rows}, {max_tokens}, {max_segment}")
    forest = graph.states
    sg = _Segments.of(forest, max_segment)
    plans: List[List[_Chunk]] = []
    kept_pos = np.full(len(sg.length), -1, dtype=np.int64)  # row of a segment's end state in its level's kept states
    for lev in range(int(sg.level.max(initial=-1)) + 1):
        segs = np.flatnonzero(sg.level == lev)
        segs = segs[np.argsort(-sg.length[segs], kind="stable")]
        chunks, i, n_kept = [], 0, 0
        while i < len(segs):
            t = int(sg.length[segs[i]])
            rows = min(max_rows, max(1, max_tokens // t), len(segs) - i)
            cs = segs[i:i + rows]
            i += rows
            src = forest.row[sg.start_node[cs]] if lev == 0 else kept_pos[sg.parent[cs]]
            keep_rows = np.flatnonzero(sg.has_child[cs])
            kept_pos[cs[keep_rows]] = n_kept + np.arange(len(keep_rows))
            n_kept += len(keep_rows)
            chunks.append(_chunk(graph, sg, cs, t, src, keep_rows, eos))
        plans.append(chunks)
    return plans


@dataclass(frozen=True)
class _Segments:
    """The forest's nodes cut into S segments (chains of single-child nodes):
    ``order`` int64 [N] nodes grouped by segment in chain order, ``first`` int64 [S + 1]
    each segment's start in ``order``, ``length``, ``level`` (segment depth),
    ``start_node`` and ``parent`` (parent segment, -1 for a root) int64 [S],
    ``has_child`` bool [S], and the forest's ``num_children`` int64 [N]."""

    order: np.ndarray
    first: np.ndarray
    length: np.ndarray
    level: np.ndarray
    start_node: np.ndarray
    parent: np.ndarray
    has_child: np.ndarray
    num_children: np.ndarray

    @staticmethod
    def of(forest: PrefixForest, max_segment: int) -> "_Segments":
        """The segments of at most ``max_segment`` nodes of ``forest``."""
        n, parent, offs, nchild = forest.num_nodes, forest.parent, forest.level_offsets, forest.num_children
        seg = np.empty(n, dtype=np.int64)
        pos = np.empty(n, dtype=np.int64)
        n_seg = forest.num_trees
        seg[:n_seg], pos[:n_seg] = np.arange(n_seg), 0
        level = np.zeros(n, dtype=np.int64)  # segment level (at most one segment per node)
        for d in range(1, len(offs) - 1):
            a, b = offs[d], offs[d + 1]
            p = parent[a:b]
            cont = (nchild[p] == 1) & (pos[p] + 1 < max_segment)
            s, q = seg[p], pos[p] + 1
            new = np.flatnonzero(~cont)
            level[n_seg:n_seg + len(new)] = level[s[new]] + 1
            s[new] = n_seg + np.arange(len(new))
            q[new] = 0
            seg[a:b], pos[a:b] = s, q
            n_seg += len(new)
        order = np.lexsort((pos, seg))
        length = np.bincount(seg, minlength=n_seg)
        first = np.cumsum(np.concatenate(([0], length)), dtype=np.int64)
        start_node = order[first[:-1]]
        seg_parent = np.where(parent[start_node] >= 0, seg[np.maximum(parent[start_node], 0)], -1)
        has_child = np.zeros(n_seg, dtype=bool)
        has_child[seg_parent[seg_parent >= 0]] = True
        return _Segments(order, first, length, level[:n_seg], start_node, seg_parent, has_child, nchild)


def _chunk(graph: ScoringGraph, sg: _Segments, cs: np.ndarray, t: int, src: np.ndarray, keep_rows: np.ndarray,
           eos: int) -> _Chunk:
    """The model call of the segments ``cs`` (the longest ``t`` tokens) from the
    state rows ``src``, keeping the end states of the rows ``keep_rows``; it gathers the
    (state, word) pairs of its nodes."""
    rows, lens = len(cs), sg.length[cs]
    nodes = sg.order[ranges(sg.first[cs], lens)]
    tokens = np.full((rows, t), eos, dtype=np.int64)
    r_idx = np.repeat(np.arange(rows), lens)
    t_idx = np.arange(len(nodes)) - np.repeat(np.cumsum(lens) - lens, lens)
    tokens[r_idx, t_idx] = graph.states.word[nodes]
    uniform = bool((lens == t).all())
    counts = graph.pair_start[nodes + 1] - graph.pair_start[nodes]
    pairs = ranges(graph.pair_start[nodes], counts)
    return _Chunk(
        tokens=tokens,
        lengths=None if uniform else lens.astype(np.int64),
        valid=None if uniform else r_idx * t + t_idx,
        src=src,
        keep=None if len(keep_rows) == rows else keep_rows,
        g_pos=np.repeat(np.arange(len(nodes)), counts),
        g_word=graph.pair_word[pairs],
        g_dst=pairs)


def frontier_rows(plans: List[List[_Chunk]]) -> int:
    """Most state rows :func:`score_forest` keeps between model calls (times the bytes
    of a state row: the frontier's memory) for the ``plans`` of :func:`plan_segments`:
    the kept end states of one segment level plus those of the next, maximised over
    levels. A model call adds at most two batches of rows (its start and end states)."""
    kept = [sum(len(c.src) if c.keep is None else len(c.keep) for c in chunks) for chunks in plans]
    return max((a + b for a, b in zip([0] + kept, kept)), default=0)


def _adaptive_pairs(model: LanguageModel) -> bool:
    """Whether the pairs go through the adaptive softmax's own pair scoring (a benchmark
    replaces this to time the full distribution per node instead)."""
    return model.output.kind == "adaptive"


def score_forest(model: LanguageModel, graph: ScoringGraph, states: State, eos: int,
                 max_rows: int = 256, max_tokens: int = 8192, max_segment: int = 1,
                 self_normalized: bool = False) -> np.ndarray:
    """NN costs of the graph's hypotheses, each state node read once:
    ``graph.costs`` of :func:`pair_log_probs` (same arguments).

    Returns:
        float64 [H] negated natural-log probabilities (words + ``</s>``), summed in
        float64 from float32 log-probabilities (negated sums of target logits when
        ``self_normalized``).
    """
    return graph.costs(pair_log_probs(model, graph, states, eos, max_rows, max_tokens, max_segment, self_normalized))


def pair_log_probs(model: LanguageModel, graph: ScoringGraph, states: State, eos: int,
                   max_rows: int = 256, max_tokens: int = 8192, max_segment: int = 1,
                   self_normalized: bool = False) -> np.ndarray:
    """:func:`pair_log_prob_tensor` on the host: float64 [P] numpy (same arguments)."""
    return pair_log_prob_tensor(model, graph, states, eos, max_rows, max_tokens, max_segment,
                                self_normalized).detach().cpu().numpy()


def pair_log_prob_tensor(model: LanguageModel, graph: ScoringGraph, states: State, eos: int,
                         max_rows: int = 256, max_tokens: int = 8192, max_segment: int = 1,
                         self_normalized: bool = False) -> torch.Tensor:
    """The log-probabilities of the graph's (state, word) pairs, with their gradient
    when it is enabled (MWER training: :mod:`.forest_grad`).

    Args:
        model: the LM (eval mode; for scoring, call under ``torch.inference_mode``).
        graph: from :func:`~.history_graph.scoring_graph`; ``graph.states.row`` indexes ``states``.
        states: start states, batch U, on the model's device.
        eos: id of ``</s>``.
        max_rows, max_tokens, max_segment: see :func:`plan_segments`.
        self_normalized: the target words' logits as log-probabilities (see the
            module docstring; the adaptive softmax is exact either way).
    Returns:
        float64 [P] tensor on the model's device: natural-log probabilities of the
        pairs (float32 values; target logits when ``self_normalized``).
    """
    device = states[0].device if states else next(model.parameters()).device
    buf = torch.zeros(graph.num_pairs, dtype=torch.float64, device=device)  # float64: the fused layer's values

    def dev(a):
        return torch.from_numpy(a).to(device, non_blocking=True)

    # adaptive or fused full softmax: deferred (fused without gradient: it writes into buffers); else per call
    fused = not self_normalized and model.output.fused() and not torch.is_grad_enabled()
    output = (_PendingOutput(model, buf, dev) if _adaptive_pairs(model) or fused
              else _PerCall(model, buf, dev, self_normalized, max_rows))
    prev = states
    for chunks in plan_segments(graph, eos, max_rows, max_tokens, max_segment):
        parts = []
        for c in chunks:
            # chains: lengths always (also where T = 1), so that a segment takes the same (packed)
            # path whatever the lengths of the others in its call (models.rows)
            lengths = None if max_segment == 1 else torch.from_numpy(
                c.lengths if c.lengths is not None else np.full(len(c.src), c.tokens.shape[1]))
            out = invariant_forward(model, dev(c.tokens), select_state(prev, dev(c.src)), lengths)
            feats = out.features.reshape(-1, 1, out.features.shape[-1])
            if c.valid is not None:
                feats = feats.index_select(0, dev(c.valid))
            output.add(feats, c)  # [R, 1, D]: the real tokens' features
            if c.keep is None:
                parts.append(out.state)
            elif len(c.keep):
                parts.append(select_state(out.state, dev(c.keep)))
        prev = cat_states(parts) if parts else prev
    output.flush()
    return buf


class _PerCall:
    """The pairs of each call scored at once: self-normalised, [G, 1, D] . W[word] as
    log P of each pair; else (``softmax_impl = "plain"``) log_softmax of the whole
    [rows, V] product per call (into a reused buffer), the pairs gathered from it."""

    def __init__(self, model: LanguageModel, buf: torch.Tensor, dev, self_normalized: bool, max_rows: int):
        self.model, self.buf, self.dev, self.self_normalized, self.max_rows = model, buf, dev, self_normalized, max_rows
        self.out: Optional[torch.Tensor] = None  # reused log-softmax output [rows, V]

    def add(self, feats: torch.Tensor, c: _Chunk) -> None:
        """Score the pairs of the call ``c`` from its features [R, 1, D] into ``buf``."""
        g_pos, g_word = self.dev(c.g_pos), self.dev(c.g_word)
        if self.self_normalized:
            logp = self.model.output.target_logits(feats.index_select(0, g_pos), g_word.unsqueeze(1)).squeeze(1)
        else:
            logits = self.model.output.logits(pad_rows(feats)).squeeze(1).float()  # padded: see models.rows
            if self.out is None or self.out.shape[0] < logits.shape[0] or self.out.shape[1] != logits.shape[1]:
                self.out = torch.empty(max(logits.shape[0], self.max_rows), logits.shape[1],
                                       dtype=torch.float32, device=logits.device)
            if torch.is_grad_enabled():  # (an out= buffer has no gradient)
                logp = torch.log_softmax(logits, -1)[g_pos, g_word]
            else:
                logp = torch.log_softmax(logits, -1, out=self.out[:logits.shape[0]])[g_pos, g_word]
        self.buf[self.dev(c.g_dst)] = logp.double()

    def flush(self) -> None:
        """Nothing is deferred."""


#: nodes whose output layer runs in one call (:class:`_PendingOutput`): the level widths
#: of a tree are often a few dozen nodes, where a [rows, D] x [D, V] product runs at
#: 2/3 of its speed at 256+ rows (``benchmarks/output_layer.py``)
OUTPUT_ROWS = 512


class _PendingOutput:
    """The exact output layer of :func:`score_forest` (adaptive or fused full softmax),
    deferred until :data:`OUTPUT_ROWS` rows are pending (see the module docstring),
    through :meth:`~nbest_rescore.models.output_layer.OutputLayer.log_probs_at`. The (node,
    word) pairs are shifted on the host; no device synchronisation."""

    def __init__(self, model: LanguageModel, buf: torch.Tensor, dev):
        self.model, self.buf, self.dev = model, buf, dev
        self.feats: List[torch.Tensor] = []
        self.pos: List[np.ndarray] = []
        self.word: List[np.ndarray] = []
        self.dst: List[np.ndarray] = []
        self.rows = 0

    def add(self, feats: torch.Tensor, c: _Chunk) -> None:
        """Queue the features [R, 1, D] of the call ``c`` and its pairs (rows of
        ``feats``, words, slots of ``buf``)."""
        self.feats.append(feats.squeeze(1))
        self.pos.append(c.g_pos + self.rows)
        self.word.append(c.g_word)
        self.dst.append(c.g_dst)
        self.rows += feats.shape[0]
        if self.rows >= OUTPUT_ROWS:
            self.flush()

    def flush(self) -> None:
        """Score the queued pairs into ``buf``."""
        if not self.feats:
            return
        h = self.feats[0] if len(self.feats) == 1 else torch.cat(self.feats)
        pos, word, dst = (np.concatenate(x) for x in (self.pos, self.word, self.dst))
        # adaptive: head per node, tails only where needed (pairs grouped on the host); full softmax:
        # log-sum-exp per node through vocabulary blocks, logits of the pairs only
        logp = self.model.output.log_probs_at(h, torch.from_numpy(pos), torch.from_numpy(word))
        self.buf[self.dev(dst)] = logp.double()
        self.feats, self.pos, self.word, self.dst, self.rows = [], [], [], [], 0
