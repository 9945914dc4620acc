"""The pass engine: one pass of BPTT updates over a batch of streams (an epoch), the
recurrent state carried between segments, each update an eager :func:`~.step.train_step`
or a replay of the step captured as a CUDA graph (:mod:`.cuda_graph`, one per optimiser
and shape, made on first use), pausable between two updates at an
:class:`EpochPosition` that a mid-epoch checkpoint stores and a later pass continues.
"""
from __future__ import annotations

import enum
import logging
import weakref
from typing import Callable, NamedTuple, Optional, Tuple

import torch

from ..corpus import Documents, deal, release_heap
from ..store_streams import StoreStreams
from ..progress import Progress
from . import distributed
from .step import StepOptions, perplexity, train_step

log = logging.getLogger("nbest_rescore.training.trainer")  # (the run's log lines keep their name)


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


def train_segments(model, opt, streams: StoreStreams, bptt: int, options: StepOptions, *,
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
    seg_tokens = streams.segment_tokens(bptt)  # (with K ranks also the loss scale: K / global tokens)
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
                progress.set_perplexity(perplexity(float(steps.nll) * world.size / max(1, tokens)))
    return steps.stats(tokens, timed_out)._replace(preempted=preempted)


class _Steps:
    """The updates of one pass: eager :func:`train_step` calls with the recurrent state
    carried, or (on CUDA, streams aligned to ``bptt``, capturable optimiser) replays of
    the captured CUDA graph (:mod:`.cuda_graph`); ``nll`` and ``abs_log_z`` (None without
    self-normalisation) are summed on the device, ``done`` counts updates (from those of
    ``saved``, this rank's entry of an :class:`EpochPosition` to continue from)."""

    def __init__(self, model, opt, streams: StoreStreams, bptt: int, options: StepOptions, cuda_graph: bool,
                 world: distributed.World, forward: Optional[Callable], saved: Optional[dict] = None):
        self.model, self.opt, self.streams, self.bptt, self.options = model, opt, streams, bptt, options
        self.world, self.forward, self.done = world, forward, 0
        self.aligned = streams.align == bptt
        b, length = streams.shape
        device = streams.device
        weighted = streams.layout.weight is not None
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

