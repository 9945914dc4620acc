"""Small causal transformer LM with a sliding attention window.

Beyond the papers: none of the seeds (``000``-``004``) has a transformer; this is a
modern baseline for the recurrent and memory models. Pre-LayerNorm blocks

    h = h + Dropout(Attn(LN(h)));  h = h + Dropout(W_2 GELU(W_1 LN(h)))

with multi-head causal self-attention, a final LayerNorm, and no absolute positions:
each head adds a bias by distance d = 0..W-1 between query and key (ALiBi's
-slope_head * d, fixed, or a learned table initialised to it), so the same weights
apply wherever a window starts.

Each position attends to itself and at most the W - 1 previous positions
(W = ``window``), whether these lie in the current segment or in the state. The
state is the window carried across segments: the keys and values of the last W - 1
positions read, per layer, and a mask of which slots hold a real position (none at
a document start). Reading a text in two chunks therefore equals one pass, and a
hypothesis scored from the state after the 1-best history attends to the last W - 1
positions of that history (L (W - 1) through L layers), where the recurrent models
carry all of it.

State: ``(keys_1, values_1, .., keys_L, values_L, valid)``: keys and values of each
of the L layers float [B, W - 1, D] (D = ``hidden_size``, heads concatenated; the
oldest position first), valid bool [B, W - 1]. One tensor per layer rather than a
stacked [B, L, W - 1, D] saves a copy of the whole window at every call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import DataError
from ..options import option
from .base import LanguageModel, ModelConfig, Output, State, slide_window
from .registry import register

POSITION_BIASES = ("alibi", "learned")


@dataclass
class TransformerConfig(ModelConfig):
    """Transformer settings (sizes in units): hidden_size is d_model (embeddings are
    projected to it when it differs from ``embedding_dim``), a multiple of num_heads
    (DataError otherwise); ``ff_dim`` 0 means 4 * hidden_size; ``dropout`` applies to
    attention weights and both residual branches."""

    hidden_size: int = option(256, kind="int", range=">= 1")
    num_layers: int = option(2, kind="int", range=">= 1")
    num_heads: int = option(4, kind="int", range=">= 1")
    ff_dim: int = option(0, kind="int", range=">= 0 (0 = 4 * hidden_size)", example=1024)
    window: int = option(64, kind="int", range=">= 1")
    position_bias: str = option("alibi", kind="str", choices=POSITION_BIASES)
    dropout: float = option(0.1, kind="float", range="[0, 1)")

    def __post_init__(self):
        super().__post_init__()
        if self.hidden_size % self.num_heads:
            raise DataError(f"model_config.hidden_size ({self.hidden_size}) must be a multiple of "
                            f"num_heads ({self.num_heads}), e.g. hidden_size: {self.num_heads * 64}")


def alibi_bias(num_heads: int, window: int) -> Tensor:
    """float [heads, W]: -slope_h * d for distances d = 0..W-1, slopes 2^(-8 h / heads)."""
    slopes = 2.0 ** (-8.0 * torch.arange(1, num_heads + 1) / num_heads)
    return -slopes[:, None] * torch.arange(window, dtype=torch.float32)[None, :]


class _Block(nn.Module):
    """One pre-LayerNorm block: windowed self-attention and a GELU MLP."""

    def __init__(self, dim: int, heads: int, ff_dim: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.ln_att = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln_ff = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, ff_dim), nn.GELU(), nn.Linear(ff_dim, dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, h: Tensor, mem_k: Tensor, mem_v: Tensor, bias: Tensor):
        """Args:
            h: float [B, T, D] block input; mem_k, mem_v: float [B, M, D] the state's keys
                and values; bias: float [B, heads, T, M + T] attention bias (-inf = masked).
        Returns:
            (output [B, T, D], keys [B, M + T, D], values [B, M + T, D]).
        """
        b, t, d = h.shape
        q, k, v = self.qkv(self.ln_att(h)).split(d, dim=-1)
        k, v = torch.cat([mem_k, k], 1), torch.cat([mem_v, v], 1)

        def heads(z):  # [B, S, D] -> [B, heads, S, D / heads]
            return z.view(b, z.shape[1], self.heads, d // self.heads).transpose(1, 2)

        att = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), attn_mask=bias,
                                             dropout_p=self.dropout if self.training else 0.0)
        h = h + self.drop(self.proj(att.transpose(1, 2).reshape(b, t, d)))
        h = h + self.drop(self.ff(self.ln_ff(h)))
        return h, k, v


@register("transformer")
class TransformerLM(LanguageModel):
    """Causal transformer over a sliding window of W positions carried in the state
    (beyond the papers: a modern baseline); see the module docstring."""

    summary = "causal transformer over a sliding window of W positions (beyond the papers)"
    width_dependent = True  # attention over the M + T keys of a call
    merges_histories = False  # its state is the window of the last positions' keys and values

    Config = TransformerConfig

    def __init__(self, config: TransformerConfig, vocab_size: int):
        super().__init__(config, vocab_size, config.hidden_size)
        c = config
        d = c.hidden_size
        self.inp = nn.Identity() if d == c.embedding_dim else nn.Linear(c.embedding_dim, d)
        self.blocks = nn.ModuleList(_Block(d, c.num_heads, c.ff_dim or 4 * d, c.dropout)
                                    for _ in range(c.num_layers))
        self.ln_out = nn.LayerNorm(d)
        table = alibi_bias(c.num_heads, c.window)
        if c.position_bias == "learned":
            self.distance_bias = nn.Parameter(table)
        else:
            self.register_buffer("distance_bias", table, persistent=False)

    def init_state(self, batch_size: int, device=None) -> State:
        """Empty window (document start): zero keys and values, no valid slot."""
        c = self.config
        device = device or self.ln_out.weight.device
        kv = [torch.zeros(batch_size, c.window - 1, c.hidden_size, device=device) for _ in range(2 * c.num_layers)]
        return (*kv, torch.zeros(batch_size, c.window - 1, dtype=torch.bool, device=device))

    def attention_bias(self, key_valid: Tensor, t_len: int) -> Tensor:
        """Bias float [B, heads, T, M + T] of T queries over the M state slots + T segment
        keys (``key_valid`` bool [B, M + T]: the state's valid mask, then True): bias by
        distance, -inf where the key is later than the query, W or more positions
        earlier, or an empty slot. Every query sees itself (no fully masked row, no NaN)."""
        m = key_valid.shape[1] - t_len
        window = self.config.window
        dist = (torch.arange(t_len, device=key_valid.device)[:, None] + m
                - torch.arange(m + t_len, device=key_valid.device)[None, :])  # [T, M + T]
        allowed = (dist >= 0) & (dist < window) & key_valid[:, None, :]  # [B, T, M + T]
        bias = self.distance_bias[:, dist.clamp(0, window - 1)]  # [heads, T, M + T]
        return bias.unsqueeze(0).masked_fill(~allowed.unsqueeze(1), float("-inf"))

    def recur(self, x: Tensor, state: State, lengths: Optional[Tensor]) -> Output:
        """Transformer over embedded inputs ``x`` float [B, T, E]; features [B, T, D]
        after the final LayerNorm; the new state holds the last W - 1 positions up to
        ``lengths[b]`` of row b (padding never enters the window)."""
        mem_valid = state[-1]
        b, t_len, _ = x.shape
        m = mem_valid.shape[1]
        key_valid = torch.cat([mem_valid, mem_valid.new_ones(b, t_len)], 1)  # [B, M + T]
        bias = self.attention_bias(key_valid, t_len).to(x.dtype)
        h = self.inp(x)
        kv = []
        for layer, block in enumerate(self.blocks):
            h, k, v = block(h, state[2 * layer], state[2 * layer + 1], bias)
            kv += [k, v]
        # new window: slots [n_b, n_b + M) of the M + T positions, n_b = inputs read
        state = tuple(slide_window(z, lengths, m) for z in kv + [key_valid])
        return Output(self.ln_out(h), state, None)
