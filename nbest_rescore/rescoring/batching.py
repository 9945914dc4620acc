"""Padding hypotheses into batches.

Each hypothesis w_1..w_n is read as inputs ``</s> w_1 .. w_n`` with targets
``w_1 .. w_n </s>`` (n + 1 positions), starting from the state of its utterance.
Hypotheses of many utterances are sorted by length and cut into batches of at most
``batch_size`` rows and ``max_tokens`` padded positions, so that padding stays small.
"""
from __future__ import annotations

from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from ..corpus import Batch, pad_batch
from ..models.base import LanguageModel, Output, State, cat_states, select_state
from ..models.rows import MIN_ROWS, pad_rows


def budget_batches(sizes: Sequence[Tuple[int, int]], max_rows: int, max_tokens: int) -> Iterator[List[int]]:
    """Consecutive batches of indices into ``sizes`` ((head, rest) lengths per row, e.g.
    (context, hypothesis) tokens; (length, 0) for one part), cut greedily in order: each
    batch's rows x (longest head + longest rest) <= ``max_tokens`` and at most
    ``max_rows`` rows, but at least one row (a row too wide alone is a batch of its
    own). Lengths sorted longest first give the least padding."""
    batch: List[int] = []
    head = rest = 0
    for i, (hi, ri) in enumerate(sizes):
        wide_h, wide_r = max(head, hi), max(rest, ri)
        if batch and (len(batch) >= max_rows or (len(batch) + 1) * (wide_h + wide_r) > max_tokens):
            yield batch
            batch, wide_h, wide_r = [], hi, ri
        batch.append(i)
        head, rest = wide_h, wide_r
    if batch:
        yield batch


def make_batches(seqs: Sequence[Sequence[int]], rows: Sequence[int], eos: int,
                 batch_size: int = 256, max_tokens: int = 8192, sort: bool = True) -> Iterator[Batch]:
    """Batches over all ``seqs`` (hypothesis ``i`` starts from state row ``rows[i]``),
    sorted by length (longest first) with ``sort``, each of at most ``batch_size`` rows
    and ``max_tokens`` = rows x padded length (a longer hypothesis forms its own batch;
    :func:`budget_batches`)."""
    order = np.argsort([-len(s) for s in seqs], kind="stable") if sort else np.arange(len(seqs))
    for batch in budget_batches([(len(seqs[i]) + 1, 0) for i in order], batch_size, max_tokens):
        current = [int(order[j]) for j in batch]
        yield pad_batch([seqs[j] for j in current], eos, [rows[j] for j in current], current)


def invariant_forward(model: LanguageModel, tokens: Tensor, state: State,
                      lengths: Optional[Tensor] = None) -> Output:
    """``model(tokens, state, lengths)`` with every product on at least
    :func:`~nbest_rescore.models.rows.safe_rows` rows, so that a row's features and end
    state do not depend on the other rows of the call (:mod:`~nbest_rescore.models.rows`).

    Without ``lengths`` the call is padded with copies of row 0 up to ``safe_rows``
    rows. With ``lengths`` copies of row 0 reading one token more than the longest row
    (a column appended) are added until the last real step has MIN_ROWS rows (at least
    one): a packed recurrence then has at least MIN_ROWS rows at every step and takes
    the packed path whatever the real lengths. A ``model.width_dependent`` model (the
    transformer, the neural cache) reads the rows of each length in a call of their own.

    Args:
        tokens: int64 [B, T]; state: batch-first state of batch B; lengths: int64 [B]
            (CPU) or None.
    Returns:
        :class:`~nbest_rescore.models.base.Output` of the B real rows: features
        [B, T, D], the state after ``lengths[b]`` tokens of row b (after T without
        lengths), the model's aux_loss (None where the rows are read by length).
    """
    b, t = tokens.shape
    if lengths is not None and model.width_dependent:
        return _by_length(model, tokens, state, lengths)
    if lengths is None:
        out = model(pad_rows(tokens), tuple(pad_rows(s) for s in state))
    else:
        lengths = lengths.cpu()
        # step t <= T runs on the real rows still reading (fewest at t = T) and the extra ones
        n_extra = max(1, MIN_ROWS - int((lengths == t).sum()))
        wide = torch.cat([tokens, tokens[:, -1:]], 1)
        extra = torch.zeros(n_extra, dtype=torch.int64, device=tokens.device)
        rows = torch.cat([torch.arange(b, device=tokens.device), extra])
        lens = torch.cat([lengths, torch.full((n_extra,), t + 1, dtype=lengths.dtype)])
        out = model(wide.index_select(0, rows), tuple(s.index_select(0, rows) for s in state), lens)
    return Output(out.features[:b, :t], tuple(s[:b] for s in out.state), out.aux_loss)


def _by_length(model: LanguageModel, tokens: Tensor, state: State, lengths: Tensor) -> Output:
    """:func:`invariant_forward` one call per distinct length L (tokens [:, :L], no
    padding), the outputs put back in row order (features zero past each row's length)."""
    b, t = tokens.shape
    lengths = lengths.cpu()
    feats: Optional[Tensor] = None
    parts, order = [], []
    for length in torch.unique(lengths).tolist():
        rows = torch.nonzero(lengths == length).squeeze(1)
        idx = rows.to(tokens.device)
        out = invariant_forward(model, tokens.index_select(0, idx)[:, :length], select_state(state, idx))
        if feats is None:
            feats = out.features.new_zeros((b, t, out.features.shape[-1]))
        feats[idx, :length] = out.features
        parts.append(out.state)
        order.append(rows)
    inverse = torch.argsort(torch.cat(order)).to(tokens.device)
    return Output(feats, select_state(cat_states(parts), inverse), None)
