"""Models register by name; an unknown name lists the registered ones."""
from __future__ import annotations

import dataclasses
import difflib
from typing import Dict

from ..errors import DataError

MODEL_REGISTRY: Dict[str, type] = {}


def register(name: str):
    """Class decorator: register a :class:`LanguageModel` subclass under ``name``."""

    def deco(cls):
        if name in MODEL_REGISTRY:
            raise ValueError(f"model name {name!r} registered twice")
        cls.name = name
        MODEL_REGISTRY[name] = cls
        return cls

    return deco


def register_variant(name: str, cls_name: str, base: type, doc: str, summary: str, **attrs) -> type:
    """Register under ``name`` the subclass ``cls_name`` of ``base`` that sets only the class
    attributes ``attrs`` (a member of a family that differs in a setting), with its
    docstring and its one-line ``summary``."""
    body = {"__doc__": doc, "summary": summary, "__module__": base.__module__, "__qualname__": cls_name, **attrs}
    return register(name)(type(cls_name, (base,), body))


def get_model_class(name: str):
    """The class registered as ``name``; DataError listing the choices otherwise.
    (Every model is registered by then: importing this module imports its package,
    whose ``__init__`` imports every model module.)"""
    if isinstance(name, str) and name in MODEL_REGISTRY:
        return MODEL_REGISTRY[name]
    close = difflib.get_close_matches(name, list(MODEL_REGISTRY), n=1) if isinstance(name, str) else []
    raise DataError(f"model: unknown model {name!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                    + f"; registered models: {', '.join(sorted(MODEL_REGISTRY))}; e.g. model: gru")


def config_from_dict(config_cls, values: dict):
    """Build a dataclass config from a plain dict (``model_config`` of a YAML config or
    a checkpoint). The config's ``__post_init__`` checks every value (types, ranges,
    choices: :func:`~nbest_rescore.validation.check_options`).

    Raises:
        DataError: ``values`` is not a mapping, has unknown keys (the valid ones are
            listed, with the closest match), or holds a bad value.
    """
    if not isinstance(values, dict):
        raise DataError(f"model_config must be a mapping of option: value, got {values!r}; "
                        f"e.g. model_config: {{hidden_size: 512}}")
    names = sorted(f.name for f in dataclasses.fields(config_cls))
    # options an earlier version wrote into checkpoints, dropped when they hold the value
    # that meant "off" (a config's _RETIRED = {name: value that is ignored})
    retired = getattr(config_cls, "_RETIRED", {})
    values = {k: v for k, v in values.items() if not (k in retired and v == retired[k])}
    unknown = sorted(str(k) for k in values if k not in names)
    if unknown:
        hints = [f"{k!r} -> did you mean {m[0]!r}?" for k in unknown
                 for m in [difflib.get_close_matches(k, names, n=1)] if m]
        raise DataError(f"model_config: unknown option(s) {unknown} for {config_cls.__name__}"
                        + (f" ({'; '.join(hints)})" if hints else "") + f"; valid: {names}")
    return config_cls(**values)


def build_model(name: str, config: dict, vocab_size: int):
    """Instantiate model ``name`` from a plain-dict config for a vocabulary size."""
    cls = get_model_class(name)
    return cls(config_from_dict(cls.Config, {} if config is None else config), vocab_size)
