"""Dataclass configs loaded from YAML (training configs in ``examples/*.yaml``).

Relative paths in a config are resolved against the current directory (run commands
from the repository root); if not found there, against the config file's directory
and its parent.

Every key is declared with its kind and range or choices (:func:`~nbest_rescore.options.option`)
and checked when its section is built (:func:`~nbest_rescore.validation.check_options`);
what spans sections by :func:`validate_train_config`, before any data is read.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from .errors import DataError
from .options import TRAIN_DTYPES  # optim.dtype: the choices of train --dtype
from .options import option
from .os_errors import os_error_message
from .validation import check_options, describe_value
from .vocab import MIN_VOCAB_SIZE, SPECIALS


class _Section:
    """A frozen config section whose ``_PATHS`` keys name files: Path objects given by
    Python callers become strings (as YAML gives them), then every key is checked."""

    _PATHS = ()

    def __post_init__(self):
        for name in self._PATHS:
            if isinstance(getattr(self, name), os.PathLike):
                object.__setattr__(self, name, os.fspath(getattr(self, name)))  # (its own field, on construction)
        check_options(self)


@dataclass(frozen=True)
class DataConfig(_Section):
    """Training text: one sentence per line, blank lines between documents. ``train``
    is required (:func:`validate_train_config` says so); without ``valid`` the run has no
    validation (no perplexity points, no early stopping; the last weights are kept)."""

    # a text file, a Kaldi rnnlm-style data directory (NAME.txt per source, dev.txt) or a
    # token store of prepare-text (docs/training.md "Prepared text")
    train: Optional[str] = option(None, kind="str", example="data/lm_train.txt")
    valid: Optional[str] = option(None, kind="str", example="data/lm_valid.txt")
    # SOURCE REPEATS WEIGHT per line (Kaldi's data_weights.txt) for several sources
    weights: Optional[str] = option(None, kind="str", example="data/data_weights.txt")
    # word budget: train on a prefix of the text
    max_words: Optional[int] = option(None, kind="int", range=">= 1", example=1000000)
    max_valid_words: Optional[int] = option(None, kind="int", range=">= 1", example=100000)

    _SECTION = "data"
    _PATHS = ("train", "valid", "weights")


@dataclass(frozen=True)
class VocabConfig(_Section):
    """Vocabulary: the ``max_size`` most frequent training words (incl. ``</s>``,
    ``<unk>``) with count >= ``min_count``, optionally restricted to the words of
    ``restrict_to`` (e.g. the first-pass vocabulary), or read from ``file``."""

    max_size: Optional[int] = option(20000, kind="int", nullable=True,
                                     range=f">= {MIN_VOCAB_SIZE} ({', '.join(SPECIALS)} and at least one word)")
    min_count: int = option(1, kind="int", range=">= 1")
    restrict_to: Optional[str] = option(None, kind="str", example="data/lang/words.txt")
    file: Optional[str] = option(None, kind="str", example="data/lm_vocab.txt")

    _SECTION = "vocab"
    _PATHS = ("restrict_to", "file")


_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([a-z]*)\s*$")


@dataclass(frozen=True)
class Interval:
    """Every ``seconds`` of training, every ``steps`` optimiser steps or every
    ``words`` training words (at most one set; none: off, only at epoch ends). The
    mid-epoch checkpoints (``optim.checkpoint_interval``: a time or steps) and the
    validation points (``optim.valid_every``: a time or words) are such intervals."""

    seconds: Optional[float] = None
    steps: Optional[int] = None
    words: Optional[int] = None

    @property
    def off(self) -> bool:
        """Nothing within an epoch (only at epoch ends)."""
        return self.seconds is None and self.steps is None and self.words is None


#: The counted units an interval may take besides a time: ``steps`` (checkpoints) or
#: ``words`` (validation points), each unit name -> multiplier.
_COUNTS = {"steps": {"step": 1, "steps": 1}, "words": {"word": 1, "words": 1, "kwords": 1000, "mwords": 1000000}}
_COUNT_EXAMPLES = {"steps": "a number of optimiser steps (e.g. 500steps)",
                   "words": "a number of training words (e.g. 300000words, 300kwords)"}


def parse_interval(text, key: str = "optim.checkpoint_interval", count: str = "steps") -> Interval:
    """``"5m"`` -> every 300 s, ``"500steps"`` -> every 500 steps (``count="steps"``),
    ``"300kwords"`` -> every 300,000 training words (``count="words"``),
    ``"0"``/``"off"``/``"epoch"`` -> off (time units: s, sec, m, min, h).

    Raises:
        DataError: naming ``key``, for anything else (a bare number other than 0 too:
            minutes or steps would be a guess).
    """
    value = str(text).strip().lower()
    if value in ("0", "off", "none", "epoch"):
        return Interval()
    m = _PATTERN.match(value)
    number, unit = (float(m.group(1)), m.group(2)) if m else (0.0, "")
    counted = _COUNTS[count]
    if number > 0 and unit in counted and (number * counted[unit]).is_integer():
        return Interval(**{count: int(number * counted[unit])})
    if number > 0 and unit in _UNITS:
        return Interval(seconds=number * _UNITS[unit])
    raise DataError(f"{key} must be a time (e.g. 5m, 90s, 1h), {_COUNT_EXAMPLES[count]} or "
                    f"{'epoch' if count == 'words' else 'off'}, got {text!r}")


@dataclass(frozen=True)
class OptimConfig:
    """Optimisation, each key as the table of docs/training.md (Optimiser) says;
    training stops after ``patience`` validations without improvement (one at each
    epoch end, and every ``valid_every`` words or seconds within epochs), ``max_epochs``
    or ``max_seconds``."""

    batch_size: int = option(32, kind="int", range=">= 1")
    bptt: int = option(20, kind="int", range=">= 1")
    lr: float = option(1e-3, kind="float", range="> 0")
    clip: float = option(10.0, kind="float", range="> 0")
    max_epochs: int = option(10, kind="int", range=">= 1")
    patience: int = option(2, kind="int", range=">= 1")
    halve_lr_on_plateau: bool = option(True, kind="bool")
    max_seconds: Optional[float] = option(None, kind="float", range="> 0", example=3600)
    seed: int = option(0, kind="int", range=">= 0")
    threads: Optional[int] = option(None, kind="int", range=">= 1", example=4)
    # alpha, see training.step.segment_loss; 0 = plain cross-entropy
    self_norm_weight: float = option(0.0, kind="float", range=">= 0 (0 = off)", example=0.1)
    optimizer: str = option("adam", kind="str", choices=("adam", "adamw", "sgd"))
    weight_decay: float = option(0.0, kind="float", range=">= 0")
    momentum: float = option(0.0, kind="float", range=">= 0")  # sgd only
    lr_schedule: str = option("constant", kind="str", choices=("constant", "cosine", "linear"))
    warmup_steps: int = option(0, kind="int", range=">= 0")
    min_lr_ratio: float = option(0.0, kind="float", range="[0, 1]")
    shuffle: bool = option(True, kind="bool")
    dtype: str = option("float32", kind="str", choices=TRAIN_DTYPES)
    # steps between reads of the loss for the progress bar
    log_interval: int = option(50, kind="int", range=">= 1")
    # on CUDA: replay the training step as one CUDA graph
    cuda_graph: bool = option(True, kind="bool")
    # epochs between checkpoints (the last epoch is always saved)
    checkpoint_every: int = option(1, kind="int", range=">= 1")
    # the resumable state also mid-epoch: a time (5m, 90s, 1h), N steps (500steps) or off
    checkpoint_interval: str = option("5m", kind="str")
    # validation (a point of the learning curve) also within epochs: a time (10m) or a
    # number of training words (300kwords); epoch: at epoch ends only
    valid_every: str = option("epoch", kind="str")
    # full softmax: the loss through the fused output layer (vocabulary blocks, no [N, V]
    # logits or gradient kept; one more block product per step), see models/fused_output.py
    fused_softmax: bool = option(False, kind="bool")

    _SECTION = "optim"

    def __post_init__(self):
        check_options(self)
        parse_interval(self.checkpoint_interval)
        parse_interval(self.valid_every, "optim.valid_every", "words")


#: The ``model`` name of a Hugging Face causal LM trained through ``transformers`` (the ``hf`` block).
HF_MODEL = "hf"
_HF_CONFIG_EXAMPLE = "{model_type: gpt2, n_embd: 256, n_layer: 4, n_head: 4, n_positions: 256}"


@dataclass(frozen=True)
class HfConfig(_Section):
    """``model: hf`` (docs/training.md "Training a Hugging Face model"): either
    ``pretrained``, a ``save_pretrained`` directory (model and tokenizer) to fine-tune, or
    ``config``, a transformers config (``model_type`` and that config's keys) of a new
    model, with ``tokenizer``, a tokenizer directory. ``context_tokens``: the tokens of a
    document before each ``optim.bptt`` window that the window is run after (no loss on
    them; at most ``optim.bptt``)."""

    pretrained: Optional[str] = option(None, kind="str", example="exp/gpt")
    config: Optional[dict] = option(None, kind="dict", example=_HF_CONFIG_EXAMPLE)
    tokenizer: Optional[str] = option(None, kind="str", example="exp/bpe8k")
    context_tokens: int = option(0, kind="int", range=">= 0")

    _SECTION = "hf"
    _PATHS = ("pretrained", "tokenizer")


@dataclass(frozen=True)
class TrainConfig:
    """A training config: model name and its options (``model_config``, see the
    model's ``Config`` dataclass), data, vocabulary and optimisation sections; for
    ``model: hf`` the ``hf`` block instead of ``model_config`` and ``vocab``."""

    model: str = option("gru", kind="str")
    model_config: dict = option(kind="dict", default_factory=dict, example="{hidden_size: 512}")
    data: DataConfig = field(default_factory=DataConfig)
    vocab: VocabConfig = field(default_factory=VocabConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    hf: Optional[HfConfig] = None

    _SECTION = ""

    def __post_init__(self):
        check_options(self)
        for key, cls in {**_SECTIONS, "hf": HfConfig}.items():
            value = getattr(self, key)
            if not isinstance(value, cls) and not (key == "hf" and value is None):
                raise DataError(f"{key} must be the {key} section ({cls.__name__}, a mapping in YAML), "
                                f"got {value!r}")


_SECTIONS = {"data": DataConfig, "vocab": VocabConfig, "optim": OptimConfig}


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
        values = {k: _build(_SECTIONS[k], v, k) if k in _SECTIONS else {} if k == "model_config" and v is None else
                  _build(HfConfig, v, k) if k == "hf" and v is not None else v
                  for k, v in values.items()}
    return cls(**values)


def with_overrides(cfg: TrainConfig, values: dict) -> TrainConfig:
    """``cfg`` with ``values`` (``{("optim", "seed"): 1, ...}``), each section touched
    rebuilt by :func:`dataclasses.replace`. Raises DataError for a bad value
    (``"optim.seed must be an integer >= 0, got -1"``)."""
    sections: dict = {}
    for (section, key), value in values.items():
        sections.setdefault(section, {})[key] = value
    return dataclasses.replace(cfg, **{s: dataclasses.replace(getattr(cfg, s), **kv) for s, kv in sections.items()})


def validate_train_config(cfg: TrainConfig, source=None) -> None:
    """Check what spans a whole training config (each section's fields are checked when
    it is built) before any data is read or model built: ``data.train`` given, the model
    name and ``model_config`` against the model's ``Config``, or the ``hf`` block.

    Args:
        cfg: the config; source: the config file, named at the start of messages.
    Raises:
        DataError: ``"<source>: data.train: required, the training text (...)"``.
    """
    from .models.registry import config_from_dict, get_model_class  # lazy: models import torch

    try:
        if not cfg.data.train:
            raise DataError("data.train: required, the training text (one sentence per line, a blank line between "
                            "documents); e.g. data: {train: data/lm_train.txt, valid: data/lm_valid.txt}")
        if cfg.model == HF_MODEL:
            _check_hf(cfg)
        else:
            if cfg.hf is not None:
                raise DataError(f"hf: the hf block is for model: {HF_MODEL}, the config trains {cfg.model!r}; "
                                f"remove it")
            config_from_dict(get_model_class(cfg.model).Config, cfg.model_config)
    except DataError as exc:
        if source is None:
            raise
        raise DataError(f"{source}: {exc}") from None


def _check_hf(cfg: TrainConfig) -> None:
    """The ``hf`` block of a ``model: hf`` config (:class:`HfConfig`), ``hf.config`` against
    its transformers config class, and how it fits ``optim`` (transformers imported here).
    Raises DataError naming the key."""
    h = cfg.hf
    if h is None:
        raise DataError(f"hf: model: {HF_MODEL} needs an hf block, e.g. hf: {{config: {_HF_CONFIG_EXAMPLE}, "
                        f"tokenizer: exp/bpe8k}} or hf: {{pretrained: exp/gpt}}")
    if cfg.model_config:
        raise DataError(f"model_config: not used with model: {HF_MODEL} (the hf block gives the model); remove it")
    if (h.pretrained is None) == (h.config is None):
        raise DataError("hf: give either hf.pretrained (a save_pretrained directory to fine-tune) or hf.config "
                        "(a new model) with hf.tokenizer" + (", not both" if h.pretrained else ""))
    if h.pretrained is not None and h.tokenizer is not None:
        raise DataError("hf.tokenizer: only with hf.config; hf.pretrained brings its own tokenizer "
                        "(remove hf.tokenizer)")
    if h.config is not None and h.tokenizer is None:
        raise DataError("hf.tokenizer: hf.config builds a new model and needs a tokenizer directory "
                        "(save_pretrained files, e.g. from recipes/abc-nbest/local/train_bpe.py)")
    if h.context_tokens > cfg.optim.bptt:
        raise DataError(f"hf.context_tokens must be <= optim.bptt ({cfg.optim.bptt}), got {h.context_tokens}: the "
                        f"context of a window is (part of) the window before it")
    if h.config is None:
        return
    try:
        import transformers
    except ImportError:
        raise DataError(f"model: {HF_MODEL} needs the Hugging Face transformers package: pip install -e '.[hf]' "
                        f"(or pip install transformers tokenizers)") from None
    import inspect

    model_type = h.config.get("model_type")
    types = list(transformers.CONFIG_MAPPING.keys())
    if not isinstance(model_type, str) or model_type not in types:
        close = difflib.get_close_matches(str(model_type), types, n=1)
        raise DataError(f"hf.config.model_type must be a transformers model type, got {model_type!r}"
                        + (f" (did you mean {close[0]!r}?)" if close else "") + "; e.g. model_type: gpt2")
    cls = transformers.CONFIG_MAPPING[model_type]
    if cls not in transformers.MODEL_FOR_CAUSAL_LM_MAPPING:
        raise DataError(f"hf.config.model_type: {model_type!r} is not a causal LM (AutoModelForCausalLM); "
                        f"e.g. model_type: gpt2 or llama")
    valid = set(cls().to_dict()) | set(getattr(cls, "attribute_map", {})) | set(inspect.signature(cls).parameters)
    unknown = sorted(str(k) for k in h.config if k not in valid)
    if unknown:
        hints = [f"{k!r} -> did you mean {m[0]!r}?" for k in unknown
                 for m in [difflib.get_close_matches(k, sorted(valid), n=1)] if m]
        raise DataError(f"hf.config: unknown key(s) {unknown} for {cls.__name__}"
                        + (f" ({'; '.join(hints)})" if hints else ""))
    try:
        built = transformers.AutoConfig.for_model(**h.config)
    except (TypeError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DataError(f"hf.config: transformers refused it ({first})") from None
    positions = getattr(built, "max_position_embeddings", None) or getattr(built, "n_positions", None)
    if isinstance(positions, int) and positions > 0 and cfg.optim.bptt + h.context_tokens > positions:
        raise DataError(f"optim.bptt + hf.context_tokens = {cfg.optim.bptt + h.context_tokens} is more than the "
                        f"model's {positions} positions (hf.config); lower them or raise the positions")


def load_train_config(path, overrides: Optional[dict] = None) -> TrainConfig:
    """Read a YAML training config, apply ``overrides`` (:func:`with_overrides`), check
    it once (:func:`validate_train_config`) and resolve its relative paths
    (:func:`resolve_path`). Raises DataError, starting with the file name, for unreadable
    YAML, unknown keys, bad values, an unknown model or a missing data file."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except OSError as exc:
        raise DataError(f"cannot read config {os_error_message(exc, path, writing=False)}") from exc
    except yaml.YAMLError as exc:
        raise DataError(f"cannot read config {path}: {exc}") from exc
    try:
        cfg = with_overrides(_build(TrainConfig, {} if raw is None else raw), overrides or {})
        validate_train_config(cfg)
        base = Path(path).resolve().parent
        return with_overrides(cfg, {(s, k): resolve_path(getattr(getattr(cfg, s), k), base, f"{s}.{k}")
                                    for s in ("data", "vocab", "hf") if getattr(cfg, s) is not None
                                    for k in getattr(cfg, s)._PATHS if getattr(getattr(cfg, s), k)})
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None


def resolve_path(value: str, config_dir: Path, key: str = "") -> str:
    """``value`` if it exists relative to the current directory, else relative to the
    config's directory or its parent; DataError (naming ``key``) listing the places tried."""
    p = Path(value)
    candidates = [p] if p.is_absolute() else [Path.cwd() / p, config_dir / p, config_dir.parent / p]
    for c in candidates:
        if c.exists():
            return str(c)
    raise DataError(f"{key + ': ' if key else ''}file {value!r} not found; tried: "
                    f"{', '.join(str(c) for c in candidates)}")
