"""Dataclass configs loaded from YAML (training configs in ``examples/*.yaml``).

Relative paths in a config are resolved against the current directory (run commands
from the repository root); if not found there, against the config file's directory
and its parent.

Every value is checked when a config is built (:func:`check_fields`, run by each
dataclass's ``__post_init__``), and the model name and ``model_config`` by
:func:`validate_train_config`, before any data is read.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from .errors import DataError
from .options import TRAIN_DTYPES  # optim.dtype: the choices of train --dtype
from .validation import check_fields, describe_value
from .vocab import MIN_VOCAB_SIZE, SPECIALS


@dataclass
class DataConfig:
    """Training text: one sentence per line, blank lines between documents."""

    train: str = "../shared/data/abc-nbest/lm/lm_train.txt"
    valid: Optional[str] = "../shared/data/abc-nbest/lm/lm_valid.txt"
    max_words: Optional[int] = None  # word budget: train on a prefix of the text
    max_valid_words: Optional[int] = None

    _SECTION = "data"
    _EXAMPLES = {"train": "data/lm_train.txt", "valid": "data/lm_valid.txt", "max_words": 1000000,
                 "max_valid_words": 100000}

    def __post_init__(self):
        _paths_to_str(self, ("train", "valid"))
        check_fields(self)


@dataclass
class VocabConfig:
    """Vocabulary: the ``max_size`` most frequent training words (incl. ``</s>``,
    ``<unk>``) with count >= ``min_count``, optionally restricted to the words of
    ``restrict_to`` (e.g. the first-pass vocabulary), or read from ``file``."""

    max_size: Optional[int] = 20000
    min_count: int = 1
    restrict_to: Optional[str] = None
    file: Optional[str] = None

    _SECTION = "vocab"
    _RANGES = {"max_size": f">= {MIN_VOCAB_SIZE} ({', '.join(SPECIALS)} and at least one word)"}
    _EXAMPLES = {"restrict_to": "data/lang/words.txt", "file": "data/lm_vocab.txt"}

    def __post_init__(self):
        _paths_to_str(self, ("restrict_to", "file"))
        check_fields(self)


OPTIMIZERS = ("adam", "adamw", "sgd")
LR_SCHEDULES = ("constant", "cosine", "linear")


@dataclass
class OptimConfig:
    """Optimisation, each key as the table of docs/training.md (Optimiser) says;
    training stops after ``patience`` epochs without improvement, ``max_epochs`` or
    ``max_seconds``."""

    batch_size: int = 32
    bptt: int = 20
    lr: float = 1e-3
    clip: float = 10.0
    max_epochs: int = 10
    patience: int = 2
    halve_lr_on_plateau: bool = True
    max_seconds: Optional[float] = None
    seed: int = 0
    threads: Optional[int] = None
    self_norm_weight: float = 0.0  # alpha, see trainer.segment_loss; 0 = plain cross-entropy
    optimizer: str = "adam"
    weight_decay: float = 0.0
    momentum: float = 0.0  # sgd only
    lr_schedule: str = "constant"
    warmup_steps: int = 0
    min_lr_ratio: float = 0.0
    shuffle: bool = True
    dtype: str = "float32"
    log_interval: int = 50  # steps between reads of the loss for the progress bar
    cuda_graph: bool = True  # on CUDA: replay the training step as one CUDA graph
    checkpoint_every: int = 1  # epochs between checkpoints (the last epoch is always saved)
    # full softmax: the loss through the fused output layer (vocabulary blocks, no [N, V]
    # logits or gradient kept; one more block product per step), see models/fused_output.py
    fused_softmax: bool = False

    _SECTION = "optim"
    _RANGES = {"lr": "> 0", "clip": "> 0", "max_seconds": "> 0", "seed": ">= 0", "warmup_steps": ">= 0",
               "self_norm_weight": ">= 0 (0 = off)", "weight_decay": ">= 0", "momentum": ">= 0",
               "min_lr_ratio": "[0, 1]"}
    _CHOICES = {"optimizer": OPTIMIZERS, "lr_schedule": LR_SCHEDULES, "dtype": TRAIN_DTYPES}
    _EXAMPLES = {"max_seconds": 3600, "threads": 4, "self_norm_weight": 0.1}

    def __post_init__(self):
        check_fields(self)


@dataclass
class TrainConfig:
    """A training config: model name and its options (``model_config``, see the
    model's ``Config`` dataclass), data, vocabulary and optimisation sections."""

    model: str = "gru"
    model_config: dict = field(default_factory=dict)
    data: DataConfig = field(default_factory=DataConfig)
    vocab: VocabConfig = field(default_factory=VocabConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)

    _SECTION = ""
    _EXAMPLES = {"model_config": "{hidden_size: 512}"}

    def __post_init__(self):
        check_fields(self)
        for key, cls in _SECTIONS.items():
            if not isinstance(getattr(self, key), cls):
                raise DataError(f"{key} must be the {key} section ({cls.__name__}, a mapping in YAML), "
                                f"got {getattr(self, key)!r}")


_SECTIONS = {"data": DataConfig, "vocab": VocabConfig, "optim": OptimConfig}


def _paths_to_str(obj, names) -> None:
    """Path objects given by Python callers become strings (as YAML gives them)."""
    for name in names:
        v = getattr(obj, name)
        if isinstance(v, os.PathLike):
            setattr(obj, name, os.fspath(v))


def _build(cls, values, section: str = ""):
    """``cls(**values)`` for a YAML mapping (sections built recursively); DataError
    for a non-mapping, unknown keys or bad values (messages without the file name)."""
    if values is None:
        return cls()
    where = section or "the config"
    if not isinstance(values, dict):
        raise DataError(f"{where} must be a mapping (key: value lines), got {describe_value(values)}")
    valid = sorted(f.name for f in dataclasses.fields(cls))
    unknown = sorted(str(k) for k in values if k not in valid)
    if unknown:  # with close matches suggested
        hints = [f"{k!r} -> did you mean {m[0]!r}?" for k in unknown
                 for m in [difflib.get_close_matches(k, valid, n=1)] if m]
        raise DataError(f"{where}: unknown key(s) {unknown}" + (f" ({'; '.join(hints)})" if hints else "")
                        + f"; valid: {valid}")
    if cls is TrainConfig:
        values = {k: _build(_SECTIONS[k], v, k) if k in _SECTIONS else {} if k == "model_config" and v is None else v
                  for k, v in values.items()}
    return cls(**values)


def validate_train_config(cfg: TrainConfig, source=None) -> None:
    """Check a whole training config before any data is read or model built: every
    section's fields (again, so that values set after loading, e.g. CLI overrides, are
    checked too), the model name and ``model_config`` against the model's ``Config``.

    Args:
        cfg: the config; source: the config file, named at the start of messages.
    Raises:
        DataError: ``"<source>: optim.lr must be a finite number > 0, got -0.1; e.g. lr: 0.001"``.
    """
    from .models.registry import config_from_dict, get_model_class  # lazy: models import torch

    try:
        for key in _SECTIONS:
            dataclasses.replace(getattr(cfg, key))  # re-runs __post_init__ on the current values
        dataclasses.replace(cfg)
        config_from_dict(get_model_class(cfg.model).Config, cfg.model_config)
    except DataError as exc:
        if source is None:
            raise
        raise DataError(f"{source}: {exc}") from None


def load_train_config(path) -> TrainConfig:
    """Read a YAML training config and check it (:func:`validate_train_config`);
    relative paths are resolved (:func:`resolve_path`). Raises DataError, starting
    with the file name, for unreadable YAML, unknown keys, bad values, an unknown
    model or a missing data file."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        raise DataError(f"cannot read config {path}: {exc}") from exc
    try:
        cfg = _build(TrainConfig, {} if raw is None else raw)
        validate_train_config(cfg)
        base = Path(path).resolve().parent
        for section, key in (("data", "train"), ("data", "valid"), ("vocab", "restrict_to"), ("vocab", "file")):
            val = getattr(obj := getattr(cfg, section), key)
            if val:
                try:
                    setattr(obj, key, resolve_path(val, base))
                except DataError as exc:
                    raise DataError(f"{section}.{key}: {exc}") from None
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None
    return cfg


def resolve_path(value: str, config_dir: Path) -> str:
    """``value`` if it exists relative to the current directory, else relative to the
    config's directory or its parent; DataError listing the places tried."""
    p = Path(value)
    candidates = [p] if p.is_absolute() else [Path.cwd() / p, config_dir / p, config_dir.parent / p]
    for c in candidates:
        if c.exists():
            return str(c)
    raise DataError(f"file {value!r} not found; tried: {', '.join(str(c) for c in candidates)}")
