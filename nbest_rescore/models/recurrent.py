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

from ..options import option
from .base import LanguageModel, ModelConfig, Output, State, lstm_forget_bias, run_rnn
from .registry import register_variant


@dataclass
class RecurrentConfig(ModelConfig):
    """Settings of an RNN/GRU/LSTM LM (sizes in units)."""

    hidden_size: int = option(256, kind="int", range=">= 1")
    num_layers: int = option(1, kind="int", range=">= 1")
    dropout: float = option(0.0, kind="float", range="[0, 1)")  # between stacked layers


class _RecurrentLM(LanguageModel):
    Config = RecurrentConfig
    cell: type = nn.GRU

    def __init__(self, config: RecurrentConfig, vocab_size: int):
        super().__init__(config, vocab_size, config.hidden_size)
        self.rnn = self.cell(config.embedding_dim, config.hidden_size, num_layers=config.num_layers, batch_first=True,
                             dropout=config.dropout if config.num_layers > 1 else 0.0)
        if self.cell is nn.LSTM:
            lstm_forget_bias(self.rnn, config.hidden_size)

    graph_safe = True

    def supports_cuda_graph(self) -> bool:
        """As the base class, and not with cuDNN's dropout between stacked layers
        (its dropout state cannot be captured)."""
        c = self.config
        return super().supports_cuda_graph() and not (c.num_layers > 1 and c.dropout > 0)

    def init_state(self, batch_size: int, device=None) -> State:
        """Zero states: ``(h,)`` or, for the LSTM, ``(h, c)``, each float [B, L, H]."""
        c = self.config
        device = device or self.embedding.weight.device
        z = torch.zeros(batch_size, c.num_layers, c.hidden_size, device=device)
        return tuple(z.clone() for _ in range(2 if self.cell is nn.LSTM else 1))

    def recur(self, x: Tensor, state: State, lengths: Optional[Tensor]) -> Output:
        """torch's RNN/GRU/LSTM over ``x`` float [B, T, E] (packed when ``lengths`` vary,
        so each row's state is taken at its own length); features [B, T, H]."""
        return Output(*run_rnn(self.rnn, x, state, lengths), None)


RNNLM = register_variant("rnn", "RNNLM", _RecurrentLM, "Elman RNN LM: h_t = tanh(W_x x_t + W_h h_{t-1} + b) "
                         "(``000`` section 2.3).", "Elman RNN (000 sec. 2.3)", cell=nn.RNN)
GRULM = register_variant("gru", "GRULM", _RecurrentLM, "GRU LM (``000`` section 2.3.2, 3.3.1; torch.nn.GRU cell).",
                         "GRU (000 sec. 2.3.2)", cell=nn.GRU)
LSTMLM = register_variant("lstm", "LSTMLM", _RecurrentLM, "LSTM LM (``000`` section 2.3.1, 3.3.1; torch.nn.LSTM "
                          "cell, forget-gate bias 1).", "LSTM, forget-gate bias 1 (000 sec. 2.3.1)", cell=nn.LSTM)
