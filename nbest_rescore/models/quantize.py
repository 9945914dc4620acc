"""Faster, approximate inference copies of a trained model: int8 dynamic quantisation
on CPU and bfloat16/float16 casts.

* :func:`quantize_dynamic_int8` (CPU only): ``torch.ao.quantization.quantize_dynamic``
  on every ``nn.Linear`` (output layer, tied-weight projection), ``nn.LSTM`` and
  ``nn.GRU``: weights are stored as int8, activations are quantised on the fly. Other
  parameter tensors stay float32: the embedding, the Elman ``nn.RNN`` (not supported
  by dynamic quantisation) and the custom recurrences written with raw parameters
  (the AMN's ``w_ih``/``w_hh`` of its K + 1 GRUs, and other models' hand-written cells).
  Scores move by a few hundredths of a nat (max 0.045 nats on a tiny GRU trained on
  the ci text). The activation scale of each call is taken from the whole input
  tensor ([B, T, D] for a linear layer, [B, D] per step for a GRU/LSTM), so a word's
  score may depend slightly on the other words of the same call: causality, carried
  state and batch independence hold up to quantisation noise (measured 0 to 3e-6 nats;
  larger only if other words shift the activation range a lot).
* :func:`bfloat16_output_layer` (CPU): only the output layer's product in bfloat16,
  where the CPU has bfloat16 dot-product instructions (:func:`cpu_has_fast_bfloat16`:
  AVX512-BF16 or AMX; measured 6x the float32 product on a 2-core AMD EPYC), the
  recurrence and the log-sum-exp in float32.
* :func:`cast_for_inference`: the whole model in bfloat16 (CPU or CUDA) or float16
  (CUDA only). States are cast to the model's dtype by
  :meth:`~nbest_rescore.models.base.LanguageModel.forward`; log-probabilities are
  still returned as float32.

Both return a new model in eval mode and leave the given one untouched.
"""
from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from ..errors import DataError
from .base import LanguageModel

__all__ = ["quantize_dynamic_int8", "cast_for_inference", "bfloat16_output_layer", "cpu_has_fast_bfloat16"]

INT8_MODULES = (nn.Linear, nn.LSTM, nn.GRU)
CAST_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def _model_device(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def _require_float32(model: nn.Module, what: str) -> None:
    """Raise DataError "``what`` a float32 model, ..." unless all parameters are float32."""
    dtypes = {p.dtype for p in model.parameters()}
    if dtypes - {torch.float32}:
        raise DataError(f"{what} a float32 model, found parameter dtypes {sorted(str(d) for d in dtypes)}")


def quantize_dynamic_int8(model: LanguageModel) -> LanguageModel:
    """An int8 dynamically quantised copy of ``model`` (a float32 model on the CPU) for CPU
    scoring, in eval mode, same interface and state layout (see the module docstring).
    Raises DataError when the model is not on the CPU or not float32."""
    dev = _model_device(model)
    if dev.type != "cpu":
        raise DataError(f"int8 dynamic quantisation runs on the CPU only; the model is on {dev}: "
                        f"call model.cpu() first (on CUDA use cast_for_inference(model, 'bfloat16'))")
    _require_float32(model, "int8 dynamic quantisation needs")
    model = copy.deepcopy(model).eval()
    with warnings.catch_warnings():
        # torch.ao.quantization is deprecated in favour of torchao, which the project
        # does not depend on; the eager API still works in the pinned torch
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantize_per_tensor.*")
        return torch.ao.quantization.quantize_dynamic(model, set(INT8_MODULES), dtype=torch.qint8,
                                                      inplace=True)


def cast_for_inference(model: LanguageModel, dtype) -> LanguageModel:
    """A copy of ``model`` (on the CPU or CUDA) with all parameters and buffers in
    ``dtype`` (a ``torch`` dtype of :data:`CAST_DTYPES` or its name), in eval mode.
    Raises DataError for an unknown dtype or float16 on the CPU (use bfloat16 there)."""
    if isinstance(dtype, str):
        if dtype not in CAST_DTYPES:
            raise DataError(f"unknown inference dtype {dtype!r}; expected one of {sorted(CAST_DTYPES)}")
        dtype = CAST_DTYPES[dtype]
    if dtype not in CAST_DTYPES.values():
        raise DataError(f"unsupported inference dtype {dtype}; expected one of {sorted(CAST_DTYPES)}")
    dev = _model_device(model)
    if dtype == torch.float16 and dev.type == "cpu":
        raise DataError("float16 inference is for CUDA only; the model is on the CPU: use "
                        "dtype 'bfloat16' on the CPU, or move the model to a CUDA device first")
    return copy.deepcopy(model).to(dtype).eval()


def cpu_has_fast_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices in hardware (AVX512-BF16 or AMX
    tiles, as torch's CPU capability checks report them). Without them torch emulates
    bfloat16 products, several times slower than float32 (README: 0.13-0.23x)."""
    cpu = getattr(torch, "cpu", None)
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


def bfloat16_output_layer(model: LanguageModel) -> LanguageModel:
    """A copy of ``model`` (float32, on the CPU; in eval mode) whose output product runs in
    bfloat16, everything else in float32 (see the module docstring), by
    :meth:`~.output_layer.OutputLayer.to_bfloat16`: the full softmax a bfloat16 copy of the
    decoder's weight and bias for the fused product (:mod:`~nbest_rescore.models.fused_output`),
    the adaptive softmax its head and tail projections, their log-softmax in float32.
    Costs move by hundredths of a nat (README). Raises DataError for a model not float32."""
    _require_float32(model, "a bfloat16 output layer needs")
    model = copy.deepcopy(model).eval()
    model.output.to_bfloat16()
    return model
