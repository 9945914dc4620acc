"""Language models, registered by name, behind one stateful interface.

Every model subclasses :class:`~nbest_rescore.models.base.LanguageModel`. Use
:func:`build_model` / :func:`load_model` rather than the classes directly.
"""
from .base import LanguageModel, Output, State, cat_states, expand_state, reset_state, select_state
from .registry import MODEL_REGISTRY, build_model, get_model_class, register


def _load_all():
    from . import amn, recurrent  # noqa: F401


_load_all()

from .loading import load_model, save_model  # noqa: E402

__all__ = ["LanguageModel", "Output", "State", "MODEL_REGISTRY", "build_model", "get_model_class",
           "register", "select_state", "expand_state", "reset_state", "cat_states",
           "load_model", "save_model"]
