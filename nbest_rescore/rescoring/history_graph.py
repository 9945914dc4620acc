"""What the LM reads of a prefix forest: exact histories, or histories merged on their
last words (the n-gram approximation of RNN LM histories of lattice rescoring).

Exact (``max_ngram_order`` None): the LM reads every node of the
:class:`~.prefix_forest.PrefixForest` once, from its parent's state.

Merged (``max_ngram_order`` K >= 2, Kaldi's ``--max-ngram-order``,
``steps/lmrescore_rnnlm_lat.sh``; Liu et al., ICASSP 2014): as in Kaldi's
``KaldiRnnlmDeterministicFst``, a history keeps at most K - 1 words, the start of the
utterance counting as one: within a start-state row, the nodes whose last K - 1 words
agree (prefixes of at least K - 1 words) are one history and share one LM state; shorter
prefixes stay apart. Each history is read once, from the state of the history of its
parent, and every hypothesis' words are scored from the states of its own histories, so
a hypothesis' cost is the sum along its path through the merged graph. The state a
merged history keeps is that of its first node in breadth-first order (the fewest
words, then the hypothesis first in the list): the path that reaches it first, as
Kaldi's ``KaldiRnnlmDeterministicFst`` keeps the state of the first path its
composition creates. The costs do not depend on the order of the hypotheses beyond
ties of that order. (Keeping instead the state of the first hypothesis in first-pass
order, best first, scored dev within 0.06 WER of this at every K: docs/scoring.md.)
K larger than the longest hypothesis merges nothing: the exact forest.

:class:`ScoringGraph` holds both: the forest of LM states (:attr:`~ScoringGraph.states`:
the LM positions read) and the (state, word) pairs whose log-probabilities make the costs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .prefix_forest import PrefixForest, make_forest, path_sums


@dataclass(frozen=True)
class ScoringGraph:
    """The LM states a forest of hypotheses is scored from, and the pairs scored.

    Attributes:
        hyps: the prefix forest of the hypotheses (:func:`~.prefix_forest.build_forest`), N nodes.
        states: the forest of LM states, S nodes (each read once: the LM positions);
            ``states.end_node`` [H] the state each hypothesis' ``</s>`` is scored from.
            ``hyps`` itself when exact.
        node_state: int64 [N] the state node of each prefix.
        pair_start: int64 [S + 1]: the (state, word) pairs scored after state s are
            ``pair_start[s] .. pair_start[s + 1] - 1``, ordered by word.
        pair_word: int64 [P] the word of each pair.
        node_pair: int64 [N] the pair giving log P(word of n | the parent's state), -1 for roots.
        end_pair: int64 [H] the pair giving log P(``</s>`` | the state of the hypothesis' end).
    """

    hyps: PrefixForest
    states: PrefixForest
    node_state: np.ndarray
    pair_start: np.ndarray
    pair_word: np.ndarray
    node_pair: np.ndarray
    end_pair: np.ndarray

    @property
    def num_pairs(self) -> int:
        return len(self.pair_word)

    def node_log_probs(self, pair_logp: np.ndarray) -> np.ndarray:
        """float64 [N]: log P(word of each prefix | its parent's state), 0 at roots, from
        ``pair_logp`` float64 [P] (nats, one per pair)."""
        return np.where(self.node_pair >= 0, pair_logp[np.maximum(self.node_pair, 0)], 0.0)

    def costs(self, pair_logp: np.ndarray) -> np.ndarray:
        """float64 [H] hypothesis costs (-log P of the words and ``</s>``, nats) from
        ``pair_logp`` float64 [P]; summed along each hypothesis' path in the order of
        the exact forest (the costs of exact scoring do not depend on the graph code)."""
        return -(path_sums(self.hyps, self.node_log_probs(pair_logp)) + pair_logp[self.end_pair])


def scoring_graph(forest: PrefixForest, eos: int, max_ngram_order: Optional[int] = None) -> ScoringGraph:
    """The :class:`ScoringGraph` of ``forest`` (roots reading ``eos``): exact for
    ``max_ngram_order`` None or 0 (Kaldi's "no limit"), else histories merged on their
    last ``max_ngram_order - 1`` words (see the module docstring). Raises ValueError for
    a negative order or 1."""
    if max_ngram_order == 0:
        max_ngram_order = None
    if max_ngram_order is not None and max_ngram_order < 2:
        raise ValueError(f"max_ngram_order must be >= 2 (a history of at least one word), got {max_ngram_order}")
    longest = len(forest.level_offsets) - 2
    if max_ngram_order is None or max_ngram_order - 1 >= longest:
        return _with_pairs(forest, forest, np.arange(forest.num_nodes, dtype=np.int64), eos)
    key = _history_keys(forest, max_ngram_order - 1)
    states, state_of_key = _state_forest(forest, key)
    return _with_pairs(forest, states, state_of_key[key], eos)


def _history_keys(forest: PrefixForest, words: int) -> np.ndarray:
    """int64 [N]: one id per history: prefixes of at least ``words`` words by (row, last
    ``words`` words), shorter ones each their own. One np.unique per history word."""
    depth, parent, word = forest.depth, forest.parent, forest.word
    span = int(word.max(initial=0)) + 1
    suffix = word.copy()  # id of the last j words (nodes of depth >= j)
    for j in range(2, words + 1):
        deep = np.flatnonzero(depth >= j)
        _, inv = np.unique(suffix[parent[deep]] * span + word[deep], return_inverse=True)
        suffix = np.full(forest.num_nodes, -1, dtype=np.int64)
        suffix[deep] = inv.reshape(-1)
    deep = depth >= words
    _, merged = np.unique(forest.row[deep] * (int(suffix[deep].max(initial=0)) + 1) + suffix[deep],
                          return_inverse=True)
    key = np.empty(forest.num_nodes, dtype=np.int64)
    key[deep] = merged.reshape(-1)
    key[~deep] = int(merged.max(initial=-1)) + 1 + np.arange(int((~deep).sum()))
    return key


def first_hypothesis(forest: PrefixForest) -> np.ndarray:
    """int64 [N]: the first hypothesis (in the order given) whose path holds each node;
    one numpy pass per depth, from the deepest."""
    h = len(forest.end_node)
    first = np.full(forest.num_nodes, h, dtype=np.int64)
    np.minimum.at(first, forest.end_node, np.arange(h, dtype=np.int64))
    offs = forest.level_offsets
    for d in range(len(offs) - 2, 0, -1):
        a, b = offs[d], offs[d + 1]
        np.minimum.at(first, forest.parent[a:b], first[a:b])
    return first


def _state_forest(forest: PrefixForest, key: np.ndarray):
    """(the forest of LM states, int64 [K] the state node of each history ``key``): each
    history read once, by its first node in breadth-first order (fewest words, then the
    first hypothesis), from the state of that node's parent's history."""
    n_keys = int(key.max()) + 1
    order = np.lexsort((first_hypothesis(forest), forest.depth, key))
    lead = np.ones(len(order), dtype=bool)
    lead[1:] = key[order[1:]] != key[order[:-1]]
    rep = np.empty(n_keys, dtype=np.int64)
    rep[key[order[lead]]] = order[lead]  # the prefix whose state each history keeps
    src = np.where(forest.parent[rep] >= 0, key[np.maximum(forest.parent[rep], 0)], -1)
    return _renumber(forest, rep, src, _levels(src), key)


def _levels(src: np.ndarray) -> np.ndarray:
    """int64 [K]: the depth of each node in the forest of parents ``src`` (-1: a root),
    by pointer jumping (O(log depth) numpy passes). A history's parent has fewer words,
    so ``src`` has no cycle."""
    up, dist = src.copy(), (src >= 0).astype(np.int64)
    live = np.flatnonzero(up >= 0)
    while len(live):
        a = up[live]
        dist[live], up[live] = dist[live] + dist[a], up[a]  # (right side read before the writes)
        live = live[up[live] >= 0]
    return dist


def _renumber(forest: PrefixForest, rep: np.ndarray, src: np.ndarray, level: np.ndarray, key: np.ndarray):
    """The forest of states numbered breadth-first, a level's nodes by (parent, word)
    (see :func:`_state_forest`); and the state node of each history."""
    new = np.empty(len(rep), dtype=np.int64)
    word = forest.word[rep]
    offsets, parents, words, roots = [0], [], [], None
    for lev in range(int(level.max(initial=0)) + 1):
        ks = np.flatnonzero(level == lev)
        if lev == 0:
            ks = ks[np.argsort(forest.row[rep[ks]], kind="stable")]
            roots = forest.row[rep[ks]]
            parent = np.full(len(ks), -1, dtype=np.int64)
        else:
            parent = new[src[ks]]
            srt = np.lexsort((word[ks], parent))
            ks, parent = ks[srt], parent[srt]
        new[ks] = offsets[-1] + np.arange(len(ks))
        parents.append(parent)
        words.append(word[ks])
        offsets.append(offsets[-1] + len(ks))
    states = make_forest(np.concatenate(parents), np.concatenate(words), roots, np.asarray(offsets, dtype=np.int64),
                         new[key[forest.end_node]], forest.num_list_tokens)
    return states, new


def _with_pairs(forest: PrefixForest, states: PrefixForest, node_state: np.ndarray, eos: int) -> ScoringGraph:
    """The :class:`ScoringGraph` with its (state, word) pairs: the word of every
    non-root prefix after its parent's state, ``</s>`` after each hypothesis' last
    state; each distinct pair once."""
    n_roots = forest.num_trees
    src = np.concatenate([node_state[forest.parent[n_roots:]], states.end_node])
    word = np.concatenate([forest.word[n_roots:], np.full(len(states.end_node), eos, dtype=np.int64)])
    span = int(max(word.max(initial=0), eos)) + 1
    uniq, inv = np.unique(src * span + word, return_inverse=True)
    inv = inv.reshape(-1)
    pair_start = np.searchsorted(uniq // span, np.arange(states.num_nodes + 1)).astype(np.int64)
    node_pair = np.full(forest.num_nodes, -1, dtype=np.int64)
    node_pair[n_roots:] = inv[:forest.num_nodes - n_roots]
    return ScoringGraph(forest, states, node_state, pair_start, uniq % span, node_pair,
                        inv[forest.num_nodes - n_roots:])
