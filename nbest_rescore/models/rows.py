"""Row counts that make a hypothesis' costs independent of the other rows of its batch.

A float32 matrix product on the CPU computes a row of its result differently when the
product has few rows: oneAPI MKL's sgemm (torch 2.13's CPU BLAS), measured on the
2-core AMD EPYC, gives other last bits for ``[M, K] x [K, N]`` with M in 1..3 (one
thread) or M in {1, 2, 3, 5, 6, 7, 9, 10, 11} (2 or 8 threads) than the same rows
inside a larger product, for every K, N tried (128..1024, 512..43k); with M = 4, 8 or
M >= 12 each row's result is the same whatever the other rows (and so for torch's
batched products with M >= 4). On a 2-core Intel Xeon with AVX-512 and AMX (the
machine of issue 35), the same library rounds ``x @ W.T`` (``F.linear``) differently
for M up to 2 (K = 64), 5 (K = 125-128), 8-10 (K = 200-256, or N = 3) and 15 (K = 512,
N = 4096), and with 2 threads for a square 1024 x 1024 weight even at M = 128: the
safe counts depend on the CPU and the shape. The rule below, at least 16 rows, holds
on both CPUs for every product of the models up to K = 256. Scoring N-best lists puts a hypothesis' tree nodes,
and the 1-best history that gives its start state, into batches whose size and
company depend on everything else being scored at the same time (the other documents
of a span, the other lists of a call); the last levels of a tree and of a history
are a few rows wide. So every product of a scoring call is given a safe number of
rows (:func:`safe_rows`: at least :data:`MIN_ROWS`, or a multiple of
:data:`ROW_MULTIPLE` below it), the real rows followed by copies of the first, dropped
afterwards: the costs of a hypothesis are then the same to the last bit whichever
hypotheses share its batches (``score --span-hyps``: a span of documents at a time
writes the whole-set run's costs byte for byte; ``tests/rescoring/test_batch_invariance.py``).
The extra rows cost little: at most 15 per small call.

The models avoid two more row-dependent roundings by computing them one row at a time:
a softmax over a non-last axis (the AMN's attention over memcells) and a
matrix-vector product (the short-span attention scores). Models whose rows depend on
the width of their call (the transformer, the neural cache) declare
``width_dependent`` and are read one length at a time; the neural cache also pads its
slots (:data:`~.cache.SLOT_MULTIPLE`) and, with ``row_invariant``, scores per slot.

Not covered: GPU products (cuBLAS picks kernels, including split-K, by shape; the
padding runs there too but batch invariance is not claimed), thread counts other
than the 1 and 2 measured, and on the Intel CPU above, layers wider than 256 inputs.
"""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["MIN_ROWS", "ROW_MULTIPLE", "pad_rows", "safe_rows"]

#: row count from which every count is safe (the largest count measured to change a
#: row's result: 11 on the AMD EPYC, 15 on the Intel Xeon for K <= 512; see the module docstring)
MIN_ROWS = 16
#: below :data:`MIN_ROWS`, the safe counts are the multiples of this (on the AMD EPYC 4
#: and 8 were safe too, on the Intel Xeon not: so none below 16)
ROW_MULTIPLE = 16


def safe_rows(n: int) -> int:
    """The fewest rows >= ``n`` with which a product rounds each row as in any larger
    one: ``n`` from :data:`MIN_ROWS` on, else ``n`` rounded up to a multiple of
    :data:`ROW_MULTIPLE` (1 .. 16 -> 16)."""
    return n if n >= MIN_ROWS else -(-max(n, 1) // ROW_MULTIPLE) * ROW_MULTIPLE


def pad_rows(t: Tensor) -> Tensor:
    """``t`` [N, ...] with copies of its first row appended up to ``safe_rows(N)``
    rows (``t`` itself when N is safe); the first N rows are ``t``'s.

    Raises:
        ValueError: ``t`` has no row (there is nothing to copy).
    """
    n = t.shape[0]
    if n < 1:
        raise ValueError("pad_rows: need at least one row to copy, got an empty tensor")
    m = safe_rows(n)
    if m == n:
        return t
    return torch.cat([t, t[:1].expand(m - n, *t.shape[1:])])
