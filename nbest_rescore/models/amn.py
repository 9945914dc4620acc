"""Active Memory Network LM (AMN thesis ``000`` chapter 4).

K memory cells ("memcells") m^(i) and a controller u are GRUs over the same input
x_t (eq. 4.1, 4.6); attention alpha_t = softmax(u_t . m_t^(i) / T) (eq. 4.7, 4.19);
output o_t = sum_i alpha^(i) m^(i) (eq. 4.9) feeds the softmax layer (eq. 4.11).

* Attention annealing (4.3.2): T starts at ``anneal_t0`` and is multiplied by
  ``anneal_gamma`` after every epoch, floored at 1 (``anneal_t0 = 1``: no annealing).
  The current T is a buffer, saved with the weights.
* Dropout (4.3.3) on the input-to-hidden path only, a fresh mask per time step and
  per memcell: ``dropout_mode`` ``none``, ``contr`` (Drop-Contr), ``mem`` (Drop-Mem)
  or ``all`` (Drop-All), probability ``dropout``.
* Implicit-target loss, ITL (4.4.2, eq. 4.32): ``itl_weight * sum_i alpha^(i)
  ||o_t - m^(i)||^2``, averaged over time steps and streams, returned as the
  auxiliary loss.

The K + 1 GRUs (index 0 = controller) share one implementation: their input
projections for a whole segment are one matrix product, and the recurrences one
batched matrix product per step. State: ``(h,)`` float [B, K + 1, H].
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, nn

from ..errors import DataError
from .base import LanguageModel, Output, State
from .registry import register

DROPOUT_MODES = ("none", "contr", "mem", "all")


@dataclass
class AMNConfig:
    """AMN settings (``000`` section 4.3 / 6.3: K = 5 memcells, T0 = 250, gamma = 0.15)."""

    embedding_dim: int = 256
    hidden_size: int = 256
    num_memcells: int = 5
    dropout_mode: str = "none"
    dropout: float = 0.0
    anneal_t0: float = 1.0
    anneal_gamma: float = 0.15
    itl_weight: float = 0.0
    dropout_emb: float = 0.0
    dropout_out: float = 0.0
    tie_weights: bool = False

    def __post_init__(self):
        if self.dropout_mode not in DROPOUT_MODES:
            raise DataError(f"amn dropout_mode {self.dropout_mode!r}: expected one of {DROPOUT_MODES}")
        if self.anneal_t0 < 1.0:
            raise DataError(f"amn anneal_t0 must be >= 1 (T = 1 is the plain softmax), got {self.anneal_t0}")
        if self.num_memcells < 1:
            raise DataError(f"amn num_memcells must be >= 1, got {self.num_memcells}")


@register("amn")
class AMNLM(LanguageModel):
    """Active Memory Network (``000`` chapter 4); see the module docstring."""

    Config = AMNConfig

    def __init__(self, config: AMNConfig, vocab_size: int):
        super().__init__(config, vocab_size, config.hidden_size)
        k1, h, e = config.num_memcells + 1, config.hidden_size, config.embedding_dim
        bound = 1.0 / math.sqrt(h)
        self.w_ih = nn.Parameter(torch.empty(k1, e, 3 * h).uniform_(-bound, bound))
        self.w_hh = nn.Parameter(torch.empty(k1, h, 3 * h).uniform_(-bound, bound))
        self.b_ih = nn.Parameter(torch.empty(k1, 3 * h).uniform_(-bound, bound))
        self.b_hh = nn.Parameter(torch.empty(k1, 3 * h).uniform_(-bound, bound))
        self.register_buffer("temperature", torch.tensor(float(config.anneal_t0)))

    def init_state(self, batch_size: int, device=None) -> State:
        """Zero controller and memcell states: ``(h,)`` float [B, K + 1, H]."""
        c = self.config
        device = device or self.w_ih.device
        return (torch.zeros(batch_size, c.num_memcells + 1, c.hidden_size, device=device),)

    def on_epoch_end(self, epoch: int) -> None:
        """Attention annealing: T <- max(1, gamma * T) (``000`` eq. 4.20)."""
        t = max(1.0, float(self.temperature) * self.config.anneal_gamma)
        self.temperature.fill_(t)

    def _input_masks(self, x: Tensor) -> Tensor:
        """Dropout-masked inputs per GRU: float [B, T, K + 1, E]."""
        c = self.config
        b, t, e = x.shape
        k1 = c.num_memcells + 1
        xs = x.unsqueeze(2).expand(b, t, k1, e)
        if not self.training or c.dropout_mode == "none" or c.dropout <= 0:
            return xs
        keep = torch.ones(k1, device=x.device, dtype=torch.bool)
        if c.dropout_mode == "contr":
            keep[1:] = False
        elif c.dropout_mode == "mem":
            keep[0] = False
        mask = torch.bernoulli(torch.full((b, t, k1, e), 1.0 - c.dropout, device=x.device)) / (1.0 - c.dropout)
        mask = torch.where(keep.view(1, 1, k1, 1), mask, torch.ones_like(mask))
        return xs * mask

    def attend(self, h: Tensor):
        """Attention over memcells.

        Args:
            h: float [K + 1, B, H] controller (index 0) and memcell states.
        Returns:
            (alpha float [K, B] attention weights, o float [B, H] output).
        """
        u, m = h[0], h[1:]
        beta = (m * u.unsqueeze(0)).sum(-1)  # [K, B]
        alpha = torch.softmax(beta / self.temperature, dim=0)
        o = (alpha.unsqueeze(-1) * m).sum(0)
        return alpha, o

    def recur(self, x: Tensor, state: State, lengths: Optional[Tensor]) -> Output:
        """AMN over embedded inputs ``x`` float [B, T, E]; features are o_t [B, T, H];
        rows stop updating after ``lengths[b]`` steps; the auxiliary loss is the ITL."""
        b, t_len, _ = x.shape
        hdim = self.config.hidden_size
        # all input projections of the segment in one product: [K+1, B*T, 3H]
        xs = self._input_masks(x)  # [B, T, K+1, E]
        gi = torch.einsum("btke,keg->ktbg", xs, self.w_ih) + self.b_ih[:, None, None, :]
        h = state[0].transpose(0, 1).contiguous()  # [K+1, B, H]
        if lengths is not None:
            lengths = lengths.to(x.device)
        outs, itl_terms = [], []
        for t in range(t_len):
            gh = torch.baddbmm(self.b_hh.unsqueeze(1), h, self.w_hh)  # [K+1, B, 3H]
            g = gi[:, t]
            r = torch.sigmoid(g[..., :hdim] + gh[..., :hdim])
            z = torch.sigmoid(g[..., hdim:2 * hdim] + gh[..., hdim:2 * hdim])
            n = torch.tanh(g[..., 2 * hdim:] + r * gh[..., 2 * hdim:])
            h_new = (1.0 - z) * n + z * h
            if lengths is not None:
                h_new = torch.where((t < lengths).view(1, b, 1), h_new, h)
            h = h_new
            alpha, o = self.attend(h)
            outs.append(o)
            if self.training and self.config.itl_weight > 0:
                dist = ((o.unsqueeze(0) - h[1:]) ** 2).sum(-1)  # [K, B]
                itl_terms.append((alpha * dist).sum(0).mean())
        aux = None
        if itl_terms:
            aux = self.config.itl_weight * torch.stack(itl_terms).mean()
        return Output(torch.stack(outs, 1), (h.transpose(0, 1),), aux)
