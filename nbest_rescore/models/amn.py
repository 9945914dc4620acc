"""Active Memory Network LM (AMN thesis ``000`` chapter 4).

K memory cells ("memcells") m^(i) and a controller u are GRUs over the same input
x_t (eq. 4.1, 4.6); attention alpha_t = softmax(u_t . m_t^(i) / T) (eq. 4.7, 4.19);
output o_t = sum_i alpha^(i) m^(i) (eq. 4.9) feeds the softmax layer (eq. 4.11).
Attention annealing (4.3.2; ``anneal_t0``, ``anneal_gamma``, ``anneal_fraction``; the
current T is a buffer saved with the weights), dropout (4.3.3;
``dropout_mode``: on the inputs ``none``/``contr``/``mem``/``all`` (eq. 4.21-4.22), or
``mem-vector`` on the memcell vectors that attention and output read (eq. 4.26-4.28)), the implicit-target loss (ITL,
4.4.2, eq. 4.32; ``itl_weight``, ``itl_reduction``, ``itl_ramp_fraction``, returned as
the auxiliary loss; ``itl_form: experts``, the mixture-of-experts aim of the thesis's
text, :meth:`AMNLM.target_aux_loss`) and the options beyond the thesis (issue 26: ``anneal_floor``,
``itl_detach_attention``, ``balance_weight`` (:func:`balance_loss`),
``input_projection``) are defined in docs/models.md ("AMN options beyond the thesis").
The trainer passes the real-token mask (:meth:`AMNLM.token_mask`), so the ITL, the
balance term and the memcell health (:meth:`AMNLM.end_diagnostics`) leave padding out.

The K + 1 GRUs (index 0 = controller) share one implementation: their input
projections for a whole segment are one matrix product, and the recurrences one
batched matrix product per step. State: ``(h,)`` float [B, K + 1, H].

Analysis hooks (``000`` section 6.2; :mod:`nbest_rescore.evaluation.analysis`), off
by default: ``record_attention`` appends alpha float [B, T, K] to
``recorded_attention``; ``record_memcells`` appends m_t^(i) float [B, T, K, H] to
``recorded_memcells``; ``force_memcell = k`` sets alpha = one-hot(k) (section 6.2.4).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
from torch import Tensor, nn

from ..errors import DataError
from ..options import option
from .base import LanguageModel, ModelConfig, Output, State, hold_done
from .registry import register

#: ``dropout_mode`` (module docstring; eq. 4.21-4.22); ``mem-vector`` (eq. 4.26-4.28's "m_t is directly
#: modified") leaves the recurrences their unmasked states.
DROPOUT_MODES = ("none", "contr", "mem", "all", "mem-vector")
ITL_REDUCTIONS = ("sum-token", "mean-token", "sum-sequence", "mean-sequence")
#: ``itl_form``: ``spread`` eq. 4.32 (the memcells' attention-weighted spread around o); ``experts``
#: each memcell's own prediction of the next word weighted by its attention (section 4.4.2's text).
ITL_FORMS = ("spread", "experts")


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


def implicit_target_loss(alpha: Tensor, o: Tensor, cells: Tensor, reduction: str = "mean-token",
                         weight: Optional[Tensor] = None) -> Tensor:
    """The implicit-target loss of ``000`` eq. 4.32, sum_i alpha^(i) ||o - m^(i)||^2, reduced.

    Args:
        alpha: attention float [K, B, T]; o: output float [B, T, H]; cells: memcell
            states m^(i) float [K, B, T, H].
        reduction: one of ``ITL_REDUCTIONS`` (docs/models.md; ``sum-token`` is
            eq. 4.32 as written).
        weight: float [B, T], 1 for a real token and 0 for padding (None: all real);
            padding adds nothing.
    Returns:
        a scalar tensor (nats-comparable only under the chosen reduction), unweighted.
    Raises:
        ValueError: unknown ``reduction``.
    """
    if reduction not in ITL_REDUCTIONS:
        raise ValueError(f"itl reduction must be one of {ITL_REDUCTIONS}, got {reduction!r}")
    hidden, per = reduction.split("-")
    sq = (o.unsqueeze(0) - cells) ** 2
    dist = sq.sum(-1) if hidden == "sum" else sq.mean(-1)  # [K, B, T]
    itl = (alpha * dist).sum(0)  # [B, T]
    if weight is None:
        return itl.mean() if per == "token" else itl.sum(1).mean()
    itl = itl * weight
    return itl.sum() / weight.sum().clamp_min(1.0) if per == "token" else itl.sum(1).mean()


def balance_loss(alpha: Tensor, weight: Optional[Tensor] = None) -> Tensor:
    """The load-balancing term ``K * sum_i abar_i^2 - 1`` (issue 26; 0 for
    equal shares, K - 1 when one memcell takes all), ``abar_i`` the mean of alpha^(i)
    [K, B, T] over the real tokens (weight float [B, T] or None: all). A scalar tensor."""
    k = alpha.shape[0]
    if weight is None:
        abar = alpha.mean((1, 2))
    else:
        abar = (alpha * weight).sum((1, 2)) / weight.sum().clamp_min(1.0)
    return k * (abar * abar).sum() - 1.0


def memcell_health_sums(alpha: Tensor, cells: Tensor, weight: Optional[Tensor] = None
                        ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Sums behind the memcell-health report over N positions: attention per memcell
    float64 [K], attention entropy in bits (sum over positions), mean pairwise cosine
    of the memcell states (sum over positions of the mean over pairs i != j; 0 for
    K = 1), and the number of positions counted. ``alpha`` float [K, N], ``cells``
    float [K, N, H], ``weight`` [N] (1 = a real token, 0 = padding; None: all count)."""
    k = cells.shape[0]
    a = alpha.detach().double()
    w = torch.ones(a.shape[1], dtype=torch.float64, device=a.device) if weight is None else weight.double()
    ent = -((a * torch.log2(a.clamp_min(1e-30))).sum(0) * w).sum()
    cos = torch.zeros((), dtype=torch.float64, device=a.device)
    if k > 1:
        s = torch.nn.functional.normalize(cells.detach().double(), dim=-1).sum(0)  # [N, H]
        cos = (((s * s).sum(-1) - k) * w).sum() / (k * (k - 1))
    return (a * w).sum(1), ent, cos, w.sum()


@dataclass
class AMNConfig(ModelConfig):
    """AMN settings (``000`` section 4.3 / 6.3: K = 5 memcells, T0 = 250, gamma = 0.15);
    the fields are described in docs/models.md, their ranges here."""

    hidden_size: int = option(256, kind="int", range=">= 1")
    num_memcells: int = option(5, kind="int", range=">= 1")
    dropout_mode: str = option("none", kind="str", choices=DROPOUT_MODES)
    dropout: float = option(0.0, kind="float", range="[0, 1)")
    anneal_t0: float = option(1.0, kind="float", range=">= 1 (T = 1 is the plain softmax)")
    anneal_gamma: float = option(0.15, kind="float", range="(0, 1] (T is multiplied by it after every epoch)")
    anneal_fraction: Optional[float] = option(
        None, kind="float", range="(0, 1] (the share of the planned training after which T = 1)")
    itl_weight: float = option(0.0, kind="float", range=">= 0")
    itl_reduction: str = option("mean-token", kind="str", choices=ITL_REDUCTIONS)
    itl_ramp_fraction: float = option(0.0, kind="float", range="[0, 1] (the share of the planned training over "
                                      "which the ITL weight rises once T = 1; 0 = full weight from the start)")
    anneal_floor: float = option(1.0, kind="float", range=">= 1 (the lowest temperature; 1 = the thesis's floor)")
    itl_detach_attention: bool = option(False, kind="bool")
    balance_weight: float = option(0.0, kind="float", range=">= 0 (0 = no load-balancing term)")
    input_projection: int = option(0, kind="int", range=">= 0 (0 = every GRU reads the embedding itself)")
    itl_form: str = option("spread", kind="str", choices=ITL_FORMS)
    _RETIRED = {"itl_ramp_epochs": 0}  # replaced by itl_ramp_fraction; 0 (no ramp) loads

    def __post_init__(self):
        super().__post_init__()
        if self.itl_ramp_fraction > 0 and self.anneal_t0 > 1 and self.anneal_fraction is None:
            raise DataError("model_config.itl_ramp_fraction needs model_config.anneal_fraction when "
                            f"anneal_t0 > 1 (the ramp starts where T reaches 1), got anneal_t0 {self.anneal_t0} "
                            "and no anneal_fraction; e.g. anneal_fraction: 0.5")

        if self.anneal_floor > self.anneal_t0:
            raise DataError(f"model_config.anneal_floor ({self.anneal_floor}) must not exceed anneal_t0 "
                            f"({self.anneal_t0}); e.g. anneal_floor: 1")

    @property
    def input_size(self) -> int:
        """Width of what each GRU reads: ``input_projection`` when > 0, else ``embedding_dim``."""
        return self.input_projection or self.embedding_dim


@register("amn")
class AMNLM(LanguageModel):
    """Active Memory Network (``000`` chapter 4); see the module docstring."""

    summary = "Active Memory Network: K GRU memcells attended by a GRU controller (000 ch. 4)"
    graph_safe = True

    Config = AMNConfig

    def __init__(self, config: AMNConfig, vocab_size: int):
        super().__init__(config, vocab_size, config.hidden_size)
        k1, h, e = config.num_memcells + 1, config.hidden_size, config.input_size
        bound = 1.0 / math.sqrt(h)
        # shape (b) of issue 26: one projection of the embedding shared by all K + 1 GRUs
        self.input_proj = (nn.Linear(config.embedding_dim, config.input_projection)
                           if config.input_projection else None)
        self.w_ih = nn.Parameter(torch.empty(k1, e, 3 * h).uniform_(-bound, bound))
        self.w_hh = nn.Parameter(torch.empty(k1, h, 3 * h).uniform_(-bound, bound))
        self.b_ih = nn.Parameter(torch.empty(k1, 3 * h).uniform_(-bound, bound))
        self.b_hh = nn.Parameter(torch.empty(k1, 3 * h).uniform_(-bound, bound))
        self.register_buffer("temperature", torch.tensor(float(config.anneal_t0)))
        # ITL warm start: the weight's scale, saved with the weights only when it varies
        ramp = config.itl_ramp_fraction > 0 and config.itl_weight > 0
        self.register_buffer("itl_scale", torch.tensor(0.0 if ramp else 1.0), persistent=ramp)
        self._scheduled = (float(self.temperature), float(self.itl_scale))  # host copies: no read-back
        self.anneal_gamma = config.anneal_gamma
        self._health: Optional[List[Tensor]] = None
        self._token_mask: Optional[Tensor] = None  # real tokens of the positions being read
        self._token_col = 0
        self._expert_parts: List[Tuple[Tensor, Tensor]] = []  # (alpha, memcells) of a segment's calls (experts ITL)
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

    def on_progress(self, fraction: float) -> None:
        """Annealing and ITL warm start at progress ``fraction`` p in [0, 1] (the schedules
        of docs/models.md); buffers written in place only on a change (CUDA-graph safe)."""
        c = self.config
        t, scale = self._scheduled
        annealed = c.anneal_fraction is not None and c.anneal_t0 > 1
        if annealed:
            t = max(c.anneal_floor, c.anneal_t0 ** max(0.0, 1.0 - fraction / c.anneal_fraction))
        if c.itl_ramp_fraction > 0 and c.itl_weight > 0:  # the ramp starts where T reaches 1
            scale = min(1.0, max(0.0, (fraction - (c.anneal_fraction if annealed else 0.0)) / c.itl_ramp_fraction))
        if (t, scale) != self._scheduled:
            self.temperature.fill_(t)
            self.itl_scale.fill_(scale)
            self._scheduled = (t, scale)

    def on_epoch_end(self, epoch: int) -> None:
        """T <- max(floor, gamma * T) (``000`` eq. 4.20), unless ``anneal_fraction`` is set."""
        if self.config.anneal_fraction is None:
            t = max(self.config.anneal_floor, float(self.temperature) * self.anneal_gamma)
            self.temperature.fill_(t)
            self._scheduled = (t, self._scheduled[1])

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self._scheduled = (float(self.temperature), float(self.itl_scale))

    def begin_diagnostics(self) -> None:
        """Start summing the memcell health figures (see the module docstring)."""
        k = self.config.num_memcells
        self._health = [torch.zeros(k, dtype=torch.float64, device=self.w_ih.device)] + [
            torch.zeros((), dtype=torch.float64, device=self.w_ih.device) for _ in range(3)]

    def end_diagnostics(self) -> Optional[dict]:
        """``{"mean_attention": [K], "attention_entropy_bits": x, "memcell_cosine": y}``
        (cosine None for one memcell) over the positions since :meth:`begin_diagnostics`."""
        if self._health is None:
            return None
        attn, ent, cos, n = (x.cpu() for x in self._health)
        self._health = None
        n = max(float(n), 1.0)
        return {"mean_attention": [round(float(a) / n, 4) for a in attn],
                "attention_entropy_bits": round(float(ent) / n, 4),
                "memcell_cosine": round(float(cos) / n, 4) if self.config.num_memcells > 1 else None}

    def token_mask(self, mask: Optional[Tensor]) -> None:
        """See :meth:`LanguageModel.token_mask` (None: forget it)."""
        self._token_mask, self._token_col = mask, 0
        self._expert_parts = []

    def target_aux_loss(self, targets: Tensor) -> Optional[Tensor]:
        """The mixture-of-experts ITL (``itl_form: experts``, docs/models.md):
        ``itl_weight * scale * mean_t sum_i alpha_t^(i) * (-log P(w_t | m_t^(i)))``,
        each memcell's prediction through the shared output layer, over the real tokens
        of the mask given to :meth:`token_mask` (all positions without one); None in
        evaluation or with the spread form. ``targets`` int64 [B, T]; no host
        synchronisation. Costs K more output-layer passes per position."""
        parts, self._expert_parts = self._expert_parts, []
        if not parts:
            return None
        alpha = torch.cat([a for a, _ in parts], 2)  # [K, B, T]
        cells = torch.cat([m for _, m in parts], 2)  # [K, B, T, H]
        k = cells.shape[0]
        logp = self.target_log_probs(cells, targets.unsqueeze(0).expand(k, -1, -1))  # [K, B, T]
        per_token = -(alpha * logp).sum(0)  # [B, T]
        mask = self._token_mask
        if mask is None or mask.shape != per_token.shape:
            loss = per_token.mean()
        else:
            w = mask.to(per_token.dtype)
            loss = (per_token * w).sum() / w.sum().clamp_min(1.0)
        return self.config.itl_weight * self.itl_scale * loss

    def _input_masks(self, x: Tensor) -> Tensor:
        """Dropout-masked inputs per GRU: float [B, T, K + 1, E'] from embeddings [B, T, E]
        (E' = ``input_size``); a fresh mask per position, GRU and unit (Drop-Mem: the K
        memcells, eq. 4.26-4.28)."""
        c = self.config
        if self.input_proj is not None:
            x = self.input_proj(x)
        b, t, e = x.shape
        k1 = c.num_memcells + 1
        xs = x.unsqueeze(2).expand(b, t, k1, e)
        if not self.training or c.dropout_mode in ("none", "mem-vector") or c.dropout <= 0:
            return xs
        # the GRUs whose inputs drop: the controller unless ``mem``, the memcells unless ``contr``
        keep = torch.tensor([c.dropout_mode != "mem"] + [c.dropout_mode != "contr"] * (k1 - 1), device=x.device)
        mask = torch.bernoulli(torch.full((b, t, k1, e), 1.0 - c.dropout, device=x.device)) / (1.0 - c.dropout)
        mask = torch.where(keep.view(1, 1, k1, 1), mask, torch.ones_like(mask))
        return xs * mask

    def attend(self, h: Tensor):
        """Attention over memcells of h float [K + 1, B, H] (controller at index 0):
        (alpha float [K, B], o float [B, H]); with ``force_memcell = k``, alpha =
        one-hot(k) and o = m^(k) (IndexError when k is not in [0, K))."""
        u, m = h[0], h[1:]
        if self.force_memcell is not None:
            k = self.force_memcell
            if not 0 <= k < m.shape[0]:
                raise IndexError(f"amn force_memcell {k} out of range: the model has {m.shape[0]} memcells")
            alpha = torch.zeros(m.shape[:2], dtype=m.dtype, device=m.device)
            alpha[k] = 1.0
            return alpha, m[k]
        beta = (m * u.unsqueeze(0)).sum(-1)  # [K, B]
        # softmax over the last axis: along axis 0 torch vectorises across the B positions and
        # rounds the last ones of a call differently, so a row's value would depend on B (models.rows)
        alpha = torch.softmax(beta.t() / self.temperature, dim=-1).t()
        o = (alpha.unsqueeze(-1) * m).sum(0)
        return alpha, o

    def _aux_loss(self, alpha: Tensor, o: Tensor, cells: Tensor, weight: Optional[Tensor]) -> Optional[Tensor]:
        """Training's auxiliary loss: ``itl_weight * scale * ITL`` (attention detached with
        ``itl_detach_attention``) + ``balance_weight * balance``; None when neither is on
        or in evaluation. alpha [K, B, T], o [B, T, H], cells [K, B, T, H], weight [B, T]."""
        c = self.config
        if self.training and c.itl_weight > 0 and c.itl_form == "experts":  # (the loss: target_aux_loss)
            self._expert_parts.append((alpha, cells))
        if not self.training or (c.itl_weight <= 0 and c.balance_weight <= 0) or (
                c.itl_form == "experts" and c.balance_weight <= 0):
            return None
        aux = torch.zeros((), dtype=o.dtype, device=o.device)
        if c.itl_weight > 0 and c.itl_form == "spread":
            a = alpha.detach() if c.itl_detach_attention else alpha
            aux = aux + c.itl_weight * self.itl_scale * implicit_target_loss(a, o, cells, c.itl_reduction, weight)
        if c.balance_weight > 0:
            aux = aux + c.balance_weight * balance_loss(alpha, weight)
        return aux

    def recur(self, x: Tensor, state: State, lengths: Optional[Tensor]) -> Output:
        """AMN over embedded inputs ``x`` float [B, T, E]; features are o_t [B, T, H];
        rows stop updating after ``lengths[b]`` steps; the auxiliary loss is the ITL."""
        b, t_len, _ = x.shape
        c = self.config
        hdim = c.hidden_size
        # all input projections of the segment in one product: [K+1, B*T, 3H]
        xs = self._input_masks(x)  # [B, T, K+1, E]
        gi = torch.einsum("btke,keg->ktbg", xs, self.w_ih) + self.b_ih[:, None, None, :]
        h = state[0].transpose(0, 1).contiguous()  # [K+1, B, H]
        lengths = None if lengths is None else lengths.to(x.device)
        # Speed (benchmarks/train_speed.py): the loop holds only the GRU recurrences.
        # gi is unbound per step and gates are split, not indexed, because the backward
        # of each index/slice would write a zero tensor of the full source size (O(T^2)
        # per segment); attention, which feeds nothing back, runs once after the loop.
        gis = gi.unbind(1)  # T x [K+1, B, 3H]
        b_hh = self.b_hh.unsqueeze(1)
        steps = []
        for t in range(t_len):
            h = hold_done(t, lengths, gru_step(gis[t], h, self.w_hh, b_hh, hdim), h, 1)
            steps.append(h)
        k1 = h.shape[0]
        hs = torch.stack(steps, 2)  # [K+1, B, T, H]
        mem = cells = hs[1:]  # cells: what attention and output read, [K, B, T, H] (mem-vector: eq. 4.26-4.28)
        if self.training and c.dropout_mode == "mem-vector" and c.dropout > 0:
            cells = mem * torch.bernoulli(torch.full_like(mem, 1.0 - c.dropout)) / (1.0 - c.dropout)
        seen = hs if cells is mem else torch.cat([hs[:1], cells])
        alpha, o = self.attend(seen.view(k1, b * t_len, hdim))  # [K, B*T], [B*T, H]
        # the real-token weights [B, T] of this call's columns, None when no mask of this batch covers them
        mask, col, weight = self._token_mask, self._token_col, None
        if mask is not None and mask.shape[0] == b and col + t_len <= mask.shape[1]:
            weight = mask[:, col:col + t_len].to(torch.float32)
            self._token_col += t_len
        aux = self._aux_loss(alpha.view(k1 - 1, b, t_len), o.view(b, t_len, hdim), cells, weight)
        if self._health is not None:  # alpha [K, B*T], memcells [K, B*T, H], weight [B*T] or None
            sums = memcell_health_sums(alpha, hs[1:].reshape(k1 - 1, b * t_len, hdim),
                                       None if weight is None else weight.reshape(-1))
            for total, part in zip(self._health, sums):
                total += part
        if self.record_attention:
            self.recorded_attention.append(alpha.detach().view(k1 - 1, b, t_len).permute(1, 2, 0))  # [B, T, K]
        if self.record_memcells:
            self.recorded_memcells.append(hs[1:].detach().permute(1, 2, 0, 3))  # [B, T, K, H]
        return Output(o.view(b, t_len, hdim), (h.transpose(0, 1),), aux)
