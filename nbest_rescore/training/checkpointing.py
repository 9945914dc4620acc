"""Epoch checkpoints of a training run (docs/training.md: ``--out``, ``<out>.last.pt``,
``--resume``, ``--init-from``) and starting from them. Both files are model checkpoints
(:mod:`nbest_rescore.io.checkpoint`), written atomically; ``.last.pt`` adds a ``resume``
entry (:func:`save_epoch`).
"""
from __future__ import annotations

import math
import dataclasses
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

import torch

from ..config import TrainConfig
from ..errors import DataError
from ..io.output_checks import check_output_file
from ..io.checkpoint import load_checkpoint
from ..os_errors import output_error
from ..models import save_model
from ..vocab import Vocabulary


def last_path(out_path) -> str:
    """``exp/gru.pt`` -> ``exp/gru.last.pt``: the resumable state of a run."""
    p = Path(out_path)
    return str(p.with_name(p.stem + ".last" + (p.suffix or ".pt")))


def check_writable(out_path) -> None:
    """Create the folder of ``out_path`` if needed and check a file can be written
    there, before any training starts.

    Raises:
        DataError: naming the path, when it is a folder or special file, or cannot be
            created/written (why, and a fix: :func:`~nbest_rescore.os_errors.output_error`).
    """
    p = Path(out_path)
    if p.is_dir():
        raise DataError(f"--out {out_path}: is a folder; give a checkpoint file name such as {p / 'model.pt'}")
    above = next((a for a in p.parents if a.exists()), None)
    if above is not None and not above.is_dir():
        raise DataError(f"--out {out_path}: {above} is a file, so no folder can be made below it; choose another --out")
    for path in (out_path, last_path(out_path)):
        check_output_file(path, "--out")  # what is there; whether this user may write there
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise output_error(exc, out_path, "--out") from None


@dataclass
class RunState:
    """The progress of a run that a resume restores: as of the end of epoch ``epoch``,
    and ``position`` in the next one when the state was written mid-epoch."""

    epoch: int = 0
    step: int = 0
    planned_steps: int = 0  # optimiser steps the schedule plans for (0: not yet known)
    tokens: int = 0
    seconds: float = 0.0
    lr_scale: float = 1.0
    best_ppl: float = math.inf
    bad_epochs: int = 0  # validations (epoch ends and optim.valid_every points) since the best
    history: list = field(default_factory=list)
    curve: list = field(default_factory=list)  # every validation point (epoch._Epoch.entry)
    cpu_seconds: float = 0.0
    best_state: Optional[dict] = None
    # a mid-epoch state (passes.EpochPosition as a dict) of epoch ``epoch`` + 1
    position: Optional[dict] = None

    @property
    def best_valid_ppl(self) -> Optional[float]:
        """``best_ppl``, None before any validation (as checkpoints store it)."""
        return self.best_ppl if math.isfinite(self.best_ppl) else None


@dataclass
class Loaded:
    """A checkpoint to start from: its payload and vocabulary."""

    path: str
    payload: dict
    vocab: Vocabulary


def save_epoch(out_path, model, vocab: Vocabulary, run: RunState, opt, info: dict) -> None:
    """Write the best weights to ``out_path`` and the resumable state (:func:`save_last`,
    :func:`resume_state`) to :func:`last_path`, each atomically.

    Raises:
        DataError: a file cannot be written (no space, read-only file system,
            permission ...: one line naming ``--out`` and the file).
    """
    save_model(out_path, model, vocab, info, state_dict=run.best_state, option="--out")  # (None: the current weights)
    save_last(out_path, model, vocab, run, opt, info)


def save_last(out_path, model, vocab: Vocabulary, run: RunState, opt, info: dict,
              position: Optional[dict] = None) -> None:
    """Write the resumable state (the current weights, :func:`resume_state`) to
    :func:`last_path`, atomically; ``position``: written mid-epoch (a
    :class:`~.passes.EpochPosition` as a dict). Raises DataError as :func:`save_epoch`."""
    best = run.best_state if run.best_state is not None else model.state_dict()
    save_model(last_path(out_path), model, vocab, info, extra={"resume": resume_state(run, opt, best, position)},
               option="--out")


def resume_state(run: RunState, opt, best: dict, position: Optional[dict] = None) -> dict:
    """The ``resume`` entry of a ``.last.pt`` (:func:`restore` reads it back): the
    :class:`RunState` (``best_ppl`` None before any validation), the best weights
    ``best``, the optimiser state, the random-number states and (mid-epoch) the
    ``position`` in the epoch after ``run.epoch``."""
    return {**dataclasses.asdict(replace(run, history=[], curve=[], best_state=None, position=None)),
            "best_ppl": run.best_valid_ppl, "history": list(run.history), "curve": list(run.curve),
            "best_state": {k: v.detach().cpu().clone() for k, v in best.items()}, "position": position,
            "optimizer": opt.state_dict(), "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []}


def load_start(path, cfg: TrainConfig, resume: bool, model_keys=("model_config",), vocabulary: bool = True,
               hint: str = " (use --init-from to fine-tune from a model)") -> Loaded:
    """Read the checkpoint of ``--resume`` (must hold a resumable state) or
    ``--init-from``, checking that it is a ``cfg.model`` model. A resumed run must
    share ``model_keys``, :data:`RESUME_KEYS` and (``vocabulary``) :data:`VOCAB_KEYS`
    with the config (:func:`check_resume_config`); ``vocabulary``: the stored one is
    read (else :attr:`Loaded.vocab` is None); ``hint`` ends the no-state message.

    Raises:
        DataError: unreadable checkpoint, no resume state, another model type, or
            (resume) another model config than ``cfg``.
    """
    opt = "--resume" if resume else "--init-from"
    payload = load_checkpoint(path)
    if resume and "resume" not in payload:
        raise DataError(f"{opt} {path}: holds no training state; resume from the <out>.last.pt file "
                        f"written after every epoch{hint}")
    if payload["model"] != cfg.model:
        raise DataError(f"{opt} {path}: is a {payload['model']!r} model but the config trains {cfg.model!r}")
    if resume:
        check_resume_config(path, payload, cfg, (*model_keys, *RESUME_KEYS, *(VOCAB_KEYS if vocabulary else ())))
    return Loaded(str(path), payload, Vocabulary(payload["vocab"]) if vocabulary else None)


#: Config keys a resumed run must share with the run that wrote its state: the position
#: within an epoch, the optimiser's state and the document order depend on them. The
#: rest (max_epochs, max_seconds, patience, lr, threads, intervals ...) may change.
RESUME_KEYS = ("data.max_words", "optim.optimizer", "optim.batch_size", "optim.bptt", "optim.seed",
               "optim.shuffle")
#: The vocabulary's keys (a resumed run keeps its stored vocabulary: other values would be ignored).
VOCAB_KEYS = ("vocab.max_size", "vocab.min_count", "vocab.restrict_to", "vocab.file")


def _comparable(key: str, value):
    """``model_config`` without what training fills in (``adaptive_cutoffs``) or leaves at
    its default whether written or not (``direction: forward``); other values as they are."""
    if key != "model_config" or not isinstance(value, dict):
        return value
    return {k: v for k, v in value.items() if k != "adaptive_cutoffs" and (k, v) != ("direction", "forward")}


def check_resume_config(path, payload: dict, cfg: TrainConfig, keys) -> None:
    """Compare ``cfg`` with the config stored in a ``--resume`` checkpoint, before any
    state is restored: ``keys`` are ``section.key`` (or a whole top-level key such as
    ``model_config``); keys the checkpoint does not hold (older versions) are skipped.

    Raises:
        DataError: one line naming every key that differs, with both values and the fix.
    """
    stored = payload.get("info", {}).get("train_config")
    if not isinstance(stored, dict):
        return
    mine, diffs = dataclasses.asdict(cfg), []
    for key in keys:
        section, _, name = key.partition(".")
        theirs_at, mine_at = (stored.get(section), mine.get(section)) if name else (stored, mine)
        name = name or section
        if not isinstance(theirs_at, dict) or name not in theirs_at:
            continue
        theirs, ours = _comparable(name, theirs_at[name]), _comparable(name, (mine_at or {}).get(name))
        if theirs != ours:
            diffs.append(f"{key} {theirs!r} (the run's) against {ours!r} (the config's)")
    if diffs:
        raise DataError(f"--resume {path}: the config differs from the run's: {'; '.join(diffs)}; resume with the "
                        f"run's own values, or train a new run without --resume")


def load_weights(model, loaded: Loaded) -> None:
    """Load the checkpoint's weights into ``model``.

    Raises:
        DataError: the shapes or names differ from the configured model.
    """
    try:
        model.load_state_dict(loaded.payload["state_dict"])
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        raise DataError(f"{loaded.path}: weights do not fit the configured {model.name} "
                        f"({first[0] if first else exc}); use the config the checkpoint was trained with") from None


def restore(loaded: Loaded, model, opt, device) -> RunState:
    """The :class:`RunState` of a ``--resume`` checkpoint; loads the optimiser state
    and the random-number states (weights: :func:`load_weights`)."""
    r = loaded.payload["resume"]
    opt.load_state_dict(r["optimizer"])
    torch.set_rng_state(r["rng"])
    if r.get("cuda_rng") and torch.device(device).type == "cuda":
        torch.cuda.set_rng_state_all(r["cuda_rng"])
    counts = {f.name: type(f.default)(r[f.name]) for f in dataclasses.fields(RunState)
              if f.name in r and f.name not in ("best_ppl", "history", "curve", "best_state", "position")}
    best = {k: v.to(device) for k, v in r["best_state"].items()} if r.get("best_state") else None
    return RunState(**counts, best_ppl=math.inf if r.get("best_ppl") is None else float(r["best_ppl"]),
                    history=list(r["history"]), curve=list(r.get("curve", [])), best_state=best,
                    position=r.get("position"))


__all__ = ["last_path", "check_writable", "RunState", "save_epoch", "save_last", "resume_state", "load_start", "load_weights",
           "restore"]
