"""Models register by name; an unknown name lists the registered ones."""
from __future__ import annotations

import dataclasses
from typing import Dict, Type

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


def get_model_class(name: str):
    """The class registered as ``name``; DataError listing the choices otherwise."""
    from . import _load_all  # noqa: F401  (import side effect: registration)

    try:
        return MODEL_REGISTRY[name]
    except KeyError:
        raise DataError(f"unknown model {name!r}; registered models: {', '.join(sorted(MODEL_REGISTRY))}") from None


def config_from_dict(config_cls, values: dict):
    """Build a dataclass config, rejecting unknown keys with the valid ones listed."""
    names = {f.name for f in dataclasses.fields(config_cls)}
    unknown = set(values) - names
    if unknown:
        raise DataError(f"unknown option(s) {sorted(unknown)} for {config_cls.__name__}; "
                        f"valid: {sorted(names)}")
    return config_cls(**values)


def build_model(name: str, config: dict, vocab_size: int):
    """Instantiate model ``name`` from a plain-dict config for a vocabulary size."""
    cls = get_model_class(name)
    return cls(config_from_dict(cls.Config, dict(config or {})), vocab_size)
