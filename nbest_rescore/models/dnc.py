"""Differentiable neural computer LM with forget-gate memory deallocation (seed ``004``).

An LSTM controller reads ``[x_t; r_{t-1}]`` (the word embedding and the R read vectors
of the previous step) and emits h_t and an interface vector; one write head and R read
heads address an external memory M (H slots x W wide). The addressing follows Graves
et al. (2016), which ``004`` section 3 summarises: content addressing with a key
strength, usage-based allocation over sorted usage, write and allocation gates, a
temporal link matrix with precedence, and backward/content/forward read modes mixed
by a per-head softmax. The write is ``004`` eq. 2, 5 or 6 (``deallocation``):

* ``none``: M_t = M_{t-1} * (1 - w^w e^T) + w^w v^T (eq. 2, plain DNC; the retention
  psi_t only lowers the usage).
* ``md`` (Csordas & Schmidhuber, eq. 5): M_t = M_{t-1} * (1 - w^w e^T) * (psi_t 1^T) + w^w v^T.
* ``fmd`` (``004`` section 4, eq. 6-7): as ``md`` with psi^zero, psi whose smallest
  entry (the first on ties) is set to 0, so that exactly one slot is cleared per step.

psi_t = prod_i (1 - f^i_t w^{r,i}_{t-1}) (eq. 4) also drives the usage in every mode.

Features are ``[h_t; r^1_t .. r^R_t]``, size ``hidden_size + R * W`` (the linear output
layer on them is Graves' W_y h_t + W_r r_t). The state is the tuple, batch-first,
of :data:`STATE_FIELDS`; all zeros at a document start (zero read weights give
psi = 1 and zero memory gives uniform content weights). The link matrix makes the
state O(H^2) per row: :meth:`DNCLM.max_batch_rows` bounds rescoring batches.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ..options import option
from .base import LanguageModel, ModelConfig, Output, State, hold_done, state_row_bytes
from .registry import register

DEALLOCATIONS = ("none", "md", "fmd")
EPS = 1e-6
STATE_FIELDS = ("h", "c", "memory", "usage", "link", "precedence", "read_weights",
                "write_weights", "read_vectors")
# state-sized tensors alive at once in a step (old state, new state, temporaries)
_WORKING_COPIES = 4


@dataclass
class DNCConfig(ModelConfig):
    """DNC settings: controller ``hidden_size``, memory ``memory_slots`` (H) x
    ``memory_width`` (W), ``read_heads`` (R), ``deallocation`` none/md/fmd."""

    hidden_size: int = option(256, kind="int", range=">= 1")
    memory_slots: int = option(16, kind="int", range=">= 1")
    memory_width: int = option(32, kind="int", range=">= 1")
    read_heads: int = option(1, kind="int", range=">= 1")
    deallocation: str = option("fmd", kind="str", choices=DEALLOCATIONS)


# -- addressing: pure functions ---------------------------------------------------------
def content_weighting(memory: Tensor, keys: Tensor, strengths: Tensor) -> Tensor:
    """Content addressing: softmax_i(beta * cos(M[i], k)).

    Args:
        memory: float [B, H, W]; keys: float [B, K, W]; strengths: float [B, K] (>= 1).
    Returns:
        float [B, K, H] weightings (uniform for zero memory; norms get EPS).
    """
    dots = keys @ memory.transpose(1, 2)
    k_norm = (keys.pow(2).sum(-1) + EPS).sqrt()  # [B, K]
    m_norm = (memory.pow(2).sum(-1) + EPS).sqrt()  # [B, H]
    cos = dots / (k_norm.unsqueeze(-1) * m_norm.unsqueeze(1))
    return torch.softmax(strengths.unsqueeze(-1) * cos, dim=-1)


def retention(free_gates: Tensor, prev_read_weights: Tensor) -> Tensor:
    """psi_t = prod_i (1 - f^i w^{r,i}_{t-1}) (``004`` eq. 4).

    free_gates float [B, R], prev_read_weights float [B, R, H] -> float [B, H] in [0, 1].
    """
    return torch.prod(1.0 - free_gates.unsqueeze(-1) * prev_read_weights, dim=1)


def fmd_retention(psi: Tensor) -> Tensor:
    """psi^zero (``004`` eq. 7): psi float [B, H] with each row's smallest entry set to
    0 (the first index on ties, as torch.argmin); other entries unchanged."""
    return psi.scatter(-1, psi.argmin(dim=-1, keepdim=True), 0.0)


def allocation_weighting(usage: Tensor) -> Tensor:
    """Graves' allocation: with phi the slots sorted by ascending usage (stable),
    a[phi_j] = (1 - u[phi_j]) prod_{i<j} u[phi_i]. usage float [B, H] -> float [B, H]."""
    u_sorted, phi = torch.sort(usage, dim=-1, stable=True)
    ones = torch.ones_like(u_sorted[..., :1])
    before = torch.cumprod(torch.cat([ones, u_sorted[..., :-1]], -1), -1)
    return torch.zeros_like(usage).scatter(-1, phi, (1.0 - u_sorted) * before)


def update_usage(usage: Tensor, prev_write: Tensor, psi: Tensor) -> Tensor:
    """u_t = (u_{t-1} + w^w_{t-1} - u_{t-1} * w^w_{t-1}) * psi_t; all float [B, H]."""
    return (usage + prev_write - usage * prev_write) * psi


def update_link(link: Tensor, precedence: Tensor, write: Tensor):
    """Temporal link matrix and precedence (Graves et al. 2016).

    L_t[i, j] = (1 - w[i] - w[j]) L_{t-1}[i, j] + w[i] p_{t-1}[j], L_t[i, i] = 0;
    p_t = (1 - sum_i w[i]) p_{t-1} + w.

    Args:
        link: float [B, H, H]; precedence, write (w^w_t): float [B, H].
    Returns:
        (link float [B, H, H], precedence float [B, H]).
    """
    w_i, w_j = write.unsqueeze(2), write.unsqueeze(1)
    new = (1.0 - w_i - w_j) * link + w_i * precedence.unsqueeze(1)
    eye = torch.eye(link.shape[-1], dtype=torch.bool, device=link.device)
    new = new.masked_fill(eye, 0.0)
    return new, (1.0 - write.sum(-1, keepdim=True)) * precedence + write


def write_memory(memory: Tensor, write: Tensor, erase: Tensor, value: Tensor,
                 keep: Optional[Tensor]) -> Tensor:
    """M_t = M_{t-1} * (1 - w e^T) [* (keep 1^T)] + w v^T (``004`` eq. 2, 5, 6).

    memory float [B, H, W]; write [B, H]; erase, value [B, W]; keep [B, H] (psi for
    ``md``, psi^zero for ``fmd``) or None (``none``). Returns float [B, H, W].
    """
    w = write.unsqueeze(-1)
    kept = memory * (1.0 - w * erase.unsqueeze(1))
    if keep is not None:
        kept = kept * keep.unsqueeze(-1)
    return kept + w * value.unsqueeze(1)


def _oneplus(x: Tensor) -> Tensor:
    return 1.0 + F.softplus(x)


@register("dnc")
class DNCLM(LanguageModel):
    """DNC LM with LSTM controller and none/md/fmd deallocation; see the module
    docstring (``004`` sections 3-4). Features float [B, T, hidden_size + R * W]."""

    summary = "differentiable neural computer, deallocation none/md/fmd (004)"

    Config = DNCConfig

    def __init__(self, config: DNCConfig, vocab_size: int):
        hc, r, w = config.hidden_size, config.read_heads, config.memory_width
        super().__init__(config, vocab_size, hc + r * w)
        # LSTM controller on [x_t; r_{t-1}]: x part precomputed per segment
        bound = 1.0 / math.sqrt(hc)
        self.ctrl_x = nn.Linear(config.embedding_dim, 4 * hc)
        self.ctrl_hr = nn.Linear(hc + r * w, 4 * hc, bias=False)
        for p in (self.ctrl_x.weight, self.ctrl_x.bias, self.ctrl_hr.weight):
            nn.init.uniform_(p, -bound, bound)
        with torch.no_grad():
            self.ctrl_x.bias[hc:2 * hc].fill_(1.0)  # forget gate (order i, f, g, o)
        # interface: read keys, read strengths, write key, write strength, erase,
        # write vector, free gates, allocation gate, write gate, read modes
        self.split = [r * w, r, w, 1, w, w, r, 1, 1, 3 * r]
        self.interface = nn.Linear(hc, sum(self.split))

    def init_state(self, batch_size: int, device=None) -> State:
        """All-zero state (the parameters' dtype), the tensors of :data:`STATE_FIELDS`: h, c [B, hidden];
        memory [B, H, W]; usage [B, H]; link [B, H, H]; precedence [B, H]; read
        weights [B, R, H]; write weights [B, H]; read vectors [B, R, W]."""
        c = self.config
        device = device or self.embedding.weight.device  # (never quantised: int8 turns Linear.weight into a method)
        dtype = self.embedding.weight.dtype
        hs, w, r, b = c.memory_slots, c.memory_width, c.read_heads, batch_size
        shapes = [(b, c.hidden_size), (b, c.hidden_size), (b, hs, w), (b, hs), (b, hs, hs),
                  (b, hs), (b, r, hs), (b, hs), (b, r, w)]
        return tuple(torch.zeros(s, device=device, dtype=dtype) for s in shapes)

    def max_batch_rows(self, budget_bytes: int) -> int:
        """How many state rows (hypotheses, at least 1) fit in ``budget_bytes``, each
        :data:`_WORKING_COPIES` times (old, new state and step temporaries); the scorer
        caps its batch size by it."""
        row = state_row_bytes(self.init_state(1, "cpu")) * _WORKING_COPIES
        return max(1, int(budget_bytes) // row)

    def _step(self, gx: Tensor, state: State) -> State:
        """One DNC step from the controller's input projection gx float [B, 4 hidden]."""
        c = self.config
        h, cell, memory, usage, link, prec, read_w, write_w, read_v = state
        b, r = h.shape[0], c.read_heads
        # controller
        gates = gx + self.ctrl_hr(torch.cat([h, read_v.reshape(b, -1)], -1))
        i, f, g, o = gates.chunk(4, -1)
        cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(cell)
        (k_r, beta_r, k_w, beta_w, erase, value, free, g_a, g_w, modes) = \
            self.interface(h).split(self.split, -1)
        k_r = k_r.view(b, r, -1)
        modes = torch.softmax(modes.view(b, r, 3), -1)  # backward, content, forward
        # write: usage, allocation, write weighting, memory, links
        psi = retention(torch.sigmoid(free), read_w)
        usage = update_usage(usage, write_w, psi)
        alloc = allocation_weighting(EPS + (1.0 - EPS) * usage)
        cw = content_weighting(memory, k_w.unsqueeze(1), _oneplus(beta_w))[:, 0]
        g_a, g_w = torch.sigmoid(g_a), torch.sigmoid(g_w)
        write_w = g_w * (g_a * alloc + (1.0 - g_a) * cw)
        keep = None if c.deallocation == "none" else psi
        if c.deallocation == "fmd":
            keep = fmd_retention(psi)
        memory = write_memory(memory, write_w, torch.sigmoid(erase), value, keep)
        link, prec = update_link(link, prec, write_w)
        # read: backward / content / forward modes
        fwd = read_w @ link.transpose(1, 2)  # [B, R, H]: sum_j L[i, j] w[j]
        bwd = read_w @ link  # sum_j L[j, i] w[j]
        cr = content_weighting(memory, k_r, _oneplus(beta_r))
        read_w = modes[..., 0:1] * bwd + modes[..., 1:2] * cr + modes[..., 2:3] * fwd
        read_v = read_w @ memory  # [B, R, W]
        return (h, cell, memory, usage, link, prec, read_w, write_w, read_v)

    def recur(self, x: Tensor, state: State, lengths: Optional[Tensor]) -> Output:
        """DNC over embedded inputs ``x`` float [B, T, E]; features float
        [B, T, hidden + R * W]; rows stop updating after ``lengths[b]`` steps."""
        b, t_len, _ = x.shape
        gx = self.ctrl_x(x)
        lengths = None if lengths is None else lengths.to(x.device)
        outs = []
        for t in range(t_len):
            state = tuple(hold_done(t, lengths, n, s) for n, s in zip(self._step(gx[:, t], state), state))
            outs.append(torch.cat([state[0], state[-1].reshape(b, -1)], -1))
        return Output(torch.stack(outs, 1), tuple(state), None)
