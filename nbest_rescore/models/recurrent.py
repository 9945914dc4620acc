"""Elman RNN, GRU and LSTM language models (AMN thesis ``000`` chapters 2-3).

One class serves the three cells (torch's cuDNN-capable ``nn.RNN``/``nn.GRU``/
``nn.LSTM``); they differ only in the cell and in the LSTM's extra memory cell state.
State: ``(h,)`` float [B, L, H] for RNN/GRU, ``(h, c)`` for LSTM (L = layers).
The LSTM forget-gate bias is initialised to 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .base import LanguageModel, ModelConfig, Output, State
from .registry import register


@dataclass
class RecurrentConfig(ModelConfig):
    """Settings of an RNN/GRU/LSTM LM (sizes in units)."""

    hidden_size: int = 256
    num_layers: int = 1
    dropout: float = 0.0  # between stacked layers


class _RecurrentLM(LanguageModel):
    Config = RecurrentConfig
    cell: type = nn.GRU

    def __init__(self, config: RecurrentConfig, vocab_size: int):
        super().__init__(config, vocab_size, config.hidden_size)
        kwargs = dict(num_layers=config.num_layers, batch_first=True,
                      dropout=config.dropout if config.num_layers > 1 else 0.0)
        if self.cell is nn.RNN:
            kwargs["nonlinearity"] = "tanh"
        self.rnn = self.cell(config.embedding_dim, config.hidden_size, **kwargs)
        if self.cell is nn.LSTM:
            h = config.hidden_size
            for name, p in self.rnn.named_parameters():
                if name.startswith("bias_ih"):
                    with torch.no_grad():
                        p[h:2 * h].fill_(1.0)
                elif name.startswith("bias_hh"):
                    with torch.no_grad():
                        p[h:2 * h].zero_()

    graph_safe = True

    def supports_cuda_graph(self) -> bool:
        """As the base class, and not with cuDNN's dropout between stacked layers
        (its dropout state cannot be captured)."""
        c = self.config
        return super().supports_cuda_graph() and not (c.num_layers > 1 and c.dropout > 0)

    @property
    def _num_state(self) -> int:
        return 2 if self.cell is nn.LSTM else 1

    def init_state(self, batch_size: int, device=None) -> State:
        """Zero states: ``(h,)`` or, for the LSTM, ``(h, c)``, each float [B, L, H]."""
        c = self.config
        device = device or self.embedding.weight.device
        z = torch.zeros(batch_size, c.num_layers, c.hidden_size, device=device)
        return tuple(z.clone() for _ in range(self._num_state))

    def recur(self, x: Tensor, state: State, lengths: Optional[Tensor]) -> Output:
        """torch's RNN/GRU/LSTM over ``x`` float [B, T, E] (packed when ``lengths`` vary,
        so each row's state is taken at its own length); features [B, T, H]."""
        hx = tuple(s.transpose(0, 1).contiguous() for s in state)
        hx = hx if self.cell is nn.LSTM else hx[0]
        if lengths is None or bool((lengths == x.shape[1]).all()):
            y, hn = self.rnn(x, hx)
        else:
            packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            y, hn = self.rnn(packed, hx)
            y, _ = pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
        hn = hn if isinstance(hn, tuple) else (hn,)
        return Output(y, tuple(s.transpose(0, 1) for s in hn), None)


@register("rnn")
class RNNLM(_RecurrentLM):
    """Elman RNN LM: h_t = tanh(W_x x_t + W_h h_{t-1} + b) (``000`` section 2.3)."""

    summary = "Elman RNN (000 sec. 2.3)"

    cell = nn.RNN


@register("gru")
class GRULM(_RecurrentLM):
    """GRU LM (``000`` section 2.3.2, 3.3.1; torch.nn.GRU cell)."""

    summary = "GRU (000 sec. 2.3.2)"

    cell = nn.GRU


@register("lstm")
class LSTMLM(_RecurrentLM):
    """LSTM LM (``000`` section 2.3.1, 3.3.1; torch.nn.LSTM cell, forget-gate bias 1)."""

    summary = "LSTM, forget-gate bias 1 (000 sec. 2.3.1)"

    cell = nn.LSTM
