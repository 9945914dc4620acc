"""Corpus-level training (``000`` section 5.1), as docs/training.md ("What ``train``
does") describes: the run and its resume. :func:`train` checks, reads the text from a
memory-mapped token store (:mod:`.data`; a backward model reads its documents reversed,
``data.max_words`` taking its prefix of the text before the reversal), builds the model
and optimiser with the model family's steps (:mod:`.family`), restores a resumed
:class:`~.checkpointing.RunState` and runs the epochs of :mod:`.epoch`, writing the
checkpoints of :mod:`.checkpointing`, with DDP of :mod:`.distributed`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import time
from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from ..config import HF_MODEL, TrainConfig, parse_interval, validate_train_config
from ..corpus import deal
from ..store_streams import StoreStreams
from ..errors import DataError
from . import checkpointing, distributed
from .data import TrainData, load_train_data
from .epoch import Clocks, Learner, Saves, Training, TrainText, Validation, train_epoch
from .family import TrainFamily
from .passes import EpochPosition
from .preemption import IntervalClock, Preempted, StopSignals
from .step import StepOptions, make_optimizer, segment_forward
from .word_family import WordFamily

log = logging.getLogger(__name__)


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
    o, saves = t.cfg.optim, t.saves
    start = Clocks(time.perf_counter() - run.seconds, time.process_time() - run.cpu_seconds)
    # a resumed run that had already stopped early trains no further epoch
    first_epoch = run.epoch + 1 if run.bad_epochs < o.patience else o.max_epochs + 1
    with _training_precision(world.device), saves.signals:
        for epoch in range(first_epoch, o.max_epochs + 1):
            stats = train_epoch(t, run, epoch, start)
            if stats.preempted:
                raise Preempted(f"training stopped by {saves.signals.received or 'a signal'} in epoch {epoch} before "
                                f"step {run.step + stats.steps}; its state is in {saves.last}: continue with --resume "
                                f"{saves.last} (or --resume auto)")
            if stats.steps == 0:  # the time budget was spent before this epoch began
                break
            last = (stats.timed_out or run.bad_epochs >= o.patience or epoch == o.max_epochs
                    or (stop_after_epochs is not None and epoch - first_epoch + 1 >= stop_after_epochs))
            if last or epoch % o.checkpoint_every == 0:
                saves.write(run)
            if last:
                break
    if run.best_state is not None:
        t.learner.model.load_state_dict(run.best_state)
    seconds = time.perf_counter() - start.wall
    return TrainResult(run.epoch, run.best_valid_ppl, run.history[-1]["train_ppl"] if run.history else math.nan,
                       seconds, run.tokens / t.text.tokens_per_word / max(seconds, 1e-9), run.history, world.rank,
                       list(run.curve))


def _prepare(cfg: TrainConfig, out_path, world: distributed.World, progress: bool, resume: Optional[str],
             init_from: Optional[str]) -> Tuple[Training, checkpointing.RunState]:
    """Everything before the first epoch: checks, the text, the model, the optimiser and
    (``resume``) the restored :class:`~.checkpointing.RunState`."""
    o = cfg.optim
    family = family_of(cfg)
    direction = family.check(cfg, out_path, world)  # fail before any data is read
    if o.dtype == "bfloat16" and world.device.type != "cuda":
        raise DataError(f"optim.dtype bfloat16 (mixed precision) trains on CUDA only; the device is "
                        f"{world.device}: use --device cuda or --dtype float32")
    if resume and init_from:
        raise DataError("--resume and --init-from exclude each other: resume continues a run, "
                        "init-from starts a new one from trained weights")
    torch.manual_seed(o.seed)
    if o.threads:
        torch.set_num_threads(o.threads)
    loaded = family.load_start(resume or init_from, cfg, resume=bool(resume)) if (resume or init_from) else None
    data = load_train_data(cfg, family.encoding(cfg, loaded, bool(resume)), out_path, world, direction,
                           progress and world.main)
    text = family.text(cfg, data.store, loaded)  # the vocabulary, or the tokenizer's convention
    cfg, model, params = family.build(cfg, text, data, loaded, world.device)
    learner, run = _learner(cfg, model, world, loaded, resume, progress)
    train_text = TrainText(data.train, data.tokens_per_word, family.subword)

    def write(r: checkpointing.RunState, position: Optional[EpochPosition] = None) -> None:
        if world.main:  # (the only rank that writes)
            family.save(out_path, model, text, r, learner.opt, _info(cfg, params, r, train_text.tokens_per_word),
                        None if position is None else position._asdict())

    done = run.step + (run.position["segments"] if run.position else 0)
    saves = Saves(write, IntervalClock(parse_interval(o.checkpoint_interval), done, run.seconds), StopSignals(),
                  checkpointing.last_path(out_path))
    return Training(cfg, learner, train_text, _validation(cfg, data, family, run, done, train_text), saves), run


def _learner(cfg: TrainConfig, model, world: distributed.World, loaded, resume: Optional[str],
             progress: bool) -> Tuple[Learner, checkpointing.RunState]:
    """The optimiser and step options of ``model``, the run state (``resume``: restored
    from ``loaded``) and the DDP forward (None for one process)."""
    o = cfg.optim
    graphs = o.cuda_graph and world.device.type == "cuda" and not world.distributed
    if o.cuda_graph and world.device.type == "cuda" and world.distributed:
        log.info("CUDA graphs are off under DistributedDataParallel (its gradient all-reduce runs outside a graph)")
    opt = make_optimizer(model, o, capturable=graphs)
    options = StepOptions(o.clip, o.self_norm_weight, torch.bfloat16 if o.dtype == "bfloat16" else None)
    run = checkpointing.restore(loaded, model, opt, world.device) if resume else checkpointing.RunState()
    _check_position(run, world, resume)
    ddp = world.wrap(model, functools.partial(segment_forward, model))
    return Learner(model, opt, options, world, ddp, graphs, progress and world.main), run


def _validation(cfg: TrainConfig, data: TrainData, family: TrainFamily, run: checkpointing.RunState, done: int,
                text: TrainText) -> Optional[Validation]:
    """The validation documents as 64 streams aligned to the family's validation
    segment length (None without validation text), with when the next point within an
    epoch is due: ``optim.valid_every`` after the last point (every point restarts it;
    a resumed run counts from the last point it recorded, as the uninterrupted run
    would), else from global step ``done``."""
    if data.valid is None or not len(data.valid):
        return None
    bptt = family.eval_bptt(cfg)
    every = parse_interval(cfg.optim.valid_every, "optim.valid_every", "words")
    p = run.curve[-1] if run.curve else None
    clock = (IntervalClock(every, p["steps"], p["seconds"], p["words"]) if p is not None
             else IntervalClock(every, done, run.seconds, text.words(run)))
    return Validation(StoreStreams(deal(data.valid, 64, align=bptt)), bptt, data.valid_words, clock)


def _check_position(run: checkpointing.RunState, world: distributed.World, resume: Optional[str]) -> None:
    """A mid-epoch state continues only with as many processes as wrote it."""
    saved = len(run.position["ranks"]) if run.position else world.size
    if saved != world.size:
        raise DataError(f"--resume {resume}: was written in the middle of an epoch by {saved} processes; resume with "
                        f"{saved} (torchrun --nproc_per_node {saved})" if saved > 1 else
                        f"--resume {resume}: was written in the middle of an epoch by one process; resume without "
                        f"torchrun")


def family_of(cfg: TrainConfig) -> TrainFamily:
    """The family of ``cfg.model`` (:class:`~.word_family.WordFamily`, or for ``model: hf``
    :class:`~.hf_train.HfFamily`, imported only then)."""
    if cfg.model == HF_MODEL:
        from .hf_train import HfFamily

        return HfFamily()
    return WordFamily()


def _info(cfg: TrainConfig, params: dict, run: checkpointing.RunState, tokens_per_word: float = 1.0) -> dict:
    """Training facts stored in the checkpoint (``nbest-rescore info`` reads them)."""
    return {"train_config": dataclasses.asdict(cfg), "parameters": params, "epochs": run.epoch,
            "best_valid_ppl": run.best_valid_ppl,
            "seconds": run.seconds, "words_per_s": run.tokens / tokens_per_word / max(run.seconds, 1e-9),
            "history": list(run.history), "curve": list(run.curve)}
