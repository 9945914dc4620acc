"""Higher-order RNN LM, HORNN (Soltani's thesis ``002`` chapter 5).

An N-th order HORNN feeds the last N hidden states back, each through its own
matrix W_n (``002`` section 5.1, eq. 5.3), combined by a pooling function P
(section 5.2):

    h_t = tanh(W_in x_t + b + P_{n=1..N} W_n h_{t-n})

* ``none``: plain sum over n (eq. 5.3);
* ``max``: element-wise max over n of W_n h_{t-n} (eq. 5.4);
* ``fofe``: sum of alpha^n W_n h_{t-n}, forgetting factor alpha = ``fofe_alpha``
  (eq. 5.5; 0.6 in section 6.1.7);
* ``gated``: sum of r_n * (W_n h_{t-n}) with gates
  r_n = sigmoid(W^g_n x_t + U^g_n h_{t-n} + b^g_n) (eq. 5.6-5.7; one input and one
  state matrix per gate).

As in section 5.1.1, the input projections W_in x_t (and the gates' W^g_n x_t) of
a whole segment are one matrix product; the recurrence is one batched matrix product
per step over the stacked [W_n | U^g_n]. The thesis uses no biases and no dropout;
here the input projection has a bias and the shared embedding/output dropout applies.

State: ``(hist,)`` float [B, N, H], ``hist[:, n - 1]`` = h_{t-n} (the most recent
hidden state first), zeros at a document start.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, nn

from ..options import option
from .base import LanguageModel, ModelConfig, Output, State, hold_done
from .registry import register

POOLINGS = ("none", "max", "fofe", "gated")


@dataclass
class HORNNConfig(ModelConfig):
    """HORNN settings (``002`` section 6.2.1: order 3; 6.2.3: FOFE alpha 0.6)."""

    hidden_size: int = option(256, kind="int", range=">= 1")
    order: int = option(3, kind="int", range=">= 1 (1 = Elman RNN)")
    pooling: str = option("none", kind="str", choices=POOLINGS)
    fofe_alpha: float = option(0.6, kind="float", range="(0, 1) (002 eq. 5.5; 0.6 is the thesis's value)")


@register("hornn")
class HORNNLM(LanguageModel):
    """Higher-order RNN with ``none``/``max``/``fofe``/``gated`` pooling; see the module
    docstring (``002`` sections 5.1-5.2)."""

    summary = "higher-order RNN, pooling none/max/fofe/gated (002 sec. 5)"

    Config = HORNNConfig

    def __init__(self, config: HORNNConfig, vocab_size: int):
        super().__init__(config, vocab_size, config.hidden_size)
        n, h, e = config.order, config.hidden_size, config.embedding_dim
        gated = config.pooling == "gated"
        bound = 1.0 / math.sqrt(h)
        # W_in x + b (and the gates' W^g_n x + b^g_n) in one projection: [E] -> [H (+ N H)]
        self.w_in = nn.Linear(e, h * (1 + n if gated else 1))
        # stacked recurrent matrices W_n (and U^g_n), applied as h_{t-n} @ w_rec[n-1]
        self.w_rec = nn.Parameter(torch.empty(n, h, 2 * h if gated else h).uniform_(-bound, bound))
        self.gated = gated
        alpha = torch.tensor([config.fofe_alpha ** k for k in range(1, n + 1)])
        self.register_buffer("fofe_weights", alpha, persistent=False)  # [N]: alpha^n

    def init_state(self, batch_size: int, device=None) -> State:
        """Zero history (document start): ``(hist,)`` float [B, N, H]."""
        c = self.config
        device = device or self.w_rec.device
        return (torch.zeros(batch_size, c.order, c.hidden_size, device=device),)

    def pool(self, rec: Tensor, gate_x: Optional[Tensor]) -> Tensor:
        """Combine the feedback paths.

        Args:
            rec: float [N, B, H or 2H] h_{t-n} @ [W_n | U^g_n] for n = 1..N.
            gate_x: float [N, B, H] W^g_n x_t + b^g_n (gated pooling), else None.
        Returns:
            float [B, H] P_{n} W_n h_{t-n}.
        """
        pooling, h = self.config.pooling, self.config.hidden_size
        if pooling == "none":
            return rec.sum(0)
        if pooling == "max":
            return rec.amax(0)
        if pooling == "fofe":
            return (self.fofe_weights.view(-1, 1, 1) * rec).sum(0)
        gates = torch.sigmoid(gate_x + rec[..., h:])
        return (gates * rec[..., :h]).sum(0)

    def recur(self, x: Tensor, state: State, lengths: Optional[Tensor]) -> Output:
        """HORNN over embedded inputs ``x`` float [B, T, E]; features are h_t
        [B, T, H]; rows stop updating after ``lengths[b]`` steps."""
        b, t_len, _ = x.shape
        n, h = self.config.order, self.config.hidden_size
        proj = self.w_in(x)  # [B, T, H (+ N H)]: all input projections of the segment
        x_in = proj[..., :h]
        gate_x = None
        if self.gated:  # W^g_n x_t + b^g_n, the gates' part of the projection: [T, N, B, H]
            gate_x = proj[..., h:].reshape(b, t_len, n, h).permute(1, 2, 0, 3)
        hist = state[0].transpose(0, 1)  # [N, B, H], hist[n - 1] = h_{t-n}
        lengths = None if lengths is None else lengths.to(x.device)
        outs = []
        for t in range(t_len):
            rec = torch.bmm(hist, self.w_rec)  # [N, B, H or 2H]
            h_t = torch.tanh(x_in[:, t] + self.pool(rec, None if gate_x is None else gate_x[t]))
            hist = hold_done(t, lengths, torch.cat([h_t.unsqueeze(0), hist[:-1]], 0), hist, 1)
            outs.append(h_t)
        return Output(torch.stack(outs, 1), (hist.transpose(0, 1),), None)
