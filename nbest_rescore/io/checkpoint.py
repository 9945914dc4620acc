"""Model checkpoints: a plain dict saved with ``torch.save``, loaded with ``weights_only``.

Required keys: ``format`` (must be :data:`CHECKPOINT_FORMAT`), ``model`` (model type
name), ``config`` (hyper-parameters), ``vocab`` (the word list), ``state_dict``
(tensors). Everything must be loadable with ``torch.load(weights_only=True)``: tensors,
numbers, strings, lists, tuples, dicts. No model code lives here.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional

from ..errors import DataError
from .atomic import atomic_path

__all__ = ["CHECKPOINT_FORMAT", "REQUIRED_KEYS", "save_checkpoint", "load_checkpoint"]

CHECKPOINT_FORMAT = "nbest-rescore/1"
REQUIRED_KEYS = ("format", "model", "config", "vocab", "state_dict")


def _check_payload(payload, where: str) -> None:
    if not isinstance(payload, dict):
        raise DataError(f"{where}: checkpoint payload is a {type(payload).__name__}, "
                        f"expected a dict with keys {', '.join(REQUIRED_KEYS)}")
    missing = [k for k in REQUIRED_KEYS if k not in payload]
    if missing:
        raise DataError(f"{where}: checkpoint is missing key(s) {', '.join(missing)} "
                        f"(required: {', '.join(REQUIRED_KEYS)})")
    if payload["format"] != CHECKPOINT_FORMAT:
        raise DataError(f"{where}: checkpoint format is {payload['format']!r}, expected {CHECKPOINT_FORMAT!r}")


def save_checkpoint(path, payload: Dict[str, Any], option: Optional[str] = None) -> None:
    """Save ``payload`` with ``torch.save`` atomically (temp file + rename).

    If ``payload`` has no ``format`` key, :data:`CHECKPOINT_FORMAT` is added (the
    caller's dict is not modified). ``option`` (e.g. ``"--out"``) names the path in
    the messages of :func:`~.atomic.atomic_path`.

    Raises:
        DataError: the payload is not a dict, lacks a required key, has a wrong
            ``format``; the output directory does not exist; writing failed (no space,
            read-only file system, permission ...: one line naming ``path``).
        pickling errors from ``torch.save``: nothing is written then.
    """
    import torch

    if isinstance(payload, dict) and "format" not in payload:
        payload = {"format": CHECKPOINT_FORMAT, **payload}
    _check_payload(payload, f"save_checkpoint {path}")
    with atomic_path(path, option) as tmp, open(tmp, "wb") as f:
        torch.save(payload, f)  # through a Python file: a failed write keeps its OSError (os_errors.os_error_of)


def load_checkpoint(path) -> Dict[str, Any]:
    """Load a checkpoint saved by :func:`save_checkpoint` onto the CPU
    (``torch.load(path, map_location="cpu", weights_only=True)``).

    Raises:
        DataError: the file does not exist; it is not a torch checkpoint (or holds
            objects ``weights_only`` refuses); the payload is not a dict, lacks one of
            :data:`REQUIRED_KEYS`, or has a ``format`` other than
            :data:`CHECKPOINT_FORMAT`. The message names the path.
    """
    import torch

    if not os.path.exists(path):
        raise DataError(f"{path}: checkpoint file not found")
    if not os.path.isfile(path):
        raise DataError(f"{path}: checkpoint path is not a file")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # UnpicklingError, RuntimeError, EOFError, ...
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise DataError(f"{path}: not a readable torch checkpoint ({type(e).__name__}: {first[:300]})") from None
    _check_payload(payload, str(path))
    return payload
