"""Exact full-softmax output layer without the [N, V] matrix: the product in vocabulary
blocks with an online log-sum-exp.

Exact scoring and the cross-entropy loss need, per position n, only

    log P(w | h_n) = z_n[w] - logsumexp_v z_n[v],      z_n = W h_n + b   (natural log)

i.e. the log-sum-exp of each row and the logits of the few target words (one per
child in the prefix tree). ``log_softmax(h @ W.T + b)`` writes and re-reads the whole
[N, V] matrix (N = 2048, V = 43k: 352 MB), which costs as much as the product itself on
a CPU. Here the product runs over blocks of ``block`` vocabulary rows
(``torch.addmm`` into one reused [N, block] buffer, small enough to stay in cache);
each block's row max and sum of exponentials go into [n_blocks, N] tables that are
combined in float64 (the online log-sum-exp, one running max and sum per block;
:func:`blocked_logsumexp`), and the target logits are computed directly as ``h_n . W[w] + b[w]`` (O(D) per
target). Nothing of size [N, V] is kept. ``benchmarks/output_layer.py`` measures GFLOP/s
of the plain product, ``log_softmax`` of it and this path.

For training, :class:`FusedLinearCrossEntropy` does the same forward and recomputes
each block in the backward pass (softmax of the block minus the one-hot target, times
the upstream gradient), accumulating the gradients of h, W and b block by block, as
chunked / fused linear cross-entropy implementations do: four block products instead
of three full ones, and no [N, V] logits or gradient.

bfloat16: with ``weight`` in bfloat16 the block products run in bfloat16 (float32
accumulation inside the kernel, the block rounded to bfloat16 on output), the
log-sum-exp in float32 from those values, and the target logits in float32 from the
bfloat16 weights (so only the log-sum-exp carries the block's output rounding).

Everything is batched tensor work with no host synchronisation: the same code runs on
CUDA (where the plain product is usually as fast, see ``softmax_impl``).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..options import SOFTMAX_IMPLS  # noqa: F401  (fused: this module; plain: log_softmax / cross_entropy)

__all__ = ["DEFAULT_BLOCK", "SOFTMAX_IMPLS", "block_size", "blocked_logsumexp", "linear_target_logits",
           "fused_log_probs_at", "FusedLinearCrossEntropy", "fused_linear_cross_entropy"]

#: vocabulary rows per block: [N, 2048] float32 blocks measured fastest for N in 256..2048,
#: H in {256, 512} on a 2-core AMD EPYC (``benchmarks/output_layer.py``)
DEFAULT_BLOCK = 2048


def block_size(n_rows: int, vocab_size: int, block: Optional[int] = None) -> int:
    """Vocabulary rows per block: ``block`` if given, else :data:`DEFAULT_BLOCK`, never
    more than ``vocab_size``."""
    return max(1, min(vocab_size, block or DEFAULT_BLOCK))


def _block_logits(h: Tensor, weight: Tensor, bias: Optional[Tensor], block: Optional[int]):
    """``(s, e, z)`` for each block of vocabulary rows [s, e) (:func:`block_size` rows): the
    logits ``z = h @ weight[s:e].T (+ bias[s:e])`` written into one reused [N, block] buffer."""
    n, v = h.shape[0], weight.shape[0]
    bs = block_size(n, v, block)
    buf = h.new_empty((n, min(bs, v)))
    for s in range(0, v, bs):
        e = min(v, s + bs)
        z = buf[:, :e - s]
        yield s, e, (torch.mm(h, weight[s:e].t(), out=z) if bias is None
                     else torch.addmm(bias[s:e], h, weight[s:e].t(), out=z))


def blocked_logsumexp(h: Tensor, weight: Tensor, bias: Optional[Tensor], block: Optional[int] = None) -> Tensor:
    """``logsumexp(h @ weight.T + bias, -1)`` without the [N, V] matrix (the online
    log-sum-exp of the module docstring): per block k the row max m_k and s_k = sum
    exp(z - m_k) in float32, then log Z = M + log sum_k s_k exp(m_k - M) in float64
    (M = max_k m_k); exact to about 1e-7 nats beyond the logits' own rounding.

    Args:
        h: [N, D] features (any float dtype; cast to the weight's dtype).
        weight: [V, D] output embedding; bias: [V] or None.
        block: vocabulary rows per block (default :func:`block_size`).
    Returns:
        float64 [N] natural-log normalisers log Z_n.
    """
    n, v = h.shape[0], weight.shape[0]
    h = h.to(weight.dtype)
    bs = block_size(n, v, block)
    n_blocks = -(-v // bs)
    fbuf = None if h.dtype == torch.float32 else torch.empty((n, min(bs, v)), dtype=torch.float32, device=h.device)
    maxes = torch.empty((n_blocks, n), dtype=torch.float32, device=h.device)
    sums = torch.empty((n_blocks, n), dtype=torch.float32, device=h.device)
    for k, (s, e, z) in enumerate(_block_logits(h, weight, bias, block)):
        if z.dtype != torch.float32:  # bfloat16 products: the rest in float32
            z = fbuf[:, :e - s].copy_(z)
        torch.amax(z, 1, out=maxes[k])
        torch.sum(z.sub_(maxes[k].unsqueeze(1)).exp_(), 1, out=sums[k])
    top = maxes.amax(0)
    scaled = sums.double().mul_((maxes - top).double().exp_()).sum(0)
    return top.double() + scaled.log_()


def linear_target_logits(h: Tensor, weight: Tensor, bias: Optional[Tensor], targets: Tensor) -> Tensor:
    """``(h @ weight.T + bias)[n, targets[n]]`` for every row n, in float32, O(D) each.

    Args:
        h: [G, D]; weight: [V, D]; bias: [V] or None; targets: int64 [G].
    Returns:
        float32 [G] logits.
    """
    w = weight.index_select(0, targets).float()
    z = (h.float() * w).sum(-1)
    return z + bias.index_select(0, targets).float() if bias is not None else z


def fused_log_probs_at(h: Tensor, weight: Tensor, bias: Optional[Tensor], rows: Tensor, targets: Tensor,
                       block: Optional[int] = None) -> Tensor:
    """Exact ``log_softmax(h @ weight.T + bias)[rows[g], targets[g]]`` for every pair g.

    Args:
        h: [N, D] features; weight: [V, D]; bias: [V] or None.
        rows: int64 [G] in [0, N) (repeats allowed; several targets per row);
        targets: int64 [G] word ids, on h's device.
        block: vocabulary rows per block.
    Returns:
        float64 [G] natural-log probabilities (from float32 logits); the plain float32
        log-softmax differs by its own rounding (up to about 5e-7 nats per value at
        V = 43k).
    """
    log_z = blocked_logsumexp(h, weight, bias, block)
    z = linear_target_logits(h.index_select(0, rows), weight, bias, targets)
    return z.double().sub_(log_z.index_select(0, rows))


class FusedLinearCrossEntropy(torch.autograd.Function):
    """Per-position cross-entropy ``-log_softmax(h @ W.T + b)[n, t_n]`` with gradients,
    computed block by block (see the module docstring).

    forward(h [N, D], weight [V, D], bias [V] or None, targets int64 [N], block int)
    -> float32 [N] natural-log costs (nats). Backward recomputes each block's logits.
    """

    @staticmethod
    def forward(ctx, h, weight, bias, targets, block):
        log_z = blocked_logsumexp(h, weight, bias, block)
        nll = (log_z - linear_target_logits(h, weight, bias, targets).double()).float()
        ctx.save_for_backward(h, weight, bias if bias is not None else h.new_empty(0), targets, log_z)
        ctx.has_bias, ctx.block = bias is not None, block
        return nll

    @staticmethod
    def backward(ctx, grad):
        h, weight, bias, targets, log_z = ctx.saved_tensors
        bias = bias if ctx.has_bias else None
        v = weight.shape[0]
        g = grad.to(torch.float32)
        hw = h.to(weight.dtype)
        want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        want_b = ctx.has_bias and ctx.needs_input_grad[2]
        grad_h = torch.zeros(h.shape, dtype=torch.float32, device=h.device) if want_h else None
        grad_w = torch.empty(weight.shape, dtype=weight.dtype, device=weight.device) if want_w else None
        grad_b = torch.empty(v, dtype=bias.dtype, device=h.device) if want_b else None
        for s, e, z in _block_logits(hw, weight, bias, ctx.block):
            p = z.float().sub_(log_z.float().unsqueeze(1)).exp_().mul_(g.unsqueeze(1))  # dL/dz = g * softmax
            if want_h:
                grad_h.addmm_(p, weight[s:e].float())
            if want_w:
                torch.mm(p.t().to(weight.dtype), hw, out=grad_w[s:e])
            if want_b:
                torch.sum(p, 0, out=grad_b[s:e]) if grad_b.dtype == torch.float32 else grad_b[s:e].copy_(p.sum(0))
        # the one-hot part: dL/dz[n, t_n] -= g_n
        w_t = weight.index_select(0, targets).float()
        if want_h:
            grad_h.sub_(g.unsqueeze(1) * w_t)
        if want_w:
            grad_w.index_add_(0, targets, (-g.unsqueeze(1) * h.float()).to(weight.dtype))
        if want_b:
            grad_b.index_add_(0, targets, (-g).to(grad_b.dtype))
        return (grad_h.to(h.dtype) if want_h else None, grad_w, grad_b, None, None)


def fused_linear_cross_entropy(h: Tensor, weight: Tensor, bias: Optional[Tensor], targets: Tensor,
                               block: Optional[int] = None) -> Tensor:
    """Differentiable :class:`FusedLinearCrossEntropy`: float32 [N] ``-log P(targets[n] |
    h[n])`` for h [N, D], weight [V, D], bias [V] or None, targets int64 [N]; equal to
    ``F.cross_entropy(h @ W.T + b, targets, reduction="none")`` up to float32 rounding."""
    return FusedLinearCrossEntropy.apply(h, weight, bias, targets, block)
