"""Corpus-level training loop (``000`` section 5.1).

Documents are dealt to ``batch_size`` parallel streams in a new seeded order every
epoch, each document starting on a BPTT-segment boundary, so that the recurrent
state is carried from one segment to the next, reset only where a document starts,
and every segment is one model call (one cuDNN call for the recurrent models). The
hot loop keeps its loss and token counters on the device and reads them every
``optim.log_interval`` steps (no per-step host synchronisation). Optional bfloat16
autocast and TF32 on CUDA; the learning rate warms up and decays over the planned
length (:mod:`.schedule`); early stopping on validation perplexity keeps the best
weights. After every epoch the best weights are written to ``--out`` and the full
training state to ``<out>.last.pt`` (:mod:`.checkpointing`), from which ``train
--resume`` continues exactly. A backward model (``model_config.direction: backward``)
trains on the reversed documents (:func:`~nbest_rescore.corpus.model_documents`: sentences
word-reversed, a document's sentences from its last to its first; ``data.max_words``
takes its prefix of the text before the reversal). Started by ``torchrun``, each process trains its share
of the streams under DistributedDataParallel (:mod:`.distributed`).
"""
from __future__ import annotations

import contextlib
import copy
import functools
import logging
import math
import time
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

from ..config import TrainConfig, config_to_dict
from ..errors import DataError
from ..io.lm_text import read_lm_text
from ..models import build_model
from ..models.base import default_adaptive_cutoffs, detach_state
from ..models.registry import config_from_dict, get_model_class
from ..vocab import Vocabulary
from . import checkpointing, distributed
from .schedule import LRSchedule
from ..corpus import Streams, encode_document, make_streams, model_documents, nll_of_streams, run_segment

log = logging.getLogger(__name__)

EVAL_BPTT = 64


@dataclass
class TrainResult:
    """Facts of a training run: epochs run, best validation perplexity (None without
    validation text), last epoch's training perplexity, wall-clock seconds and
    training tokens per second (of all processes); ``rank``: this process's rank in
    a distributed launch (0 alone; only rank 0 writes and should print)."""

    epochs: int
    best_valid_ppl: Optional[float]
    train_ppl: float
    seconds: float
    words_per_s: float
    history: list
    rank: int = 0


@dataclass(frozen=True)
class StepOptions:
    """Per-step settings: ``clip`` the gradient-norm bound, ``self_norm_weight`` alpha
    of the self-normalisation regulariser, ``autocast_dtype`` None (float32) or
    ``torch.bfloat16`` (CUDA autocast; weights and optimiser stay float32)."""

    clip: float = 10.0
    self_norm_weight: float = 0.0
    autocast_dtype: Optional[torch.dtype] = None


class EpochStats(NamedTuple):
    """What :func:`train_segments` did: summed training NLL (nats), real target
    tokens, optimiser steps, whether the deadline stopped it, and the summed |log Z|
    of the real tokens (self-normalisation only, else None)."""

    nll: float
    tokens: int
    steps: int
    timed_out: bool
    abs_log_z: Optional[float] = None


def build_vocab(cfg: TrainConfig, train_docs) -> Vocabulary:
    """Vocabulary from ``cfg.vocab`` and the training documents, ids in order of
    decreasing training frequency (after ``</s>``, ``<unk>``)."""
    counts = Counter(w for d in train_docs for s in d for w in s)
    if cfg.vocab.file:
        return Vocabulary.from_file(cfg.vocab.file).by_frequency(counts)
    restrict = None
    if cfg.vocab.restrict_to:
        restrict = Vocabulary.from_file(cfg.vocab.restrict_to).words
    return Vocabulary.from_counts(counts, cfg.vocab.max_size, cfg.vocab.min_count, restrict)


def id_counts(encoded, vocab_size: int) -> np.ndarray:
    """int64 [V]: how often each id is a target in the encoded documents."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for d in encoded:
        counts += np.bincount(d[1:], minlength=vocab_size)
    return counts


class SegmentLoss(NamedTuple):
    """The training loss of one BPTT segment (all device tensors, nothing read back).

    loss: scalar to minimise: mean cross-entropy per real token + the model's
        auxiliary loss + ``self_norm_weight * mean_t (log Z_t)^2``.
    nll: summed cross-entropy of the segment's real tokens (nats, detached scalar).
    abs_log_z: summed |log Z_t| over the real tokens (detached scalar), Z_t the
        softmax normaliser; only computed with ``self_norm_weight > 0`` (else None).
    num_tokens: number of real (unpadded) target tokens (float scalar tensor).
    """

    loss: Tensor
    nll: Tensor
    abs_log_z: Optional[Tensor]
    num_tokens: Tensor


def segment_loss(model, features: Tensor, targets: Tensor, mask: Tensor, aux: Optional[Tensor] = None,
                 self_norm_weight: float = 0.0, loss_scale: Optional[float] = None) -> SegmentLoss:
    """Loss of a segment from the model's features, without host synchronisation.

    On CUDA every position goes through the output layer (padding is masked
    afterwards, so no boolean indexing and no host synchronisation); on the CPU only
    the real positions do. The full softmax uses the fused ``cross_entropy`` and the
    adaptive softmax computes only the clusters the targets need. With
    ``self_norm_weight`` alpha > 0 the variance regulariser of Chen et al. 2016 (the
    thesis ``000`` section 3.5, reference [45]) is added: alpha * mean over the real
    tokens of (log Z_t)^2, log Z_t = logsumexp of the logits at t (full softmax only).

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
    else:
        nll_tok = -model.target_log_probs(features, targets)
    nll = (nll_tok * maskf).sum()
    loss = nll / denom if loss_scale is None else nll * loss_scale
    if aux is not None:
        loss = loss + aux
    if self_norm_weight > 0:
        sq = (log_z ** 2 * maskf).sum()
        loss = loss + self_norm_weight * (sq / denom if loss_scale is None else sq * loss_scale)
    return SegmentLoss(loss, nll.detach(), abs_log_z, ntok)


def epoch_streams(encoded, batch_size: int, bptt: int, seed: Optional[int]) -> Streams:
    """The training streams of one epoch: documents (shuffled with ``seed``, in order
    when None) dealt to ``batch_size`` streams, each starting on a multiple of
    ``bptt``; documents longer than a stream's fair share (total / batch_size) are
    cut at sentence ends so that no stream, and no padding, grows past it."""
    n_tokens = sum(len(d) - 1 for d in encoded)
    return make_streams(encoded, batch_size, align=bptt, max_piece=max(bptt, -(-n_tokens // batch_size)), seed=seed)


def segment_forward(model, state, inputs: Tensor, targets: Tensor, mask: Tensor, reset: Tensor,
                    aligned: bool = False, self_norm_weight: float = 0.0, loss_scale: Optional[float] = None):
    """:func:`run_segment` then :func:`segment_loss`: (state after the segment,
    :class:`SegmentLoss`). The forward that data-parallel training wraps in DDP."""
    model.token_mask(mask)
    feats, state, aux = run_segment(model, state, inputs, reset, aligned)
    model.token_mask(None)
    return state, segment_loss(model, feats, targets, mask, aux, self_norm_weight, loss_scale)


def train_step(model, opt, state, inputs: Tensor, targets: Tensor, mask: Tensor, reset: Tensor,
               clip: float, self_norm_weight: float = 0.0, aligned: bool = False,
               autocast_dtype: Optional[torch.dtype] = None, loss_scale: Optional[float] = None,
               forward: Optional[Callable] = None):
    """One BPTT update: run the segment from ``state`` (cut from the graph), compute
    :func:`segment_loss`, back-propagate, clip the gradient norm to ``clip``, step.
    Nothing is read back to the host when ``aligned`` (see :func:`run_segment`).

    Args:
        inputs, targets: int64 [B, T]; mask, reset: bool [B, T] (see
            :class:`~nbest_rescore.corpus.Streams`).
        autocast_dtype: None, or ``torch.bfloat16`` for mixed precision under
            ``torch.autocast`` on the inputs' device type.
        loss_scale: see :func:`segment_loss`.
        forward: :func:`segment_forward` of ``model`` wrapped in DDP
            (:meth:`~.distributed.World.wrap`: the gradients are averaged over the
            ranks before clipping, so every rank clips and steps alike); None: ``model``.
    Returns:
        (state after the segment, :class:`SegmentLoss`). A segment without real
        tokens gives zero loss and gradients.
    """
    # (no autocast weight cache: it must not outlive a captured CUDA graph's region)
    ctx = (torch.autocast(inputs.device.type, dtype=autocast_dtype, cache_enabled=False) if autocast_dtype is not None
           else contextlib.nullcontext())
    fwd = forward if forward is not None else functools.partial(segment_forward, model)
    with ctx:
        state, step = fwd(detach_state(state), inputs, targets, mask, reset, aligned, self_norm_weight, loss_scale)
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
    cuda = bool(params) and params[0].is_cuda
    if o.optimizer == "sgd":
        return torch.optim.SGD(params, lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
    cls = torch.optim.AdamW if o.optimizer == "adamw" else torch.optim.Adam
    if cuda and capturable:
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


def get_lr(opt) -> float:
    """The first parameter group's learning rate as a float (reads a tensor learning
    rate back from the device: call it per epoch, not per step)."""
    lr = opt.param_groups[0]["lr"]
    return float(lr)


_GRAPHS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _graphed_step(model, opt, b: int, bptt: int, options: StepOptions):
    """The captured step of this optimiser and shape (made on first use), or None
    when the step cannot be captured (logged once; training goes on eagerly)."""
    cached = _GRAPHS.get(opt)
    if cached is not None and (cached is False or cached.shape == (b, bptt)):
        return cached or None
    if not model.supports_cuda_graph():
        log.info("%s: training step not captured as a CUDA graph (not supported by this model's "
                 "settings); eager steps", model.name)
        _GRAPHS[opt] = False
        return None
    from .cuda_graph import GraphedStep

    def step_fn(state, inputs, targets, mask, reset):
        return train_step(model, opt, state, inputs, targets, mask, reset, options.clip,
                          options.self_norm_weight, True, options.autocast_dtype)

    g = GraphedStep(model, opt, b, bptt, step_fn)
    try:
        g.capture()
    except Exception as exc:  # capture is an optimisation: fall back to eager steps
        log.warning("training step not captured as a CUDA graph (%s: %s); training without graphs",
                    type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "")
        torch.cuda.synchronize()
        _GRAPHS[opt] = False
        return None
    _GRAPHS[opt] = g
    return g


def train_segments(model, opt, streams: Streams, bptt: int, options: StepOptions, *,
                   before_step: Optional[Callable[[int], Optional[bool]]] = None, first_step: int = 0,
                   max_steps: Optional[int] = None, deadline: Optional[float] = None,
                   log_interval: int = 50, bar=None, cuda_graph: bool = False,
                   world: distributed.World = distributed.SINGLE, forward: Optional[Callable] = None) -> EpochStats:
    """One pass of BPTT updates over ``streams`` (an epoch), state carried between
    segments and reset where documents start.

    Args:
        streams: from :func:`make_streams` (moved to the model's device here);
            aligned to ``bptt`` for single-call segments.
        before_step: called with the global step number n before update n (the
            trainer sets the learning rate and reports the progress to the model);
            returning True stops the pass there (the time budget is spent).
        first_step: global step number of the first update (for ``before_step``).
        max_steps: stop after this many updates; deadline: ``time.perf_counter()``
            value after which no further update starts.
        log_interval: the loss is read back every this many steps (for ``bar``).
        bar: a tqdm bar updated with the real tokens and, every ``log_interval``
            steps, the running perplexity and words/s.
        cuda_graph: on CUDA with aligned streams and a capturable optimiser, replay
            the step as one CUDA graph (:mod:`.cuda_graph`); falls back to eager
            steps when the model's step cannot be captured.
        world, forward: data-parallel training (:mod:`.distributed`): ``streams`` are
            the global batch, of which this rank trains its rows with ``forward``
            (the DDP-wrapped :func:`segment_forward`); every rank must take the same
            decisions in ``before_step``. Not with ``cuda_graph``.
    Returns:
        :class:`EpochStats` (the NLL is read back once, at the end; with K ranks
        the NLL and tokens are those of all ranks).
    """
    device = next(model.parameters()).device
    # real tokens per segment of the whole batch, read to the host once (the progress
    # bar's count; with K ranks also the loss scale, K / global tokens, of each segment)
    counts = streams.mask.sum(0).cpu()
    seg_tokens = [int(counts[i:i + bptt].sum()) for i in range(0, counts.shape[0], bptt)]
    if world.distributed:
        streams = streams.rows(world.shard(streams.inputs.shape[0]))
    if streams.inputs.device != device:
        streams = streams.to(device)
    aligned = streams.align == bptt
    b, length = streams.inputs.shape
    graph = None
    if cuda_graph and forward is None and aligned and device.type == "cuda" and length % bptt == 0:
        graph = _graphed_step(model, opt, b, bptt, options)
    if graph is not None:
        graph.clear()
        nll, abs_log_z = graph.nll, (graph.abs_log_z if options.self_norm_weight > 0 else None)
    else:
        state = model.init_state(b, device)
        nll = torch.zeros((), device=device, dtype=torch.float64)
        abs_log_z = torch.zeros((), device=device, dtype=torch.float64) if options.self_norm_weight > 0 else None
    tokens = steps = 0
    timed_out = False
    t0 = time.perf_counter()
    for k, start in enumerate(range(0, length, bptt)):
        if max_steps is not None and steps >= max_steps:
            break
        if deadline is not None and time.perf_counter() > deadline:
            timed_out = True
            break
        if before_step is not None and before_step(first_step + steps):
            timed_out = True
            break
        sl = slice(start, start + bptt)
        seg = (streams.inputs[:, sl], streams.targets[:, sl], streams.mask[:, sl], streams.reset[:, sl])
        if graph is not None:
            graph.replay(*seg)
        else:
            scale = world.size / max(1, seg_tokens[k]) if world.distributed else None
            state, step = train_step(model, opt, state, *seg, options.clip, options.self_norm_weight, aligned,
                                     options.autocast_dtype, scale, forward)
            nll += step.nll
            if abs_log_z is not None:
                abs_log_z += step.abs_log_z
        n = seg_tokens[k]
        tokens += n
        steps += 1
        if bar is not None:
            bar.update(n)
            if steps % log_interval == 0:
                el = time.perf_counter() - t0
                # (with K ranks: this rank's share of the loss, times K)
                bar.set_postfix(ppl=f"{math.exp(min(50.0, float(nll) * world.size / max(1, tokens))):.1f}",
                                words_s=f"{tokens / max(el, 1e-9):.0f}")
    nll, abs_log_z = float(nll), None if abs_log_z is None else float(abs_log_z)
    if world.distributed:  # summed over the ranks (the tokens are the global batch's already)
        nll, total_abs = world.sum(nll, abs_log_z or 0.0)
        abs_log_z = None if abs_log_z is None else total_abs
    return EpochStats(nll, tokens, steps, timed_out, abs_log_z)


@contextlib.contextmanager
def _training_precision(device):
    """TF32 matrix products and cuDNN on CUDA while training; restored afterwards
    (scoring keeps exact float32, see :func:`~nbest_rescore.device.resolve_device`)."""
    if torch.device(device).type != "cuda":
        yield
        return
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def train(cfg: TrainConfig, out_path, device="cpu", progress: bool = True, resume: Optional[str] = None,
          init_from: Optional[str] = None, stop_after_epochs: Optional[int] = None) -> TrainResult:
    """Train ``cfg.model`` on ``cfg.data``; write the best weights to ``out_path``
    and the resumable state to :func:`~.checkpointing.last_path` after every epoch.

    Args:
        cfg: the training config (``cfg.optim.seed`` seeds weights, dropout and the
            per-epoch document order).
        out_path: checkpoint to write (its folder is created; checked writable
            before any data is read).
        device: torch device.
        resume: a ``.last.pt`` of an earlier run of the same config: continue after
            its last epoch with its weights, optimiser state, learning-rate schedule,
            random state and history (same result as an uninterrupted run).
        init_from: a model checkpoint whose weights (and vocabulary) start training
            (fine-tuning); the model name and shapes must match ``cfg``.
        stop_after_epochs: end this run after this many epochs (the schedule still
            plans for ``max_epochs``; ``--resume`` continues).

    Started by ``torchrun`` with K > 1 processes (:mod:`.distributed`), this is one
    rank of a data-parallel run: ``optim.batch_size`` is the global batch (B/K
    streams per rank, same gradient as one process with batch B), ``--device cuda``
    means ``cuda:LOCAL_RANK``, validation is split over the ranks, and only rank 0
    writes the checkpoints and logs. CUDA graphs are off under DDP.
    Raises:
        DataError: unwritable output, unreadable/empty training text, a bad model
            config, bfloat16 off CUDA, a resume/init checkpoint that does not fit, or
            (K ranks) ``optim.batch_size`` not divisible by K.
    """
    with distributed.session(device, cfg.optim.batch_size) as world:
        return _train(cfg, out_path, world, progress, resume, init_from, stop_after_epochs)


def _train(cfg: TrainConfig, out_path, world: distributed.World, progress: bool, resume: Optional[str],
           init_from: Optional[str], stop_after_epochs: Optional[int]) -> TrainResult:
    """:func:`train` as one rank of ``world`` (the only one for a single process)."""
    o = cfg.optim
    device = world.device
    if world.main:  # (the only process that writes)
        checkpointing.check_writable(out_path)
    # bad model_config: fail before reading data
    direction = config_from_dict(get_model_class(cfg.model).Config, cfg.model_config).direction
    if o.dtype == "bfloat16" and device.type != "cuda":
        raise DataError(f"optim.dtype bfloat16 (mixed precision) trains on CUDA only; the device is "
                        f"{device}: use --device cuda or --dtype float32")
    if resume and init_from:
        raise DataError("--resume and --init-from exclude each other: resume continues a run, "
                        "init-from starts a new one from trained weights")
    torch.manual_seed(o.seed)
    if o.threads:
        torch.set_num_threads(o.threads)
    loaded = checkpointing.load_start(resume or init_from, cfg, resume=bool(resume)) if (resume or init_from) else None
    # a backward model reads every document reversed (after the max_words prefix is taken)
    train_docs = model_documents(read_lm_text(cfg.data.train, cfg.data.max_words), direction)
    valid_docs = (model_documents(read_lm_text(cfg.data.valid, cfg.data.max_valid_words), direction)
                  if cfg.data.valid else None)
    vocab = loaded.vocab if loaded else build_vocab(cfg, train_docs)
    encoded = [encode_document(d, vocab) for d in train_docs]
    if cfg.model_config.get("output") == "adaptive" and not cfg.model_config.get("adaptive_cutoffs"):
        cfg = copy.deepcopy(cfg)
        stored = loaded.payload["config"].get("adaptive_cutoffs") if loaded else None
        cfg.model_config["adaptive_cutoffs"] = stored or default_adaptive_cutoffs(
            id_counts(encoded, len(vocab)).tolist())
        log.info("adaptive softmax cutoffs from word frequencies: %s", cfg.model_config["adaptive_cutoffs"])
    model = build_model(cfg.model, cfg.model_config, len(vocab))
    if loaded:
        checkpointing.load_weights(model, loaded)
    model.to(device)
    model.fused_training = bool(cfg.optim.fused_softmax)
    params = model.num_parameters()
    log.info("model %s: %d parameters (%d without embeddings), vocabulary %d",
             cfg.model, params["total"], params["without_embeddings"], len(vocab))
    valid_streams = (make_streams([encode_document(d, vocab) for d in valid_docs], 64, align=EVAL_BPTT)
                     if valid_docs else None)
    graphs = o.cuda_graph and device.type == "cuda" and not world.distributed
    if o.cuda_graph and device.type == "cuda" and world.distributed:
        log.info("CUDA graphs are off under DistributedDataParallel (its gradient all-reduce runs outside a graph)")
    opt = make_optimizer(model, o, capturable=graphs)
    options = StepOptions(o.clip, o.self_norm_weight, torch.bfloat16 if o.dtype == "bfloat16" else None)
    run = checkpointing.RunState()
    if resume:
        run = checkpointing.restore(loaded, model, opt, device)
    ddp = world.wrap(model, functools.partial(segment_forward, model))  # None for one process
    schedule = None
    start = time.perf_counter() - run.seconds
    first_epoch = run.epoch + 1
    if run.bad_epochs >= o.patience:  # a resumed run that had already stopped early
        first_epoch = o.max_epochs + 1
    with _training_precision(device):
        for epoch in range(first_epoch, o.max_epochs + 1):
            world.seed_epoch(o.seed, epoch)
            streams = epoch_streams(encoded, o.batch_size, o.bptt, o.seed + epoch if o.shuffle else None)
            if schedule is None:
                if not run.planned_steps:  # planned once, from the first epoch's streams (kept on resume)
                    run.planned_steps = -(-streams.inputs.shape[1] // o.bptt) * o.max_epochs
                schedule = LRSchedule(o, run.planned_steps)
            model.train()
            bar = tqdm(total=streams.num_tokens, desc=f"epoch {epoch}", unit="tok",
                       disable=not (progress and world.main), leave=False, mininterval=1.0)
            clock = distributed.Clock(world, start, o.log_interval)  # K ranks: rank 0's seconds

            def before_step(step, _s=schedule, _clock=clock):
                elapsed = _clock(step)
                if o.max_seconds and elapsed > o.max_seconds:
                    return True  # the time budget is spent: no further update
                set_lr(opt, o.lr * run.lr_scale * _s.factor(step, elapsed))
                model.on_progress(_s.progress(step, elapsed))
                return False

            stats = train_segments(model, opt, streams, o.bptt, options, before_step=before_step, first_step=run.step,
                                   log_interval=o.log_interval, bar=bar, cuda_graph=graphs, world=world, forward=ddp)
            bar.close()
            if stats.steps == 0:  # the time budget was spent before this epoch began
                break
            run.step += stats.steps
            run.tokens += stats.tokens
            train_ppl = math.exp(min(50.0, stats.nll / max(1, stats.tokens)))
            entry = {"epoch": epoch, "train_ppl": train_ppl, "seconds": time.perf_counter() - start,
                     "lr": get_lr(opt), "steps": run.step, "tokens": run.tokens}
            if stats.abs_log_z is not None:
                entry["mean_abs_log_z"] = stats.abs_log_z / max(1, stats.tokens)
            if valid_streams is not None:
                model.eval()
                model.begin_diagnostics()
                # K ranks: each scores its part of the streams, the sum is the same on all
                # ranks (so are the early-stopping decisions); diagnostics are rank 0's part
                mine = valid_streams.rows(world.part(valid_streams.inputs.shape[0]))
                nll = nll_of_streams(model, mine, EVAL_BPTT, device) if mine.inputs.shape[0] else 0.0
                vppl = math.exp(world.sum(nll)[0] / valid_streams.num_tokens)
                health = model.end_diagnostics()
                entry["valid_ppl"] = vppl
                log.info("epoch %d: train ppl %.2f, valid ppl %.2f, lr %.2e, %.0f s", epoch, train_ppl, vppl,
                         entry["lr"], entry["seconds"])
                if health:
                    entry["memcells"] = health
                    log.info("epoch %d memcells: %s", epoch, ", ".join(f"{k} {v}" for k, v in health.items()))
                if vppl < run.best_ppl:
                    run.best_ppl, run.bad_epochs = vppl, 0
                    run.best_state = copy.deepcopy(model.state_dict())
                else:
                    run.bad_epochs += 1
                    if o.halve_lr_on_plateau:
                        run.lr_scale *= 0.5
            else:
                run.best_state = copy.deepcopy(model.state_dict())
                log.info("epoch %d: train ppl %.2f, %.0f s", epoch, train_ppl, entry["seconds"])
            run.history.append(entry)
            # after validation, so that an epoch is validated with the settings it trained with
            model.on_epoch_end(epoch)
            run.epoch = epoch
            run.seconds = time.perf_counter() - start
            last = (stats.timed_out or run.bad_epochs >= o.patience or epoch == o.max_epochs
                    or (stop_after_epochs is not None and epoch - first_epoch + 1 >= stop_after_epochs))
            if world.main and (last or epoch % o.checkpoint_every == 0):
                checkpointing.save_epoch(out_path, model, vocab, run, opt, _info(cfg, params, run))
            if last:
                break
    if run.best_state is not None:
        model.load_state_dict(run.best_state)
    seconds = time.perf_counter() - start
    last = run.history[-1] if run.history else {}
    best = run.best_ppl if math.isfinite(run.best_ppl) else None
    return TrainResult(run.epoch, best, last.get("train_ppl", math.nan), seconds,
                       run.tokens / max(seconds, 1e-9), run.history, world.rank)


def _info(cfg: TrainConfig, params: dict, run: "checkpointing.RunState") -> dict:
    """Training facts stored in the checkpoint (``nbest-rescore info`` reads them)."""
    return {"train_config": config_to_dict(cfg), "parameters": params, "epochs": run.epoch,
            "best_valid_ppl": run.best_ppl if math.isfinite(run.best_ppl) else None,
            "seconds": run.seconds, "words_per_s": run.tokens / max(run.seconds, 1e-9),
            "history": list(run.history)}
