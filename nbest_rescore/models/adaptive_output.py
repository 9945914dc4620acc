"""Exact log-probabilities of chosen (row, target) pairs through the adaptive softmax,
each row's head computed once and each tail cluster only where a target needs it.

torch's :class:`~torch.nn.AdaptiveLogSoftmaxWithLoss` offers the full distribution
(``log_prob``: the head and every tail cluster for every row, O(V) per row) or one
target per row (``forward``: the head once per target). Prefix-tree scoring needs
something in between: a node (one feature row) predicts all of its children's words
and ``</s>`` where a hypothesis ends, several targets per row, most of them in the head.
:func:`adaptive_log_probs_at` computes for rows ``h`` [N, D] and pairs (row, word):

* the head's log-softmax once per row (O(D (c_0 + n_clusters)));
* a head word: its head log-probability, nothing more;
* a word of tail cluster i: ``head_logp[cluster i's entry] + log_softmax(tail_i(h))[word -
  cutoff_i]``, the tail projection run once on the distinct rows that have a target in
  cluster i (a row with no such target never pays for it).

One tail call per cluster (a Python loop over the clusters, not over the pairs); the
values equal ``log_prob(h)`` gathered at the pairs up to float rounding. The pairs are
grouped by cluster where ``rows`` and ``targets`` live: given on the CPU with features on
a GPU (as prefix-tree scoring does, its plan is numpy), the grouping's data-dependent
sizes (``nonzero``, ``unique``) never wait for the device.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .rows import pad_rows

__all__ = ["adaptive_log_probs_at", "cluster_of"]


def cluster_of(adaptive: nn.AdaptiveLogSoftmaxWithLoss, targets: Tensor) -> Tensor:
    """int64 [...] 0 for a head word, i + 1 for a word of tail cluster i."""
    bounds = torch.tensor(adaptive.cutoffs[:-1], dtype=targets.dtype, device=targets.device)
    return torch.bucketize(targets, bounds, right=True)


def adaptive_log_probs_at(adaptive: nn.AdaptiveLogSoftmaxWithLoss, features: Tensor, rows: Tensor,
                          targets: Tensor) -> Tensor:
    """log P(targets[g] | features[rows[g]]) for every pair g (see the module docstring).

    Args:
        adaptive: the output layer (float, cast or int8 dynamically quantised).
        features: [N, D] inputs of the output layer (after dropout / projection).
        rows: int64 [G] row of ``features`` of each pair (any order, repeats allowed).
        targets: int64 [G] word ids in [0, V). ``rows`` and ``targets`` on one device,
            the features' or the CPU (see the module docstring).
    Returns:
        float32 [G]; the log-softmaxes are taken in float32 whatever the features' dtype.
        Each product runs on at least :func:`~.rows.safe_rows` rows (copies of the
        first pad it), so a pair's value does not depend on the other rows.
    """
    if features.dim() != 2 or rows.shape != targets.shape or rows.dim() != 1:
        raise ValueError(f"expected features [N, D] and rows, targets [G], got {tuple(features.shape)}, "
                         f"{tuple(rows.shape)}, {tuple(targets.shape)}")
    if rows.numel() == 0:
        return torch.zeros(0, dtype=torch.float32, device=features.device)
    dev = features.device
    param = next(adaptive.parameters(), None)  # None: int8 modules (they take float32)
    if param is not None and features.dtype != param.dtype:
        features = features.to(param.dtype)  # e.g. a bfloat16 output layer after float32 recurrence
    cuts, shortlist = adaptive.cutoffs, adaptive.shortlist_size
    # every product on safe_rows rows: a row's values then do not depend on the others (.rows)
    head_logp = torch.log_softmax(adaptive.head(pad_rows(features)).float(), dim=-1)  # [N', c_0 + n_clusters]
    cluster = cluster_of(adaptive, targets)
    # the head entry each pair reads: its word (head) or its cluster's entry (tail)
    col = torch.where(cluster == 0, targets, cluster + (shortlist - 1))
    out = head_logp[rows.to(dev), col.to(dev)]
    for i in range(len(cuts) - 1):
        sel = torch.nonzero(cluster == i + 1).squeeze(1)
        if sel.numel() == 0:
            continue
        need, inv = torch.unique(rows.index_select(0, sel), return_inverse=True)
        # torch's own log_softmax, as in log_prob (logit - logsumexp is no faster on the CPU and
        # rounds differently)
        tail_in = pad_rows(features.index_select(0, need.to(dev)))
        tail_logp = torch.log_softmax(adaptive.tail[i](tail_in).float(), dim=-1)
        word = targets.index_select(0, sel) - cuts[i]
        out.index_add_(0, sel.to(dev), tail_logp[inv.to(dev), word.to(dev)])
    return out
