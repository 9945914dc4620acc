"""The epoch loop of a run (docs/training.md, "What ``train`` does"): an epoch's
updates (:func:`train_epoch`), the control between them and the epoch's end
(:class:`_Epoch`). A run's epochs share a :class:`Training` of small parts; what
changes from epoch to epoch is the :class:`~.checkpointing.RunState`."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
import time
from typing import Callable, NamedTuple, Optional, Tuple

import torch

from ..config import TrainConfig
from ..corpus import Documents, nll_of_streams
from ..store_streams import StoreStreams
from ..progress import Progress
from . import checkpointing, distributed
from .passes import EpochPosition, EpochStats, Pause, epoch_streams, train_segments
from .preemption import IntervalClock, StopSignals
from .schedule import LRSchedule
from .step import StepOptions, perplexity, set_lr

log = logging.getLogger("nbest_rescore.training.trainer")  # (the run's log lines keep their name)


class Clocks(NamedTuple):
    """Where a run's clocks started (as if it had never stopped): ``time.perf_counter()``
    (``wall``) and ``time.process_time()`` (``cpu``: all threads of this process)."""

    wall: float
    cpu: float

    def elapsed(self) -> Tuple[float, float]:
        """(wall, CPU) seconds of the run so far."""
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


class Learner(NamedTuple):
    """What a pass updates and how: the model, its optimiser, the step options, the
    ranks, the DDP forward (None for one process), CUDA graphs, a progress bar."""

    model: torch.nn.Module
    opt: torch.optim.Optimizer
    options: StepOptions
    world: distributed.World
    forward: Optional[Callable]
    graphs: bool
    progress: bool


class TrainText(NamedTuple):
    """The training documents (of the memory-mapped store), the training target ids per
    word (1 for word ids) and whether ids are pieces of words (``subword``: perplexity
    per token reported too)."""

    documents: Documents
    tokens_per_word: float
    subword: bool

    def words(self, run: checkpointing.RunState, tokens: int = 0) -> float:
        """Training words of the run: those of the epochs done and ``tokens`` of this one."""
        return (run.tokens + tokens) / self.tokens_per_word


class Validation(NamedTuple):
    """The validation text as streams: ``bptt`` the segment length they are scored in,
    ``words`` the perplexity's denominator (every word and one ``</s>`` per sentence, as
    :func:`~nbest_rescore.evaluation.perplexity.corpus_perplexity` counts them);
    ``clock``: when a point within an epoch is due (``optim.valid_every``)."""

    streams: StoreStreams
    bptt: int
    words: int
    clock: IntervalClock


class Saves(NamedTuple):
    """A run's outputs: ``write(run, position=None)`` writes an epoch's (with an
    :class:`~.passes.EpochPosition`: the mid-epoch state; the main rank only);
    ``clock``: when a mid-epoch checkpoint is due; ``signals``: SIGTERM/SIGINT received
    while training; ``last``: the resumable state's file (``<out>.last.pt``)."""

    write: Callable
    clock: IntervalClock
    signals: StopSignals
    last: str


class Training(NamedTuple):
    """What every epoch of a run uses (``valid`` None without validation text)."""

    cfg: TrainConfig
    learner: Learner
    text: TrainText
    valid: Optional[Validation]
    saves: Saves


def train_epoch(t: Training, run: checkpointing.RunState, epoch: int, start: Clocks) -> EpochStats:
    """The updates of one epoch over freshly dealt streams (a resumed mid-epoch
    ``run.position`` continues it), controlled by an :class:`_Epoch`, then its end
    unless no step was made (the time was spent) or a signal stopped it."""
    o, learner = t.cfg.optim, t.learner
    position, run.position = run.position, None  # (a resumed mid-epoch state: this epoch's)
    learner.world.seed_epoch(o.seed, epoch)
    streams = epoch_streams(t.text.documents, o.batch_size, o.bptt, o.seed + epoch if o.shuffle else None)
    if not run.planned_steps:  # planned once, from the first epoch's streams (kept on resume)
        run.planned_steps = -(-streams.shape[1] // o.bptt) * o.max_epochs
    this = _Epoch(t, run, epoch, start)
    learner.model.train()
    bar = Progress("tok", desc=f"epoch {epoch}", leave=False) if learner.progress else None
    with contextlib.closing(bar) if bar is not None else contextlib.nullcontext():
        stats = train_segments(learner.model, learner.opt, streams, o.bptt, learner.options,
                               before_step=this.before_step, first_step=run.step, log_interval=o.log_interval,
                               progress=bar, cuda_graph=learner.graphs, world=learner.world,
                               forward=learner.forward, start=None if position is None else EpochPosition(**position),
                               on_pause=this.on_pause)
    if stats.steps and not stats.preempted:
        this.end(stats)
    return stats


class _Epoch:
    """Epoch ``epoch`` of a run: its learning-rate schedule and the ranks' clock, and
    what the pass calls before each update and at a pause."""

    def __init__(self, t: Training, run: checkpointing.RunState, epoch: int, start: Clocks):
        self.t, self.run, self.epoch, self.start = t, run, epoch, start
        self.schedule = LRSchedule(t.cfg.optim, run.planned_steps)
        self.clock = distributed.Clock(t.learner.world, start.wall, t.cfg.optim.log_interval)  # K ranks: rank 0's

    def before_step(self, step: int, tokens: int, sums: Callable) -> bool | Pause | None:
        """``before_step`` of :func:`~.passes.train_segments`: stop (True) when
        ``optim.max_seconds`` is spent or a validation point due here ends the run
        early; else set the learning rate and the model's progress, and pause for a
        mid-epoch checkpoint when one is due (SAVE) or a signal came (PREEMPT)."""
        t, run, o = self.t, self.run, self.t.cfg.optim
        elapsed, signalled = self.clock(step, t.saves.signals.received is not None)
        if o.max_seconds and elapsed > o.max_seconds:
            return True  # the time budget is spent: no further update
        words = t.text.words(run, tokens)
        if t.valid is not None and t.valid.clock.due(step, elapsed, words):
            t.valid.clock.saved(step, elapsed, words)
            self.point(self.entry(step, tokens, *sums()), within=True)
            t.learner.model.train()
            if run.bad_epochs >= o.patience:
                return True  # early stopping within the epoch
        set_lr(t.learner.opt, o.lr * run.lr_scale * self.schedule.factor(step, elapsed))
        t.learner.model.on_progress(self.schedule.progress(step, elapsed))
        if signalled or t.saves.clock.due(step, elapsed):
            t.saves.clock.saved(step, elapsed)
            return Pause.PREEMPT if signalled else Pause.SAVE
        return None

    def on_pause(self, position: EpochPosition) -> None:
        """Write the mid-epoch state at ``position`` (called on every rank; the main one writes)."""
        seconds, cpu_seconds = self.start.elapsed()
        self.t.saves.write(dataclasses.replace(self.run, seconds=seconds, cpu_seconds=cpu_seconds), position)

    def entry(self, step: int, tokens: int, nll: float, aux: float) -> dict:
        """A history entry or learning-curve point before global update ``step``, after
        ``tokens`` real target tokens of the epoch with summed ``nll`` and auxiliary loss
        ``aux`` (nats): the epoch's training perplexity so far (per word; per token too
        for subwords), the auxiliary loss per token (only for a model that has one), the
        training words seen, wall and CPU seconds, learning rate."""
        text, run = self.t.text, self.run
        per_token = nll / max(1, tokens)
        seconds, cpu_seconds = self.start.elapsed()
        entry = {"epoch": self.epoch, "train_ppl": perplexity(per_token * text.tokens_per_word),
                 "seconds": seconds, "cpu_seconds": cpu_seconds,
                 "lr": float(self.t.learner.opt.param_groups[0]["lr"]), "steps": step, "tokens": run.tokens + tokens,
                 "words": round(text.words(run, tokens))}
        if text.subword:
            entry["train_token_ppl"] = perplexity(per_token)
        if aux:
            entry["aux_loss"] = aux / max(1, tokens)
        return entry

    def end(self, stats: EpochStats) -> None:
        """Count the epoch's updates into the run, validate (unless a point was just
        taken at this step), keep the best weights, log and add the epoch's history entry."""
        t, run = self.t, self.run
        entry = self.entry(run.step + stats.steps, stats.tokens, stats.nll, stats.aux)
        run.step += stats.steps
        run.tokens += stats.tokens
        if stats.abs_log_z is not None:
            entry["mean_abs_log_z"] = stats.abs_log_z / max(1, stats.tokens)
        if t.valid is not None:
            taken = run.curve and run.curve[-1]["steps"] == run.step  # (early stopping just validated)
            entry.update({k: v for k, v in run.curve[-1].items() if k.startswith("valid") or k == "memcells"}
                         if taken else self.point(dict(entry), within=False))
            t.valid.clock.saved(run.step, entry["seconds"], entry["words"])
        else:
            run.best_state = copy.deepcopy(t.learner.model.state_dict())
            log.info("epoch %d: train ppl %.2f, %.0f s", self.epoch, entry["train_ppl"], entry["seconds"])
        run.history.append(entry)
        # after validation, so that an epoch is validated with the settings it trained with
        t.learner.model.on_epoch_end(self.epoch)
        run.epoch = self.epoch
        run.seconds, run.cpu_seconds = self.start.elapsed()

    def point(self, entry: dict, within: bool) -> dict:
        """A validation point: validation perplexity (and memcell health) of the current
        weights added to ``entry`` (:meth:`entry`), which joins ``run.curve``; keep the
        weights when they are the best so far, else count a bad validation (and halve
        the learning rate with ``optim.halve_lr_on_plateau``). ``within``: within an
        epoch (logged as such). Returns the validation's keys."""
        model, world, valid, run = self.t.learner.model, self.t.learner.world, self.t.valid, self.run
        model.eval()
        model.begin_diagnostics()
        # K ranks: each scores its part of the streams, the sum is the same on all
        # ranks (so are the early-stopping decisions); diagnostics are rank 0's part
        mine = valid.streams.rows(world.part(valid.streams.shape[0]))
        nll = nll_of_streams(model, mine, valid.bptt, world.device) if mine.shape[0] else 0.0
        nll = world.sum(nll)[0]
        vppl = math.exp(nll / valid.words)  # per word: every word and one </s> per sentence
        health = model.end_diagnostics()
        found = {"valid_ppl": vppl}
        if self.t.text.subword:
            tokens = valid.streams.num_tokens
            found.update(valid_token_ppl=math.exp(nll / tokens), valid_tokens_per_word=tokens / valid.words)
        if health:
            found["memcells"] = health
        entry.update(found)
        log.info("epoch %d%s: train ppl %.2f, valid ppl %.2f%s, lr %.2e, %.0f s", entry["epoch"],
                 f", {entry['words']} words" if within else "", entry["train_ppl"], vppl,
                 f", aux loss {entry['aux_loss']:.4f}" if "aux_loss" in entry else "", entry["lr"], entry["seconds"])
        if health:
            log.info("epoch %d memcells: %s", entry["epoch"], ", ".join(f"{k} {v}" for k, v in health.items()))
        if vppl < run.best_ppl:
            run.best_ppl, run.bad_epochs = vppl, 0
            run.best_state = copy.deepcopy(model.state_dict())
        else:
            run.bad_epochs += 1
            if self.t.cfg.optim.halve_lr_on_plateau:
                run.lr_scale *= 0.5
        run.curve.append(entry)
        return found
