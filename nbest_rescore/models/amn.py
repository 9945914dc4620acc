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

Analysis hooks (``000`` section 6.2; used by :mod:`nbest_rescore.evaluation.analysis`),
all off by default and free when off:

* ``record_attention``: each forward appends alpha float [B, T, K] to the list
  ``recorded_attention``;
* ``record_memcells``: each forward appends the memcell states m_t^(i) float
  [B, T, K, H] to the list ``recorded_memcells``;
* ``force_memcell = k``: alpha = one-hot(k), so o_t = m_t^(k) (perplexity of one memcell
  alone, ``000`` section 6.2.4).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional

import torch
from torch import Tensor, nn

from .base import LanguageModel, ModelConfig, Output, State
from .registry import register

DROPOUT_MODES = ("none", "contr", "mem", "all")


def gru_step(gi: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor, hdim: int) -> Tensor:
    """One step of K+1 GRUs at once: input projections ``gi`` [K+1, B, 3H] (bias
    included), states ``h`` [K+1, B, H], recurrent weights ``w_hh`` [K+1, H, 3H] and
    bias ``b_hh`` [K+1, 1, 3H]; returns the new states [K+1, B, H] (gates r, z, n, as
    ``torch.nn.GRUCell``). ``hdim`` is H. Shapes are not checked beyond what torch's
    ``baddbmm`` raises (RuntimeError)."""
    gh_rz, gh_n = torch.baddbmm(b_hh, h, w_hh).split([2 * hdim, hdim], -1)
    gi_rz, gi_n = gi.split([2 * hdim, hdim], -1)
    r, z = torch.sigmoid(gi_rz + gh_rz).chunk(2, -1)
    n = torch.tanh(gi_n + r * gh_n)
    return (1.0 - z) * n + z * h


@dataclass
class AMNConfig(ModelConfig):
    """AMN settings (``000`` section 4.3 / 6.3: K = 5 memcells, T0 = 250, gamma = 0.15).
    Sizes and ``num_memcells`` >= 1, ``anneal_t0`` >= 1, ``anneal_gamma`` in (0, 1],
    ``itl_weight`` >= 0, ``dropout_mode`` in ``DROPOUT_MODES`` (DataError otherwise)."""

    hidden_size: int = 256
    num_memcells: int = 5
    dropout_mode: str = "none"
    dropout: float = 0.0
    anneal_t0: float = 1.0
    anneal_gamma: float = 0.15
    itl_weight: float = 0.0

    _RANGES = {"anneal_t0": ">= 1 (T = 1 is the plain softmax)",
               "anneal_gamma": "(0, 1] (T is multiplied by it after every epoch)", "itl_weight": ">= 0"}
    _CHOICES = {"dropout_mode": DROPOUT_MODES}


@register("amn")
class AMNLM(LanguageModel):
    """Active Memory Network (``000`` chapter 4); see the module docstring."""

    summary = "Active Memory Network: K GRU memcells attended by a GRU controller (000 ch. 4)"
    graph_safe = True

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
        # analysis hooks (see the module docstring); not saved with the weights
        self.record_attention = False
        self.recorded_attention: List[Tensor] = []
        self.record_memcells = False
        self.recorded_memcells: List[Tensor] = []
        self.force_memcell: Optional[int] = None

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
            (alpha float [K, B] attention weights, o float [B, H] output). With
            ``force_memcell = k`` set, alpha is one-hot(k) and o = m^(k).
        Raises:
            IndexError: ``force_memcell`` is not in [0, K).
        """
        u, m = h[0], h[1:]
        if self.force_memcell is not None:
            k = self.force_memcell
            if not 0 <= k < m.shape[0]:
                raise IndexError(f"amn force_memcell {k} out of range: the model has {m.shape[0]} memcells")
            alpha = torch.zeros(m.shape[:2], dtype=m.dtype, device=m.device)
            alpha[k] = 1.0
            return alpha, m[k]
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
        # Speed (benchmarks/train_speed.py): the loop holds only the GRU recurrences.
        # gi is unbound per step and gates are split, not indexed, because the backward
        # of each index/slice would write a zero tensor of the full source size (O(T^2)
        # per segment); attention, which feeds nothing back, runs once after the loop.
        gis = gi.unbind(1)  # T x [K+1, B, 3H]
        b_hh = self.b_hh.unsqueeze(1)
        steps = []
        for t in range(t_len):
            h_new = gru_step(gis[t], h, self.w_hh, b_hh, hdim)
            if lengths is not None:
                h_new = torch.where((t < lengths).view(1, b, 1), h_new, h)
            h = h_new
            steps.append(h)
        k1 = h.shape[0]
        hs = torch.stack(steps, 2)  # [K+1, B, T, H]
        alpha, o = self.attend(hs.view(k1, b * t_len, hdim))  # [K, B*T], [B*T, H]
        aux = None
        if self.training and self.config.itl_weight > 0:
            dist = ((o.unsqueeze(0) - hs[1:].reshape(k1 - 1, b * t_len, hdim)) ** 2).sum(-1)  # [K, B*T]
            # mean over streams, then over time steps
            aux = self.config.itl_weight * (alpha * dist).sum(0).view(b, t_len).mean(0).mean()
        if self.record_attention:
            self.recorded_attention.append(alpha.detach().view(k1 - 1, b, t_len).permute(1, 2, 0))  # [B, T, K]
        if self.record_memcells:
            self.recorded_memcells.append(hs[1:].detach().permute(1, 2, 0, 3))  # [B, T, K, H]
        return Output(o.view(b, t_len, hdim), (h.transpose(0, 1),), aux)
