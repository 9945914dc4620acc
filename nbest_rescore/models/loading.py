"""Build models from checkpoints and save them (file handling lives in ``io.checkpoint``).

A checkpoint holds the model name, its config, the vocabulary and the weights, so
``--lm model.pt`` is all that scoring needs.
"""
from __future__ import annotations

from typing import Optional, Tuple

from ..errors import DataError
from ..io.checkpoint import CHECKPOINT_FORMAT, load_checkpoint, save_checkpoint
from ..vocab import Vocabulary
from .base import LanguageModel
from .hf import hf_summary, is_hf_lm
from .registry import build_model


def save_model(path, model: LanguageModel, vocab: Vocabulary, info: Optional[dict] = None,
               state_dict: Optional[dict] = None, extra: Optional[dict] = None, option: Optional[str] = None) -> None:
    """Write ``model`` (CPU copy of its weights), its config and ``vocab`` to ``path``
    atomically. ``info`` holds training facts (epochs, perplexity, seconds);
    ``state_dict`` replaces the model's current weights (e.g. the best epoch's);
    ``extra`` adds keys (e.g. the trainer's ``resume`` state), loadable with
    ``weights_only``; ``option`` names ``path`` in errors. Raises DataError as
    :func:`~nbest_rescore.io.checkpoint.save_checkpoint`."""
    weights = model.state_dict() if state_dict is None else state_dict
    payload = {
        "format": CHECKPOINT_FORMAT,
        "model": model.name,
        "config": model.config_dict(),
        "vocab": list(vocab.words),
        "state_dict": {k: v.detach().cpu() for k, v in weights.items()},
        "info": dict(info or {}),
        **(extra or {}),
    }
    save_checkpoint(path, payload, option)


def load_model(path, device=None) -> Tuple[LanguageModel, Vocabulary, dict]:
    """Load ``(model in eval mode on device, vocabulary, info)`` from a checkpoint.

    Raises:
        DataError: unreadable checkpoint, unknown model name, or weights that do not
            match the stored config.
    """
    ckpt = load_checkpoint(path)
    vocab = Vocabulary(ckpt["vocab"])
    model = build_model(ckpt["model"], ckpt["config"], len(vocab))
    try:
        model.load_state_dict(ckpt["state_dict"])
    except RuntimeError as exc:
        raise DataError(f"{path}: weights do not match the stored {ckpt['model']} config: {exc}") from exc
    if device is not None:
        model.to(device)
    model.eval()
    return model, vocab, dict(ckpt.get("info") or {})


def checkpoint_summary(path) -> dict:
    """Facts of one checkpoint (``nbest-rescore info``): path, model name, direction,
    vocabulary size, ``parameters`` and ``without_embeddings``
    (:meth:`~.base.LanguageModel.num_parameters`), ``epochs``, training ``minutes``,
    ``best_valid_ppl``, ``max_positions`` (None: the models here take any length) and
    ``dtype`` of the weights (None where not recorded). ``hf:PATH``: a Hugging Face
    model (:func:`~.hf.hf_summary`). Raises DataError for an unreadable checkpoint."""
    if is_hf_lm(path):
        return hf_summary(path)
    model, vocab, info = load_model(path)
    params = model.num_parameters()
    seconds = info.get("seconds")
    return {"path": str(path), "model": model.name, "direction": model.direction, "vocab": len(vocab),
            "parameters": params["total"], "without_embeddings": params["without_embeddings"],
            "epochs": info.get("epochs"), "minutes": None if seconds is None else seconds / 60.0,
            "best_valid_ppl": info.get("best_valid_ppl"), "max_positions": None,
            "dtype": str(next(model.parameters()).dtype).removeprefix("torch.")}
