"""Language models, registered by name, behind one stateful interface.

Every model subclasses :class:`~nbest_rescore.models.base.LanguageModel`. Use
:func:`build_model` / :func:`load_model` rather than the classes directly.
"""
from .base import LanguageModel, Output, State, cat_states, expand_state, reset_state, select_state
from .registry import MODEL_REGISTRY, build_model, get_model_class, register


_INFRASTRUCTURE = {"base", "registry", "loading", "cache", "quantize", "fused_output", "rows",
                   "state", "output_layer"}


def _load_all():
    """Import every model module of this package (each registers its models)."""
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        if info.name not in _INFRASTRUCTURE and not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


_load_all()

from .loading import load_model, save_model  # noqa: E402

__all__ = ["LanguageModel", "Output", "State", "MODEL_REGISTRY", "build_model", "get_model_class",
           "register", "select_state", "expand_state", "reset_state", "cat_states",
           "load_model", "save_model"]
