"""Prefix trees of N-best hypotheses: one node per distinct prefix.

:func:`build_forest` makes one tree per start-state row of the hypotheses handed to a
scorer: node = a distinct prefix ``w_1 .. w_k``, root = the empty prefix; a
hypothesis' cost is minus the sum of log P(word | parent prefix) along its path
(:func:`path_sums`) and log P(``</s>`` | its prefix). This is the batching of ``000``
chapter 5 (hypotheses of an utterance share a start state) with every shared prefix
computed once (2.7x fewer positions than the lists on abc-nbest dev;
docs/performance.md). What the LM reads of a forest: :mod:`.history_graph`; how:
:mod:`.prefix_tree`.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import List, Sequence

import numpy as np


@dataclass(frozen=True)
class PrefixForest:
    """Prefix trees over hypotheses, nodes numbered breadth-first.

    Nodes of depth d (prefixes of d words) are contiguous, ordered by (parent, word);
    so the children of a node are contiguous and parents come before their children.

    Attributes:
        parent: int64 [N] parent node, -1 for roots.
        word: int64 [N] the token the LM reads at the node: its last word, ``</s>`` for
            roots.
        row: int64 [N] start-state row of the node's tree.
        level_offsets: int64 [D + 2] nodes of depth d are ``level_offsets[d] ..
            level_offsets[d + 1] - 1`` (D = longest hypothesis).
        child_start: int64 [N + 1] children of node n are ``child_start[n] ..
            child_start[n + 1] - 1``.
        end_node: int64 [H] node at which each hypothesis ends (its full prefix; in a
            forest of merged histories, :mod:`.history_graph`, the node of its last state).
        num_list_tokens: positions the hypotheses hold one by one (sum of n + 1).
    """

    parent: np.ndarray
    word: np.ndarray
    row: np.ndarray
    level_offsets: np.ndarray
    child_start: np.ndarray
    end_node: np.ndarray
    num_list_tokens: int

    @property
    def num_nodes(self) -> int:
        """Tree nodes = LM input positions when scoring with the forest."""
        return len(self.parent)

    @property
    def num_trees(self) -> int:
        return int(self.level_offsets[1])

    @property
    def depth(self) -> np.ndarray:
        """int64 [N] number of words of each node's prefix."""
        return np.repeat(np.arange(len(self.level_offsets) - 1), np.diff(self.level_offsets))

    @property
    def num_children(self) -> np.ndarray:
        return np.diff(self.child_start)


def build_forest(seqs: Sequence[Sequence[int]], rows: Sequence[int], eos: int) -> PrefixForest:
    """The :class:`PrefixForest` of ``seqs`` ([H] word-id sequences without ``</s>``;
    empty ones and duplicates allowed, duplicates end at the same node), one tree per
    distinct start-state row of ``rows`` [H]; roots read ``eos``. One numpy pass per
    depth (no Python loop over tokens apart from flattening the sequences)."""
    h = len(seqs)
    if len(rows) != h:
        raise ValueError(f"{h} hypotheses but {len(rows)} start rows")
    lens = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=h)
    flat = np.fromiter(chain.from_iterable(seqs), dtype=np.int64, count=int(lens.sum()))
    starts = np.cumsum(lens) - lens
    span = int(max(flat.max(initial=0), eos)) + 1
    roots, node_of = np.unique(np.asarray(rows, dtype=np.int64), return_inverse=True)
    node_of = node_of.astype(np.int64).reshape(-1)
    parents: List[np.ndarray] = [np.full(len(roots), -1, dtype=np.int64)]
    words: List[np.ndarray] = [np.full(len(roots), eos, dtype=np.int64)]
    offsets = [0, len(roots)]
    end_node = node_of.copy()  # empty hypotheses end at their root
    active = np.flatnonzero(lens > 0)
    depth = 1
    while len(active):
        key = node_of[active] * span + flat[starts[active] + depth - 1]
        uniq, inv = np.unique(key, return_inverse=True)
        node_of[active] = offsets[-1] + inv.reshape(-1)
        parents.append(uniq // span)
        words.append(uniq % span)
        offsets.append(offsets[-1] + len(uniq))
        done = lens[active] == depth
        end_node[active[done]] = node_of[active[done]]
        active = active[~done]
        depth += 1
    return make_forest(np.concatenate(parents), np.concatenate(words), roots, np.asarray(offsets, dtype=np.int64),
                       end_node, int(lens.sum()) + h)


def make_forest(parent: np.ndarray, word: np.ndarray, root_rows: np.ndarray, level_offsets: np.ndarray,
                end_node: np.ndarray, num_list_tokens: int) -> PrefixForest:
    """The :class:`PrefixForest` of nodes numbered breadth-first (``parent``, ``word``
    int64 [N], ``level_offsets`` [D + 2] as its attributes; the nodes of a level ordered
    by (parent, word)), ``root_rows`` int64 [R] the start-state rows of the roots:
    the children and every node's row are derived here."""
    n_roots = len(root_rows)
    child_start = n_roots + np.searchsorted(parent[n_roots:], np.arange(len(parent) + 1)).astype(np.int64)
    row = np.empty(len(parent), dtype=np.int64)
    row[:n_roots] = root_rows
    for d in range(1, len(level_offsets) - 1):
        a, b = level_offsets[d], level_offsets[d + 1]
        row[a:b] = row[parent[a:b]]
    return PrefixForest(parent, word, row, level_offsets, child_start, end_node, num_list_tokens)


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + c)`` for each (s, c)."""
    total = int(counts.sum())
    base = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    return base + np.arange(total, dtype=np.int64)


def path_sums(forest: PrefixForest, node_logp: np.ndarray) -> np.ndarray:
    """float64 [H]: the sum of ``node_logp`` (float64 [N], e.g. log P(word of n | parent
    prefix) in nats, 0 for roots) along each hypothesis' path from its root to its
    end node, one numpy pass per depth."""
    cum = node_logp.copy()
    offs = forest.level_offsets
    for d in range(1, len(offs) - 1):
        a, b = offs[d], offs[d + 1]
        cum[a:b] += cum[forest.parent[a:b]]
    return cum[forest.end_node]
