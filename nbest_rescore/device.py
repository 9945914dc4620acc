"""The one place where a ``--device`` string becomes a :class:`torch.device`."""
from __future__ import annotations

from .errors import DataError


def resolve_device(name: str = "cpu"):
    """Return ``torch.device(name)`` after checking it can be used.

    On CUDA, TF32 is switched off for matrix products and cuDNN (PyTorch lets cuDNN's
    RNNs use it by default), so that float32 scores match the CPU's to about 1e-5 nats
    per hypothesis rather than 1e-3; faster, approximate arithmetic is asked for
    explicitly with ``score --dtype bfloat16|float16``.

    Args:
        name: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    Raises:
        DataError: CUDA was asked for but is not available, or the name is unknown.
    """
    import torch

    try:
        dev = torch.device(name)
    except RuntimeError as exc:
        raise DataError(f"unknown device {name!r}: expected 'cpu', 'cuda' or 'cuda:N'") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DataError(f"--device {name}: CUDA is not available on this machine; use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise DataError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) present")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    elif dev.type != "cpu":
        raise DataError(f"unsupported device {name!r}: expected 'cpu', 'cuda' or 'cuda:N'")
    return dev
