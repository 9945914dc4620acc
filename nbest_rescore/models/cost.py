"""Compute cost of a model's recurrence, for comparing shapes at equal training cost."""
from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from .base import LanguageModel


def recurrent_macs(model: LanguageModel, batch: int = 4, steps: int = 8) -> float:
    """Multiply-adds per token of ``model.recur`` in evaluation mode: the matrix
    products of the recurrence (and of attention over memcells or windows), counted by
    torch's ``FlopCounterMode`` over a [batch, steps] input (FLOPs / 2 / tokens). The
    embedding lookup, the output layer and elementwise gate arithmetic are not counted.
    torch's fused CPU LSTM kernel is not among the counted operators, so an
    ``nn.LSTM``'s products are added by hand: 4 H (I + H) per layer.

    Returns:
        multiply-adds per token (float). The model is left in evaluation mode.
    """
    model.eval()
    x = torch.zeros(batch, steps, model.config.embedding_dim)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model.recur(x, model.init_state(batch), None)
    counted = counter.get_total_flops() / 2 / (batch * steps)
    if counted:
        return counted
    return float(sum(4 * m.hidden_size * (m.input_size + m.hidden_size)
                     + 8 * m.hidden_size * m.hidden_size * (m.num_layers - 1)
                     for m in model.modules() if isinstance(m, torch.nn.LSTM)))
