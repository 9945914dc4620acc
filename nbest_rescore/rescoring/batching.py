"""Padding hypotheses into batches.

Each hypothesis w_1..w_n is read as inputs ``</s> w_1 .. w_n`` with targets
``w_1 .. w_n </s>`` (n + 1 positions), starting from the state of its utterance.
Hypotheses of many utterances are sorted by length and cut into batches of at most
``batch_size`` rows and ``max_tokens`` padded positions, so that padding stays small.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, List, Sequence

import numpy as np
import torch
from torch import Tensor


@dataclass
class Batch:
    """inputs, targets: int64 [B, T]; lengths: int64 [B] (n + 1 per hypothesis);
    rows: int64 [B] index of each hypothesis's start state; items: int64 [B] position
    of each hypothesis in the caller's flat list."""

    inputs: Tensor
    targets: Tensor
    lengths: Tensor
    rows: Tensor
    items: Tensor


def pad_batch(seqs: Sequence[Sequence[int]], eos: int, rows, items) -> Batch:
    """Pad the id sequences (without ``</s>``) into one :class:`Batch`."""
    lengths = np.fromiter((len(s) + 1 for s in seqs), dtype=np.int64, count=len(seqs))
    t = int(lengths.max())
    inp = np.zeros((len(seqs), t), dtype=np.int64)
    tgt = np.zeros_like(inp)
    inp[:, 0] = eos
    for b, s in enumerate(seqs):
        n = len(s)
        if n:
            inp[b, 1:n + 1] = s
            tgt[b, :n] = s
        tgt[b, n] = eos
    return Batch(torch.from_numpy(inp), torch.from_numpy(tgt), torch.from_numpy(lengths),
                 torch.as_tensor(np.asarray(rows, dtype=np.int64)),
                 torch.as_tensor(np.asarray(items, dtype=np.int64)))


def make_batches(seqs: Sequence[Sequence[int]], rows: Sequence[int], eos: int,
                 batch_size: int = 256, max_tokens: int = 8192, sort: bool = True) -> Iterator[Batch]:
    """Batches over all ``seqs`` (hypothesis ``i`` starts from state row ``rows[i]``).

    With ``sort`` the hypotheses are ordered by length (longest first) before being cut;
    a batch never exceeds ``batch_size`` rows nor ``max_tokens`` = rows x padded length
    (a single longer hypothesis still forms its own batch).
    """
    order = np.argsort([-len(s) for s in seqs], kind="stable") if sort else np.arange(len(seqs))
    current: List[int] = []
    width = 0
    for i in order:
        w = len(seqs[i]) + 1
        new_width = max(width, w)
        if current and (len(current) + 1 > batch_size or (len(current) + 1) * new_width > max_tokens):
            yield pad_batch([seqs[j] for j in current], eos, [rows[j] for j in current], current)
            current, new_width = [], w
        current.append(int(i))
        width = new_width
    if current:
        yield pad_batch([seqs[j] for j in current], eos, [rows[j] for j in current], current)
