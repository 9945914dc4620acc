"""Corpus-level training loop (``000`` section 5.1), as docs/training.md ("What
``train`` does") describes: carried state over aligned streams, the schedule of
:mod:`.schedule`, epoch checkpoints of :mod:`.checkpointing`, DDP of :mod:`.distributed`.
The text is read from a memory-mapped token store (:mod:`.data`); a backward model
reads its documents reversed (``data.max_words`` takes its prefix of the text before
the reversal).

The steps that depend on the model family (ids of the words, the model, its outputs)
are a family object's (:class:`WordFamily` for the models of the registry,
:class:`~.hf_train.HfFamily` for ``model: hf``); the loop, the streams, the schedule,
the budgets, validation and resuming are shared.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import enum
import functools
import logging
import math
import time
import weakref
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from ..config import HF_MODEL, TrainConfig, parse_interval, validate_train_config
from ..corpus import Documents, StoreStreams, deal, nll_of_streams, release_heap, run_segment, segment_tokens
from ..errors import DataError
from ..models import build_model
from ..models.base import default_adaptive_cutoffs, detach_state
from ..models.registry import config_from_dict, get_model_class
from ..progress import Progress
from ..vocab import Vocabulary
from . import checkpointing, distributed
from .data import TrainData, load_train_data
from .text_store import WordEncoding
from .preemption import IntervalClock, Preempted, StopSignals
from .schedule import LRSchedule

log = logging.getLogger(__name__)

EVAL_BPTT = 64


@dataclass
class TrainResult:
    """Facts of a training run: epochs run, best validation perplexity (None without
    validation text), last epoch's training perplexity, wall-clock seconds and
    training tokens per second (of all processes), an entry per epoch (``history``);
    ``rank``: this process's rank in a distributed launch (0 alone; only rank 0 writes
    and should print); ``curve``: every validation point (at epoch ends and every
    ``optim.valid_every``), as docs/training.md ("Learning curves") describes."""

    epochs: int
    best_valid_ppl: Optional[float]
    train_ppl: float
    seconds: float
    words_per_s: float
    history: list
    rank: int = 0
    curve: list = dataclasses.field(default_factory=list)  # the validation points (learning curve)


@dataclass(frozen=True)
class StepOptions:
    """Per-step settings: ``clip`` the gradient-norm bound, ``self_norm_weight`` alpha
    of the self-normalisation regulariser, ``autocast_dtype`` None (float32) or
    ``torch.bfloat16`` (CUDA autocast; weights and optimiser stay float32)."""

    clip: float = 10.0
    self_norm_weight: float = 0.0
    autocast_dtype: Optional[torch.dtype] = None


class Validation(NamedTuple):
    """The validation text as streams: ``bptt`` the segment length they are scored in,
    ``words`` the perplexity's denominator (every word and one ``</s>`` per sentence, as
    :func:`~nbest_rescore.evaluation.perplexity.corpus_perplexity` counts them)."""

    streams: StoreStreams
    bptt: int
    words: int


class EpochStats(NamedTuple):
    """What :func:`train_segments` did: summed training NLL (nats), real target
    tokens, optimiser steps (of the whole epoch, those before a resumed position
    included), whether the time budget (or early stopping) stopped it, the summed
    |log Z| of the real tokens (self-normalisation only, else None), whether a signal
    stopped it (:attr:`Pause.PREEMPT`) and the auxiliary loss summed over the real
    tokens (:attr:`SegmentLoss.aux`; 0 for a model without one)."""

    nll: float
    tokens: int
    steps: int
    timed_out: bool
    abs_log_z: Optional[float] = None
    preempted: bool = False
    aux: float = 0.0


class Pause(enum.Enum):
    """What ``before_step`` of :func:`train_segments` may return besides True (stop):
    write a mid-epoch checkpoint, then go on (SAVE) or stop (PREEMPT)."""

    SAVE = "save"
    PREEMPT = "preempt"


class EpochPosition(NamedTuple):
    """A pass between two updates, as a mid-epoch checkpoint stores it: ``segments``
    updates done, their real target ``tokens`` (all ranks), and ``ranks``: per rank, in
    rank order, a dict of the carried ``state`` (CPU tensors), the summed ``nll`` and
    ``abs_log_z`` so far and the random states ``rng``, ``cuda_rng``."""

    segments: int
    tokens: int
    ranks: list


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
        inputs, targets: int64 [B, T]; mask, reset: bool [B, T] (see
            :class:`~nbest_rescore.corpus.Streams`).
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


_GRAPHS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _graphed_step(model, opt, b: int, bptt: int, options: StepOptions):
    """The captured step of this optimiser and shape (made on first use), or None
    when the step cannot be captured (logged once; training goes on eagerly)."""
    cached = _GRAPHS.get(opt)
    if cached is not None and (cached is False or cached.shape == (b, bptt)):
        return cached or None
    from .cuda_graph import GraphedStep

    g = None
    if not model.supports_cuda_graph():
        log.info("%s: training step not captured as a CUDA graph (not supported by this model's "
                 "settings); eager steps", model.name)
    else:
        g = GraphedStep(model, opt, b, bptt, lambda state, *segment: train_step(
            model, opt, state, *segment, options.clip, options.self_norm_weight, True, options.autocast_dtype))
        try:
            g.capture()
        except Exception as exc:  # capture is an optimisation: fall back to eager steps
            log.warning("training step not captured as a CUDA graph (%s: %s); training without graphs",
                        type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "")
            torch.cuda.synchronize()
            g = None
    _GRAPHS[opt] = g or False
    return g


def train_segments(model, opt, streams: Streams, bptt: int, options: StepOptions, *,
                   before_step: Optional[Callable] = None, first_step: int = 0,
                   max_steps: Optional[int] = None,
                   log_interval: int = 50, progress: Optional[Progress] = None, cuda_graph: bool = False,
                   world: distributed.World = distributed.SINGLE, forward: Optional[Callable] = None,
                   start: Optional[EpochPosition] = None,
                   on_pause: Optional[Callable[[EpochPosition], None]] = None) -> EpochStats:
    """One pass of BPTT updates over ``streams`` (an epoch, moved to the model's
    device here), state carried between segments and reset where documents start.

    Args:
        before_step: called as ``before_step(n, tokens, sums)`` before update n, with
            the global step number n (counted from ``first_step``), the real target
            tokens of the pass so far (all ranks) and ``sums()``, which reads back the
            pass's summed (NLL, auxiliary loss) in nats; returning True stops the pass there, a
            :class:`Pause` calls ``on_pause`` with the :class:`EpochPosition` (on every
            rank; collective) and then goes on (SAVE) or stops (PREEMPT).
        max_steps: stop after this many updates.
        log_interval, progress: every this many steps the running perplexity is read
            back into ``progress`` (called with the real tokens done).
        cuda_graph: replay the step as one CUDA graph where :class:`_Steps` can.
        world, forward: data-parallel training (:mod:`.distributed`): ``streams`` are
            the global batch, of which this rank trains its rows with ``forward``
            (the DDP-wrapped :func:`segment_forward`). Not with ``cuda_graph``.
        start: continue a pass from this position (a mid-epoch checkpoint of the same
            streams and as many ranks): state, sums and random states restored.
    Returns:
        :class:`EpochStats` (with K ranks the NLL and tokens of all ranks).
    """
    device = next(model.parameters()).device
    seg_tokens = segment_tokens(streams, bptt)  # (with K ranks also the loss scale: K / global tokens)
    if world.distributed:  # this rank's rows
        streams = streams.rows(world.shard(streams.shape[0]))
    streams = streams.to(device)
    steps = _Steps(model, opt, streams, bptt, options, cuda_graph and forward is None, world, forward,
                   start.ranks[world.rank] if start is not None else None)
    tokens, total, timed_out, preempted = start.tokens if start is not None else 0, int(seg_tokens.sum()), False, False
    for k in range(steps.done, len(seg_tokens)):
        n = int(seg_tokens[k])
        if max_steps is not None and steps.done >= max_steps:
            break
        action = before_step(first_step + steps.done, tokens, steps.sums) if before_step is not None else None
        if isinstance(action, Pause):
            on_pause(EpochPosition(k, tokens, world.gather(steps.snapshot())))
            if action is Pause.PREEMPT:
                preempted = True
                break
        elif action:
            timed_out = True
            break
        steps.run(k * bptt, n)
        tokens += n
        if progress is not None:
            progress(tokens, total)
            if steps.done % log_interval == 0:
                # (with K ranks: this rank's share of the loss, times K)
                progress.set_perplexity(math.exp(min(50.0, float(steps.nll) * world.size / max(1, tokens))))
    return steps.stats(tokens, timed_out)._replace(preempted=preempted)


class _Steps:
    """The updates of one pass: eager :func:`train_step` calls with the recurrent state
    carried, or (on CUDA, streams aligned to ``bptt``, capturable optimiser) replays of
    the captured CUDA graph (:mod:`.cuda_graph`); ``nll`` and ``abs_log_z`` (None without
    self-normalisation) are summed on the device, ``done`` counts updates (from those of
    ``saved``, this rank's entry of an :class:`EpochPosition` to continue from)."""

    def __init__(self, model, opt, streams: Streams, bptt: int, options: StepOptions, cuda_graph: bool,
                 world: distributed.World, forward: Optional[Callable], saved: Optional[dict] = None):
        self.model, self.opt, self.streams, self.bptt, self.options = model, opt, streams, bptt, options
        self.world, self.forward, self.done = world, forward, 0
        self.aligned = streams.align == bptt
        b, length = streams.shape
        device = streams.device
        weighted = isinstance(streams, StoreStreams) and streams.layout.weight is not None
        capture = cuda_graph and self.aligned and device.type == "cuda" and length % bptt == 0 and not weighted
        self.graph = _graphed_step(model, opt, b, bptt, options) if capture else None
        if self.graph is not None:
            self.graph.clear()
            self.nll, self.abs_log_z, self.aux = self.graph.nll, self.graph.abs_log_z, self.graph.aux
        else:
            self.state = model.init_state(b, device)
            self.nll, self.abs_log_z, self.aux = (torch.zeros((), device=device, dtype=torch.float64) for _ in "abc")
        if options.self_norm_weight <= 0:
            self.abs_log_z = None
        if saved is not None:
            self._restore(saved)

    def snapshot(self) -> dict:
        """This rank's entry of an :class:`EpochPosition` (reads the sums back)."""
        state = self.graph.state if self.graph is not None else self.state
        cuda = self.nll.device.type == "cuda"
        return {"done": self.done, "state": tuple(s.detach().cpu().clone() for s in state), "nll": float(self.nll),
                "aux": float(self.aux),
                "abs_log_z": None if self.abs_log_z is None else float(self.abs_log_z),
                "rng": torch.get_rng_state(), "cuda_rng": torch.cuda.get_rng_state(self.nll.device) if cuda else None}

    def _restore(self, saved: dict) -> None:
        """Continue from :meth:`snapshot`'s ``saved``: updates done, state, sums, random states."""
        device = self.nll.device
        self.done = int(saved["done"])
        if self.graph is not None:
            for static, s in zip(self.graph.state, saved["state"]):
                static.copy_(s)
        else:
            self.state = tuple(s.to(device) for s in saved["state"])
        self.nll.fill_(saved["nll"])
        self.aux.fill_(saved.get("aux", 0.0))  # (absent in states written before the learning curves)
        if self.abs_log_z is not None:
            self.abs_log_z.fill_(saved["abs_log_z"] or 0.0)
        torch.set_rng_state(saved["rng"])
        if saved.get("cuda_rng") is not None and device.type == "cuda":
            torch.cuda.set_rng_state(saved["cuda_rng"], device)

    def run(self, start: int, global_tokens: int) -> None:
        """The update of the segment at column ``start`` (``global_tokens``: its real
        tokens in the whole batch)."""
        seg = self.streams.segment(start, self.bptt)
        seg, weight = seg[:4], seg[4] if len(seg) > 4 else None
        self.done += 1
        if self.graph is not None:
            self.graph.replay(*seg)
            return
        o = self.options
        scale = self.world.size / max(1, global_tokens) if self.world.distributed else None
        self.state, step = train_step(self.model, self.opt, self.state, *seg, o.clip, o.self_norm_weight,
                                      self.aligned, o.autocast_dtype, scale, self.forward, weight)
        for total, x in ((self.nll, step.nll), (self.aux, step.aux), (self.abs_log_z, step.abs_log_z)):
            if x is not None:  # (|log Z| only with self-normalisation, aux only for a model with one)
                total.add_(x)

    def sums(self) -> Tuple[float, float]:
        """The pass's summed (NLL, auxiliary loss) so far, read back (with K ranks summed
        over them: collective)."""
        return tuple(self.world.sum(self.nll, self.aux))

    def stats(self, tokens: int, timed_out: bool) -> EpochStats:
        """The pass's :class:`EpochStats` (read back here; with K ranks summed over them)."""
        # (the tokens are the global batch's already)
        nll, abs_log_z, aux = self.world.sum(self.nll, 0.0 if self.abs_log_z is None else self.abs_log_z, self.aux)
        return EpochStats(nll, tokens, self.done, timed_out, None if self.abs_log_z is None else abs_log_z,
                          aux=aux)


@contextlib.contextmanager
def _training_precision(device):
    """TF32 matrix products and cuDNN on CUDA while training; restored afterwards
    (scoring keeps exact float32, see :func:`~nbest_rescore.device.resolve_device`)."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    if torch.device(device).type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def train(cfg: TrainConfig, out_path, device="cpu", progress: bool = True, resume: Optional[str] = None,
          init_from: Optional[str] = None, stop_after_epochs: Optional[int] = None, *,
          checked: bool = False) -> TrainResult:
    """Train ``cfg.model`` on ``cfg.data``; write the best weights to ``out_path``
    and the resumable state to :func:`~.checkpointing.last_path` after every epoch.

    Args:
        cfg: the training config (``cfg.optim.seed`` seeds weights, dropout and the
            per-epoch document order).
        out_path: checkpoint to write (its folder is created; checked writable
            before any data is read).
        device: torch device.
        resume: a ``.last.pt`` of an earlier run of the same config (continues exactly).
        init_from: a model checkpoint whose weights (and vocabulary) start training
            (fine-tuning); the model name and shapes must match ``cfg``.
        stop_after_epochs: end this run after this many epochs (the schedule still
            plans for ``max_epochs``; ``--resume`` continues).
        checked: ``cfg`` is checked (:func:`~nbest_rescore.config.load_train_config`'s are); else it is here.

    Started by ``torchrun`` with K > 1 processes, this is one rank of a data-parallel
    run as :mod:`.distributed` describes (validation split over the ranks; no CUDA graphs).
    Raises:
        DataError: unwritable output, unreadable/empty training text, a bad model
            config, bfloat16 off CUDA, a resume/init checkpoint that does not fit, or
            (K ranks) ``optim.batch_size`` not divisible by K.
    """
    with distributed.session(device, cfg.optim.batch_size) as world:
        if not checked:  # (a TrainConfig built in Python), before any data is read
            validate_train_config(cfg)
        return _train(cfg, out_path, world, progress, resume, init_from, stop_after_epochs)


def _train(cfg: TrainConfig, out_path, world: distributed.World, progress: bool, resume: Optional[str],
           init_from: Optional[str], stop_after_epochs: Optional[int]) -> TrainResult:
    """:func:`train` as one rank of ``world`` (the only one for a single process).

    Raises:
        Preempted: SIGTERM/SIGINT stopped the run after its resumable state was written.
    """
    t, run = _prepare(cfg, out_path, world, progress, resume, init_from)
    o = t.cfg.optim
    start = _Clocks(time.perf_counter() - run.seconds, time.process_time() - run.cpu_seconds)
    # a resumed run that had already stopped early trains no further epoch
    first_epoch = run.epoch + 1 if run.bad_epochs < o.patience else o.max_epochs + 1
    with _training_precision(world.device), t.signals:
        for epoch in range(first_epoch, o.max_epochs + 1):
            stats = _train_epoch(t, run, epoch, start)
            if stats.preempted:
                raise Preempted(f"training stopped by {t.signals.received or 'a signal'} in epoch {epoch} before "
                                f"step {run.step + stats.steps}; its state is in {t.last}: continue with --resume "
                                f"{t.last} (or --resume auto)")
            if stats.steps == 0:  # the time budget was spent before this epoch began
                break
            last = (stats.timed_out or run.bad_epochs >= o.patience or epoch == o.max_epochs
                    or (stop_after_epochs is not None and epoch - first_epoch + 1 >= stop_after_epochs))
            if last or epoch % o.checkpoint_every == 0:
                t.write(run)
            if last:
                break
    if run.best_state is not None:
        t.model.load_state_dict(run.best_state)
    seconds = time.perf_counter() - start.wall
    return TrainResult(run.epoch, run.best_valid_ppl, run.history[-1]["train_ppl"] if run.history else math.nan,
                       seconds, run.tokens / t.tokens_per_word / max(seconds, 1e-9), run.history, world.rank,
                       list(run.curve))


def _prepare(cfg: TrainConfig, out_path, world: distributed.World, progress: bool, resume: Optional[str],
             init_from: Optional[str]) -> Tuple["_Training", "checkpointing.RunState"]:
    """Everything before the first epoch: checks, the text, the model, the optimiser and
    (``resume``) the restored :class:`~.checkpointing.RunState`."""
    o = cfg.optim
    family = family_of(cfg)
    direction = _check_start(cfg, out_path, world, resume, init_from, family)
    torch.manual_seed(o.seed)
    if o.threads:
        torch.set_num_threads(o.threads)
    loaded = family.load_start(resume or init_from, cfg, resume=bool(resume)) if (resume or init_from) else None
    data = load_train_data(cfg, family.encoding(cfg, loaded, bool(resume)), out_path, world, direction,
                           progress and world.main)
    text = family.text(cfg, data.store, loaded)  # the vocabulary, or the tokenizer's convention
    cfg, model, params = family.build(cfg, text, data, loaded, world.device)
    graphs = o.cuda_graph and world.device.type == "cuda" and not world.distributed
    if o.cuda_graph and world.device.type == "cuda" and world.distributed:
        log.info("CUDA graphs are off under DistributedDataParallel (its gradient all-reduce runs outside a graph)")
    opt = make_optimizer(model, o, capturable=graphs)
    options = StepOptions(o.clip, o.self_norm_weight, torch.bfloat16 if o.dtype == "bfloat16" else None)
    run = checkpointing.restore(loaded, model, opt, world.device) if resume else checkpointing.RunState()
    _check_position(run, world, resume)
    ddp = world.wrap(model, functools.partial(segment_forward, model))  # None for one process
    tokens_per_word = data.tokens_per_word

    def write(r: "checkpointing.RunState", position: Optional[EpochPosition] = None) -> None:
        if world.main:  # (the only rank that writes)
            family.save(out_path, model, text, r, opt, _info(cfg, params, r, tokens_per_word),
                        None if position is None else position._asdict())

    done = run.step + (run.position["segments"] if run.position else 0)
    return _Training(cfg, model, opt, options, world, ddp, graphs, progress and world.main, data.train,
                     _validation(cfg, data, family), tokens_per_word, family.subword, write,
                     IntervalClock(parse_interval(o.checkpoint_interval), done, run.seconds),
                     _validation_clock(o, run, done, tokens_per_word),
                     StopSignals(), checkpointing.last_path(out_path)), run


def _validation_clock(o, run: "checkpointing.RunState", done: int, tokens_per_word: float) -> IntervalClock:
    """When the next validation point within an epoch is due: ``optim.valid_every``
    after the last point (every point restarts it; a resumed run counts from the last
    point it recorded, as the uninterrupted run would), else from global step ``done``."""
    every = parse_interval(o.valid_every, "optim.valid_every", "words")
    if run.curve:
        p = run.curve[-1]
        return IntervalClock(every, p["steps"], p["seconds"], p["words"])
    return IntervalClock(every, done, run.seconds, _words_seen(run, tokens_per_word))


def _words_seen(run: "checkpointing.RunState", tokens_per_word: float, tokens: int = 0) -> float:
    """Training words of the run: those of the epochs done and ``tokens`` of this one."""
    return (run.tokens + tokens) / tokens_per_word


def _check_position(run: "checkpointing.RunState", world: distributed.World, resume: Optional[str]) -> None:
    """A mid-epoch state continues only with as many processes as wrote it."""
    saved = len(run.position["ranks"]) if run.position else world.size
    if saved != world.size:
        raise DataError(f"--resume {resume}: was written in the middle of an epoch by {saved} processes; resume with "
                        f"{saved} (torchrun --nproc_per_node {saved})" if saved > 1 else
                        f"--resume {resume}: was written in the middle of an epoch by one process; resume without "
                        f"torchrun")


class WordFamily:
    """The family-dependent steps of training for the word-level models of the registry
    (:class:`~.hf_train.HfFamily` has the same methods for ``model: hf``).

    ``check`` fails before any data is read (an unwritable ``--out``, a bad model config)
    and returns the reading direction; ``load_start`` reads a ``--resume``/``--init-from``
    checkpoint; ``text`` is what maps words to ids (here the vocabulary); ``encode`` gives
    each document's ids (one start token, then every sentence and its end); ``build``
    returns (the config, with anything filled in, the model on the device, its parameter
    counts); ``save`` writes an epoch's outputs (with a mid-epoch ``position``: only the
    resumable state); ``eval_bptt`` is the validation segment
    length; ``subword``: ids are pieces of words (perplexity reported per word too).
    """

    subword = False

    def check(self, cfg: TrainConfig, out_path, world: distributed.World) -> str:
        if world.main:  # (the only rank that writes)
            checkpointing.check_writable(out_path)
        return config_from_dict(get_model_class(cfg.model).Config, cfg.model_config).direction

    def load_start(self, path, cfg: TrainConfig, resume: bool) -> "checkpointing.Loaded":
        return checkpointing.load_start(path, cfg, resume=resume)

    def encoding(self, cfg: TrainConfig, loaded, resume: bool) -> WordEncoding:
        if loaded is not None and not resume:  # --init-from: the checkpoint's vocabulary as it is
            return WordEncoding(words=tuple(loaded.vocab.words))
        v = cfg.vocab
        return WordEncoding(v.max_size, v.min_count, v.restrict_to, v.file)

    def text(self, cfg: TrainConfig, store, loaded) -> Vocabulary:
        vocab = Vocabulary(store.words)
        if loaded is not None and loaded.vocab.words != vocab.words:
            raise DataError(f"{loaded.path}: its vocabulary ({len(loaded.vocab)} words) is not the one of the token "
                            f"store {store.path} ({len(vocab)} words); train on the text it was trained on with the "
                            f"same vocab section")
        return vocab

    def build(self, cfg: TrainConfig, vocab: Vocabulary, data: TrainData, loaded, device):
        cfg = _with_adaptive_cutoffs(cfg, data, len(vocab), loaded)
        return (cfg, *_build_model(cfg, vocab, loaded, device))

    def save(self, out_path, model, vocab: Vocabulary, run: "checkpointing.RunState", opt, info: dict,
             position: Optional[dict] = None) -> None:
        if position is None:
            checkpointing.save_epoch(out_path, model, vocab, run, opt, info)
        else:  # mid-epoch: the resumable state only (the best weights have not changed)
            checkpointing.save_last(out_path, model, vocab, run, opt, info, position)

    def eval_bptt(self, cfg: TrainConfig) -> int:
        return EVAL_BPTT


def family_of(cfg: TrainConfig):
    """The family object of ``cfg.model`` (:class:`WordFamily`, or for ``model: hf``
    :class:`~.hf_train.HfFamily`, imported only then)."""
    if cfg.model == HF_MODEL:
        from .hf_train import HfFamily

        return HfFamily()
    return WordFamily()


def _check_start(cfg: TrainConfig, out_path, world: distributed.World, resume: Optional[str],
                 init_from: Optional[str], family) -> str:
    """Fail before reading any data: an unwritable ``out_path`` (checked by the main
    rank, the only one that writes), a bad model config, bfloat16 off CUDA, or both
    ``resume`` and ``init_from``. Returns the model's reading direction."""
    direction = family.check(cfg, out_path, world)
    if cfg.optim.dtype == "bfloat16" and world.device.type != "cuda":
        raise DataError(f"optim.dtype bfloat16 (mixed precision) trains on CUDA only; the device is "
                        f"{world.device}: use --device cuda or --dtype float32")
    if resume and init_from:
        raise DataError("--resume and --init-from exclude each other: resume continues a run, "
                        "init-from starts a new one from trained weights")
    return direction


def _with_adaptive_cutoffs(cfg: TrainConfig, data: TrainData, vocab_size: int, loaded) -> TrainConfig:
    """``cfg`` with the adaptive softmax's cutoffs filled in when it has none: those
    of the checkpoint started from, else from the training word frequencies."""
    if cfg.model_config.get("output") != "adaptive" or cfg.model_config.get("adaptive_cutoffs"):
        return cfg
    stored = loaded.payload["config"].get("adaptive_cutoffs") if loaded else None
    cutoffs = stored or default_adaptive_cutoffs(data.id_counts(vocab_size).tolist())
    log.info("adaptive softmax cutoffs from word frequencies: %s", cutoffs)
    return dataclasses.replace(cfg, model_config={**cfg.model_config, "adaptive_cutoffs": cutoffs})


def _build_model(cfg: TrainConfig, vocab: Vocabulary, loaded, device):
    """(the model of ``cfg`` with the weights of ``loaded``, if any, on ``device``,
    its parameter counts)."""
    model = build_model(cfg.model, cfg.model_config, len(vocab))
    if loaded:
        checkpointing.load_weights(model, loaded)
    model.to(device)
    model.fused_training = bool(cfg.optim.fused_softmax)
    params = model.num_parameters()
    log.info("model %s: %d parameters (%d without embeddings), vocabulary %d",
             cfg.model, params["total"], params["without_embeddings"], len(vocab))
    return model, params


def _validation(cfg: TrainConfig, data: TrainData, family) -> Optional[Validation]:
    """The validation documents as 64 streams aligned to the family's validation
    segment length (None without validation text)."""
    if data.valid is None or not len(data.valid):
        return None
    bptt = family.eval_bptt(cfg)
    return Validation(StoreStreams(deal(data.valid, 64, align=bptt)), bptt, data.valid_words)


@dataclass(frozen=True)
class _Training:
    """What every epoch of a run uses (``forward``: the DDP forward, None for one process;
    the mid-epoch checkpoints: ``write``, ``saver``, ``signals``, ``last``)."""

    cfg: TrainConfig
    model: object
    opt: torch.optim.Optimizer
    options: StepOptions
    world: distributed.World
    forward: Optional[Callable]
    graphs: bool
    progress: bool
    documents: Documents  # the training documents (of the memory-mapped store)
    valid: Optional[Validation]
    tokens_per_word: float  # training target ids per word (1 for word ids)
    subword: bool  # ids are pieces of words: also report perplexity per token
    write: Callable  # (RunState, EpochPosition or None): the epoch's outputs or a mid-epoch state (main rank)
    saver: IntervalClock  # when a mid-epoch checkpoint is due
    validator: IntervalClock  # when a validation point within an epoch is due (optim.valid_every)
    signals: StopSignals  # SIGTERM/SIGINT received while training
    last: str  # the resumable state's file (<out>.last.pt)


def epoch_streams(documents, batch_size: int, bptt: int, seed: Optional[int]) -> StoreStreams:
    """The training streams of one epoch: documents (shuffled with ``seed``, in order
    when None) dealt to ``batch_size`` streams, each starting on a multiple of ``bptt``;
    documents longer than a stream's fair share are cut at sentence ends, so that no
    stream grows past it (``benchmarks/train_speed.py`` deals its streams the same way)."""
    if not isinstance(documents, Documents):  # (encoded arrays, as benchmarks/train_speed.py has them)
        documents = Documents.of(list(documents))
    share = -(-int((documents.ends - documents.starts - 1).sum()) // batch_size)
    streams = StoreStreams(deal(documents, batch_size, align=bptt, max_piece=max(bptt, share), seed=seed))
    release_heap()  # (the dealing's temporaries: a few integers per document)
    return streams


class _Clocks(NamedTuple):
    """Where a run's clocks started (as if it had never stopped): ``time.perf_counter()``
    (``wall``) and ``time.process_time()`` (``cpu``: all threads of this process)."""

    wall: float
    cpu: float


def _train_epoch(t: _Training, run: "checkpointing.RunState", epoch: int, start: _Clocks) -> EpochStats:
    """The updates of one epoch over freshly dealt streams, the learning rate set from
    the schedule before each, stopping when ``optim.max_seconds`` is spent, validating
    every ``optim.valid_every`` (:func:`_point`; stopping early after ``patience``
    validations without improvement), writing mid-epoch checkpoints when due and
    stopping after one on SIGTERM/SIGINT; unless the time was spent before the epoch
    began (no step) or a signal stopped it, :func:`_end_epoch`. A resumed mid-epoch
    ``run.position`` continues this epoch."""
    o = t.cfg.optim
    position, run.position = run.position, None  # (a resumed mid-epoch state: this epoch's)
    t.world.seed_epoch(o.seed, epoch)
    streams = epoch_streams(t.documents, o.batch_size, o.bptt, o.seed + epoch if o.shuffle else None)
    if not run.planned_steps:  # planned once, from the first epoch's streams (kept on resume)
        run.planned_steps = -(-streams.shape[1] // o.bptt) * o.max_epochs
    schedule = LRSchedule(o, run.planned_steps)
    clock = distributed.Clock(t.world, start.wall, o.log_interval)  # K ranks: rank 0's seconds

    def before_step(step, tokens, sums):
        elapsed, signalled = clock(step, t.signals.received is not None)
        if o.max_seconds and elapsed > o.max_seconds:
            return True  # the time budget is spent: no further update
        words = _words_seen(run, t.tokens_per_word, tokens)
        if t.valid is not None and t.validator.due(step, elapsed, words):
            t.validator.saved(step, elapsed, words)
            _point(t, run, _progress_entry(t, run, epoch, step, tokens, *sums(), start), validate=True)
            t.model.train()
            if run.bad_epochs >= o.patience:
                return True  # early stopping within the epoch
        set_lr(t.opt, o.lr * run.lr_scale * schedule.factor(step, elapsed))
        t.model.on_progress(schedule.progress(step, elapsed))
        if signalled or t.saver.due(step, elapsed):
            t.saver.saved(step, elapsed)
            return Pause.PREEMPT if signalled else Pause.SAVE
        return None

    def on_pause(position: EpochPosition) -> None:  # (every rank; the main one writes)
        t.write(dataclasses.replace(run, seconds=time.perf_counter() - start.wall,
                                    cpu_seconds=time.process_time() - start.cpu), position)

    t.model.train()
    bar = Progress("tok", desc=f"epoch {epoch}", leave=False) if t.progress else None
    with contextlib.closing(bar) if bar is not None else contextlib.nullcontext():
        stats = train_segments(t.model, t.opt, streams, o.bptt, t.options, before_step=before_step,
                               first_step=run.step, log_interval=o.log_interval, progress=bar,
                               cuda_graph=t.graphs, world=t.world, forward=t.forward,
                               start=None if position is None else EpochPosition(**position), on_pause=on_pause)
    if stats.steps and not stats.preempted:
        _end_epoch(t, run, epoch, stats, start)
    return stats


def _progress_entry(t: _Training, run: "checkpointing.RunState", epoch: int, step: int, tokens: int,
                    nll: float, aux: float, start: _Clocks) -> dict:
    """A history entry or learning-curve point before global update ``step`` of
    ``epoch``, after ``tokens`` real target tokens of the epoch with summed ``nll``
    and auxiliary loss ``aux`` (nats): the epoch's training perplexity so far (per
    word; per token too for subwords), the auxiliary loss per token (only for a model
    that has one), the training words seen, wall and CPU seconds, learning rate."""
    per_token = nll / max(1, tokens)
    entry = {"epoch": epoch, "train_ppl": math.exp(min(50.0, per_token * t.tokens_per_word)),
             "seconds": time.perf_counter() - start.wall, "cpu_seconds": time.process_time() - start.cpu,
             "lr": float(t.opt.param_groups[0]["lr"]), "steps": step, "tokens": run.tokens + tokens,
             "words": round(_words_seen(run, t.tokens_per_word, tokens))}
    if t.subword:
        entry["train_token_ppl"] = math.exp(min(50.0, per_token))
    if aux:
        entry["aux_loss"] = aux / max(1, tokens)
    return entry


def _end_epoch(t: _Training, run: "checkpointing.RunState", epoch: int, stats: EpochStats, start: _Clocks) -> None:
    """Count the epoch's updates into ``run``, validate (unless a point was just taken
    at this step), keep the best weights, log and add the epoch's history entry."""
    entry = _progress_entry(t, run, epoch, run.step + stats.steps, stats.tokens, stats.nll, stats.aux, start)
    run.step += stats.steps
    run.tokens += stats.tokens
    if stats.abs_log_z is not None:
        entry["mean_abs_log_z"] = stats.abs_log_z / max(1, stats.tokens)
    if t.valid is not None:
        taken = run.curve and run.curve[-1]["steps"] == run.step  # (early stopping just validated)
        entry.update({k: v for k, v in run.curve[-1].items() if k.startswith("valid") or k == "memcells"}
                     if taken else _point(t, run, dict(entry), validate=False))
        t.validator.saved(run.step, entry["seconds"], entry["words"])
    else:
        run.best_state = copy.deepcopy(t.model.state_dict())
        log.info("epoch %d: train ppl %.2f, %.0f s", epoch, entry["train_ppl"], entry["seconds"])
    run.history.append(entry)
    # after validation, so that an epoch is validated with the settings it trained with
    t.model.on_epoch_end(epoch)
    run.epoch = epoch
    run.seconds = time.perf_counter() - start.wall
    run.cpu_seconds = time.process_time() - start.cpu


def _point(t: _Training, run: "checkpointing.RunState", entry: dict, validate: bool) -> dict:
    """A validation point: validation perplexity (and memcell health) of the current
    weights added to ``entry`` (:func:`_progress_entry`), which joins ``run.curve``;
    keep the weights when they are the best so far, else count a bad validation (and
    halve the learning rate with ``optim.halve_lr_on_plateau``). ``validate``: within
    an epoch (logged as such). Returns the validation's keys."""
    model, world = t.model, t.world
    model.eval()
    model.begin_diagnostics()
    # K ranks: each scores its part of the streams, the sum is the same on all
    # ranks (so are the early-stopping decisions); diagnostics are rank 0's part
    valid = t.valid.streams
    mine = valid.rows(world.part(valid.shape[0]))
    nll = nll_of_streams(model, mine, t.valid.bptt, world.device) if mine.shape[0] else 0.0
    nll = world.sum(nll)[0]
    vppl = math.exp(nll / t.valid.words)  # per word: every word and one </s> per sentence
    health = model.end_diagnostics()
    found = {"valid_ppl": vppl}
    if t.subword:
        tokens = valid.num_tokens
        found.update(valid_token_ppl=math.exp(nll / tokens), valid_tokens_per_word=tokens / t.valid.words)
    if health:
        found["memcells"] = health
    entry.update(found)
    log.info("epoch %d%s: train ppl %.2f, valid ppl %.2f%s, lr %.2e, %.0f s", entry["epoch"],
             f", {entry['words']} words" if validate else "", entry["train_ppl"], vppl,
             f", aux loss {entry['aux_loss']:.4f}" if "aux_loss" in entry else "", entry["lr"], entry["seconds"])
    if health:
        log.info("epoch %d memcells: %s", entry["epoch"], ", ".join(f"{k} {v}" for k, v in health.items()))
    if vppl < run.best_ppl:
        run.best_ppl, run.bad_epochs = vppl, 0
        run.best_state = copy.deepcopy(model.state_dict())
    else:
        run.bad_epochs += 1
        if t.cfg.optim.halve_lr_on_plateau:
            run.lr_scale *= 0.5
    run.curve.append(entry)
    return found


def _info(cfg: TrainConfig, params: dict, run: "checkpointing.RunState", tokens_per_word: float = 1.0) -> dict:
    """Training facts stored in the checkpoint (``nbest-rescore info`` reads them)."""
    return {"train_config": dataclasses.asdict(cfg), "parameters": params, "epochs": run.epoch,
            "best_valid_ppl": run.best_valid_ppl,
            "seconds": run.seconds, "words_per_s": run.tokens / tokens_per_word / max(run.seconds, 1e-9),
            "history": list(run.history), "curve": list(run.curve)}
