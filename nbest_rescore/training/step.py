"""The maths of one training step (``000`` section 5.1): the loss of a BPTT segment,
the update, the optimiser and its learning rate. Nothing here reads back to the host,
so that :mod:`.cuda_graph` can record a step; the pass that calls it is :mod:`.passes`'.
"""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional

import torch
from torch import Tensor

from ..corpus import run_segment
from ..errors import DataError
from ..models.base import detach_state


@dataclass(frozen=True)
class StepOptions:
    """Per-step settings: ``clip`` the gradient-norm bound, ``self_norm_weight`` alpha
    of the self-normalisation regulariser, ``autocast_dtype`` None (float32) or
    ``torch.bfloat16`` (CUDA autocast; weights and optimiser stay float32)."""

    clip: float = 10.0
    self_norm_weight: float = 0.0
    autocast_dtype: Optional[torch.dtype] = None


class SegmentLoss(NamedTuple):
    """The training loss of one BPTT segment (all device tensors, nothing read back).

    loss: scalar to minimise: mean cross-entropy per real token + the model's
        auxiliary loss + ``self_norm_weight * mean_t (log Z_t)^2``.
    nll: summed cross-entropy of the segment's real tokens (nats, detached scalar).
    abs_log_z: summed |log Z_t| over the real tokens (detached scalar), Z_t the
        softmax normaliser; only computed with ``self_norm_weight > 0`` (else None).
    num_tokens: number of real (unpadded) target tokens (float scalar tensor).
    aux: the model's auxiliary loss (an AMN's weighted ITL) times ``num_tokens``
        (detached scalar, summed over segments into the learning curve's ``aux_loss``),
        None when the model has none.
    """

    loss: Tensor
    nll: Tensor
    abs_log_z: Optional[Tensor]
    num_tokens: Tensor
    aux: Optional[Tensor] = None


def segment_loss(model, features: Tensor, targets: Tensor, mask: Tensor, aux: Optional[Tensor] = None,
                 self_norm_weight: float = 0.0, loss_scale: Optional[float] = None,
                 weight: Optional[Tensor] = None) -> SegmentLoss:
    """Loss of a segment from the model's features, without host synchronisation.

    On CUDA every position goes through the output layer (padding masked afterwards:
    no host synchronisation); on the CPU only the real positions do. ``self_norm_weight``
    alpha > 0 adds the variance regulariser of Chen et al. 2016 (``000`` section 3.5,
    ref. [45]; full softmax only) of :class:`SegmentLoss`, log Z_t = logsumexp of the
    logits at t.

    Args:
        features: float [B, T, D] (from :func:`run_segment`); targets: int64 [B, T];
        mask: bool [B, T] (False = padding); aux: scalar auxiliary loss or None.
        loss_scale: None: the token sums are divided by this segment's real tokens;
            else multiplied by ``loss_scale`` (data-parallel training: K / the real
            tokens of the global segment, so that DDP's average over the K ranks is
            the mean over the global batch; ``aux`` is a mean already and stays).
    Raises:
        DataError: ``self_norm_weight > 0`` with the adaptive softmax (already
            normalised).
    """
    maskf = mask.to(torch.float32)
    ntok = maskf.sum()
    denom = ntok.clamp(min=1.0)
    abs_log_z = None
    if self_norm_weight > 0:
        if getattr(model, "adaptive", None) is not None:
            raise DataError("optim.self_norm_weight > 0 needs model_config.output: softmax "
                            "(the adaptive softmax is normalised already); set it to 0")
        logits = model.logits(features).float()
        log_z = torch.logsumexp(logits, -1)  # [B, T]
        nll_tok = log_z - logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        abs_log_z = (log_z.detach().abs() * maskf).sum()
    elif features.device.type == "cpu":  # no device to wait for: skip the padding's output layer
        real = mask.reshape(-1).nonzero().squeeze(1)
        feats = features.reshape(-1, features.shape[-1]).index_select(0, real)
        nll_tok = -model.target_log_probs(feats, targets.reshape(-1).index_select(0, real))
        maskf = torch.ones_like(nll_tok)
        if weight is not None:
            weight = weight.reshape(-1).index_select(0, real)
    else:
        nll_tok = -model.target_log_probs(features, targets)
    nll = (nll_tok * maskf).sum()
    objective = nll if weight is None else (nll_tok * maskf * weight).sum()  # (data.weights: per-source weights)
    loss = objective / denom if loss_scale is None else objective * loss_scale
    if aux is not None:
        loss = loss + aux
    if self_norm_weight > 0:
        sq = (log_z ** 2 * maskf).sum()
        loss = loss + self_norm_weight * (sq / denom if loss_scale is None else sq * loss_scale)
    return SegmentLoss(loss, nll.detach(), abs_log_z, ntok, None if aux is None else aux.detach() * ntok)


def segment_forward(model, state, inputs: Tensor, targets: Tensor, mask: Tensor, reset: Tensor,
                    aligned: bool = False, self_norm_weight: float = 0.0, loss_scale: Optional[float] = None,
                    weight: Optional[Tensor] = None):
    """:func:`run_segment` then :func:`segment_loss`: (state after the segment,
    :class:`SegmentLoss`). The forward that data-parallel training wraps in DDP."""
    model.token_mask(mask)
    feats, state, aux = run_segment(model, state, inputs, reset, aligned)
    extra = model.target_aux_loss(targets)  # (an auxiliary loss that needs the targets, e.g. the AMN's experts ITL)
    if extra is not None:
        aux = extra if aux is None else aux + extra
    model.token_mask(None)
    return state, segment_loss(model, feats, targets, mask, aux, self_norm_weight, loss_scale, weight)


def train_step(model, opt, state, inputs: Tensor, targets: Tensor, mask: Tensor, reset: Tensor,
               clip: float, self_norm_weight: float = 0.0, aligned: bool = False,
               autocast_dtype: Optional[torch.dtype] = None, loss_scale: Optional[float] = None,
               forward: Optional[Callable] = None, weight: Optional[Tensor] = None):
    """One BPTT update: run the segment from ``state`` (cut from the graph), compute
    :func:`segment_loss`, back-propagate, clip the gradient norm to ``clip``, step.
    Nothing is read back to the host when ``aligned`` (see :func:`run_segment`).

    Args:
        inputs, targets: int64 [B, T]; mask, reset: bool [B, T] (mask False: padding;
            reset True: a document starts there, the state is reset before that input).
        autocast_dtype: None, or ``torch.bfloat16`` for mixed precision under
            ``torch.autocast`` on the inputs' device type.
        loss_scale: see :func:`segment_loss`.
        forward: :func:`segment_forward` of ``model`` wrapped in DDP (gradients averaged
            before clipping, :meth:`~.distributed.World.wrap`); None: ``model``.
        weight: float32 [B, T], each target's objective weight (``data.weights``): the
            loss sums weight * cross-entropy over the real tokens (over their count, as
            without weights); the reported NLL stays unweighted. None: all 1.
    Returns:
        (state after the segment, :class:`SegmentLoss`). A segment without real
        tokens gives zero loss and gradients.
    """
    # (no autocast weight cache: it must not outlive a captured CUDA graph's region)
    ctx = (torch.autocast(inputs.device.type, dtype=autocast_dtype, cache_enabled=False) if autocast_dtype is not None
           else contextlib.nullcontext())
    fwd = forward if forward is not None else functools.partial(segment_forward, model)
    with ctx:
        state, step = fwd(detach_state(state), inputs, targets, mask, reset, aligned, self_norm_weight, loss_scale,
                          weight)
    opt.zero_grad(set_to_none=True)
    step.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    return state, step


def make_optimizer(model, o, capturable: bool = False) -> torch.optim.Optimizer:
    """The optimiser of ``o`` (:class:`~nbest_rescore.config.OptimConfig`) over the
    model's parameters; Adam/AdamW use torch's fused kernels (CUDA and CPU). With
    ``capturable`` (CUDA only) the learning rate is a device tensor and the update
    can be recorded in a CUDA graph (:mod:`.cuda_graph`)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if o.optimizer == "sgd":
        return torch.optim.SGD(params, lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
    cls = torch.optim.AdamW if o.optimizer == "adamw" else torch.optim.Adam
    if capturable and params and params[0].is_cuda:
        lr = torch.tensor(float(o.lr), device=params[0].device)
        return cls(params, lr=lr, weight_decay=o.weight_decay, fused=True, capturable=True)
    try:  # fused kernels on CUDA and (torch >= 2.4) on the CPU: 6x faster than the loop there
        return cls(params, lr=o.lr, weight_decay=o.weight_decay, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return cls(params, lr=o.lr, weight_decay=o.weight_decay)


def set_lr(opt, lr: float) -> None:
    """Set every parameter group's learning rate ``lr`` (per update; in place when it
    is a tensor, so a captured CUDA graph sees it; no host synchronisation)."""
    for g in opt.param_groups:
        if isinstance(g["lr"], Tensor):
            g["lr"].fill_(lr)
        else:
            g["lr"] = lr


def perplexity(nll_per_token: float) -> float:
    """exp of a mean NLL (nats), capped at e^50 (the first steps' losses)."""
    return math.exp(min(50.0, nll_per_token))
