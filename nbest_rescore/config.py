"""Dataclass configs loaded from YAML (training configs in ``examples/*.yaml``).

Relative paths in a config are resolved against the current directory (run commands
from the repository root); if not found there, against the config file's directory
and its parent.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from .errors import DataError


@dataclass
class DataConfig:
    """Training text: one sentence per line, blank lines between documents."""

    train: str = "../shared/data/abc-nbest/lm/lm_train.txt"
    valid: Optional[str] = "../shared/data/abc-nbest/lm/lm_valid.txt"
    max_words: Optional[int] = None  # word budget: train on a prefix of the text
    max_valid_words: Optional[int] = None


@dataclass
class VocabConfig:
    """Vocabulary: the ``max_size`` most frequent training words (incl. ``</s>``,
    ``<unk>``) with count >= ``min_count``, optionally restricted to the words of
    ``restrict_to`` (e.g. the first-pass vocabulary), or read from ``file``."""

    max_size: Optional[int] = 20000
    min_count: int = 1
    restrict_to: Optional[str] = None
    file: Optional[str] = None


OPTIMIZERS = ("adam", "adamw", "sgd")
LR_SCHEDULES = ("constant", "cosine", "linear")
TRAIN_DTYPES = ("float32", "bfloat16")


@dataclass
class OptimConfig:
    """Optimisation: ``optimizer`` (Adam by default) with gradient-norm clipping;
    the learning rate warms up linearly over ``warmup_steps`` updates and then
    follows ``lr_schedule`` over the planned training length (``max_epochs``, or
    ``max_seconds`` when that comes first), down to ``min_lr_ratio * lr``; with
    ``halve_lr_on_plateau`` it is also halved whenever validation perplexity does
    not improve. Training stops after ``patience`` epochs without improvement,
    after ``max_epochs``, or when ``max_seconds`` have passed. Documents are dealt to
    the ``batch_size`` streams in a new seeded order every epoch (``shuffle``).
    ``dtype: bfloat16`` trains under CUDA autocast (float32 master weights); TF32
    matrix products are allowed in training on CUDA (scoring stays float32), and with
    ``cuda_graph`` the whole step is replayed as one CUDA graph (eager fallback for
    models whose step cannot be captured)."""

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
    # alpha of the self-normalisation (variance) regulariser alpha * mean (log Z)^2,
    # Chen et al. 2016 (``000`` section 3.5, ref. [45]); 0 = plain cross-entropy
    self_norm_weight: float = 0.0
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

    def __post_init__(self):
        if not self.self_norm_weight >= 0:
            raise DataError(f"optim.self_norm_weight must be >= 0 (0 = off, e.g. 0.1), "
                            f"got {self.self_norm_weight!r}")
        for key, choices in (("optimizer", OPTIMIZERS), ("lr_schedule", LR_SCHEDULES), ("dtype", TRAIN_DTYPES)):
            if getattr(self, key) not in choices:
                raise DataError(f"optim.{key} must be one of {', '.join(choices)}, got {getattr(self, key)!r}")
        for key in ("batch_size", "bptt", "max_epochs", "log_interval", "checkpoint_every"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise DataError(f"optim.{key} must be an integer >= 1, got {v!r}")
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise DataError(f"optim.warmup_steps must be an integer >= 0, got {self.warmup_steps!r}")
        for key in ("lr", "clip"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise DataError(f"optim.{key} must be a number > 0, got {v!r}")
        for key in ("shuffle", "cuda_graph", "halve_lr_on_plateau"):
            if not isinstance(getattr(self, key), bool):
                raise DataError(f"optim.{key} must be true or false, got {getattr(self, key)!r}")
        for key in ("weight_decay", "momentum"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise DataError(f"optim.{key} must be a number >= 0, got {v!r}")
        if not (isinstance(self.min_lr_ratio, (int, float)) and 0 <= self.min_lr_ratio <= 1):
            raise DataError(f"optim.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio!r}")


@dataclass
class TrainConfig:
    """A training config: model name and its options (``model_config``, see the
    model's ``Config`` dataclass), data, vocabulary and optimisation sections."""

    model: str = "gru"
    model_config: dict = field(default_factory=dict)
    data: DataConfig = field(default_factory=DataConfig)
    vocab: VocabConfig = field(default_factory=VocabConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)


def _build(cls, values, where):
    if values is None:
        return cls()
    if not isinstance(values, dict):
        raise DataError(f"{where}: expected a mapping, found {type(values).__name__}")
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(values) - set(names)
    if unknown:
        raise DataError(f"{where}: unknown key(s) {sorted(unknown)}; valid: {sorted(names)}")
    kwargs = {}
    for k, v in values.items():
        sub = {"data": DataConfig, "vocab": VocabConfig, "optim": OptimConfig}.get(k) if cls is TrainConfig else None
        kwargs[k] = _build(sub, v, f"{where}.{k}") if sub else v
    return cls(**kwargs)


def load_train_config(path) -> TrainConfig:
    """Read a YAML training config. Raises DataError for unreadable YAML or unknown keys."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise DataError(f"cannot read config {path}: {exc}") from exc
    cfg = _build(TrainConfig, raw, str(path))
    base = Path(path).resolve().parent
    for section, key in (("data", "train"), ("data", "valid"), ("vocab", "restrict_to"), ("vocab", "file")):
        obj = getattr(cfg, section)
        val = getattr(obj, key)
        if val:
            setattr(obj, key, resolve_path(val, base))
    return cfg


def resolve_path(value: str, config_dir: Path) -> str:
    """``value`` if it exists relative to the current directory, else relative to the
    config's directory or its parent; DataError listing the places tried."""
    p = Path(value)
    if p.is_absolute():
        candidates = [p]
    else:
        candidates = [Path.cwd() / p, config_dir / p, config_dir.parent / p]
    for c in candidates:
        if c.exists():
            return str(c)
    raise DataError(f"file {value!r} not found; tried: {', '.join(str(c) for c in candidates)}")


def config_to_dict(cfg: TrainConfig) -> dict:
    """Plain nested dict of a config (stored in checkpoints)."""
    return dataclasses.asdict(cfg)
