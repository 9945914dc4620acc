"""Short attention spans over the LM's own previous outputs (Daniluk et al., ``001``).

An LSTM reads the words; its output h_t is split into ``parts`` equal pieces of
``hidden_size`` (k) units each, and the next word is predicted from the current pieces
together with the outputs of the previous L steps (the current step excluded):

* ``attention`` (``001`` section 2.1, eq. 1-4): one piece, key = value = predict = h_t;
  M = tanh(W^Y [h_{t-L} .. h_{t-1}] + (W^h h_t) 1^T), alpha = softmax(w^T M),
  r = [h_{t-L} .. h_{t-1}] alpha^T, h*_t = tanh(W^r r + W^x h_t).
* ``key-value`` (2.2, eq. 8-12): h_t = [k_t; v_t]; score with keys, read values,
  h*_t = tanh(W^r r + W^x v_t).
* ``key-value-predict`` (2.3, eq. 16-17): h_t = [k_t; v_t; p_t], h*_t = tanh(W^r r + W^x p_t).
* ``ngram-rnn`` (2.4, eq. 21): h_t split into N - 1 pieces,
  h*_t = tanh(W^N [h_t^1; h_{t-1}^2; ..; h_{t-N+2}^{N-1}]); no attention.

h*_t (float [B, T, k]) feeds the shared softmax layer. The window of previous outputs
(only the pieces that are read later: [k; v] for the attention models, pieces
2 .. N-1 for the N-gram RNN) is part of the state, so it is carried across BPTT
segments, and across utterances of a document in rescoring (1-best history), exactly
like the LSTM state. State, all batch-first:

``(h, c, memory, valid)``: LSTM h, c float [B, 1, parts*k]; memory float [B, L, D_mem]
(index L-1 = the most recent output h_{t-1}, index 0 the oldest); valid bool [B, L].
:meth:`init_state` gives an empty window (all invalid, zeros): at a stream (document)
start the missing positions get no attention weight, and a step with no valid
position reads r = 0 (the N-gram RNN reads zero pieces).

Implementation: one ``nn.LSTM`` call per segment; the windows of all T steps are
unfolded from the concatenation [memory; segment outputs] (L + T positions), so the
attention is batched over B, T and L with no loop over time. Initialisation follows
``001`` section 4.1: U(-0.1, 0.1) everywhere, LSTM forget-gate bias 1.

Attention analysis: set ``model.record_attention = True`` and every :meth:`recur`
appends the detached weights float [B, T, L] (zero on invalid positions) to
``model.recorded_attention``; the N-gram RNN records nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, List, Optional

import torch
from torch import Tensor, nn

from ..options import option
from .base import LanguageModel, ModelConfig, Output, State, lstm_forget_bias, run_rnn, slide_window
from .registry import register, register_variant

INIT_RANGE = 0.1  # ``001`` section 4.1
_WINDOW = ">= 1 (previous outputs attended over)"  # model_config.window


@dataclass
class _ShortSpanConfig(ModelConfig):
    """Settings shared by the four models: ``hidden_size`` k (>= 1), the size of EACH piece of
    the LSTM output (parts * k units, parts = 1 / 2 / 3 / N - 1 for attention / key-value /
    key-value-predict / ngram-rnn) and of h*_t fed to the softmax layer."""

    hidden_size: int = option(100, kind="int", range=">= 1 (units per piece of the LSTM output)")


@dataclass
class AttentionConfig(_ShortSpanConfig):
    """Attention / key-value settings; ``window`` L = previous outputs attended over
    (``001`` Figure 2c: L = 10)."""

    window: int = option(10, kind="int", range=_WINDOW)


@dataclass
class KeyValuePredictConfig(AttentionConfig):
    """Key-value-predict settings (``001`` Figure 2c: best window L = 5)."""

    window: int = option(5, kind="int", range=_WINDOW)


@dataclass
class NgramRNNConfig(_ShortSpanConfig):
    """N-gram RNN settings: ``order`` N >= 2 (``001`` Figure 2b: N = 4 best); the LSTM
    output has N - 1 pieces and the window holds the previous N - 2 steps."""

    order: int = option(4, kind="int", range=">= 2 (N - 1 pieces of the LSTM output)")


class _ShortSpanLM(LanguageModel):
    """Shared machinery: LSTM, the output-window state and its unfolding.

    Subclasses give the number of pieces of h_t, the window L and ``memory_parts``
    (the pieces stored in the window, a contiguous range) and implement :meth:`readout`.
    """

    record_attention: bool = False

    def __init__(self, config, vocab_size: int, num_parts: int, window: int, memory_parts: range):
        super().__init__(config, vocab_size, config.hidden_size)
        k = config.hidden_size
        self.num_parts, self.window, self.memory_parts = num_parts, window, memory_parts
        self.lstm_size = self.num_parts * k
        self.memory_dim = len(self.memory_parts) * k
        self.recorded_attention: List[Tensor] = []
        self.lstm = nn.LSTM(config.embedding_dim, self.lstm_size, batch_first=True)

    def _init_weights(self) -> None:
        """U(-0.1, 0.1) for all weights but the embedding/decoder (set by the base class),
        LSTM forget-gate bias 1 (``001`` section 4.1)."""
        output = self.adaptive if self.adaptive is not None else self.decoder
        skip = {id(self.embedding.weight)} | {id(p) for p in output.parameters()}
        with torch.no_grad():
            for p in self.parameters():
                if id(p) not in skip:
                    p.uniform_(-INIT_RANGE, INIT_RANGE)
        lstm_forget_bias(self.lstm, self.lstm_size)

    def piece(self, h: Tensor, i: int) -> Tensor:
        """Piece ``i`` (0-based) of k units of h float [..., parts*k] -> [..., k]."""
        k = self.config.hidden_size
        return h[..., i * k:(i + 1) * k]

    # -- state --------------------------------------------------------------------------
    def init_state(self, batch_size: int, device=None) -> State:
        """Zero LSTM state and an empty window (all invalid; shapes in the module docstring)."""
        device = device or self.embedding.weight.device
        z = torch.zeros(batch_size, 1, self.lstm_size, device=device)
        memory = torch.zeros(batch_size, self.window, self.memory_dim, device=device)
        valid = torch.zeros(batch_size, self.window, dtype=torch.bool, device=device)
        return z, z.clone(), memory, valid

    def windows(self, seq: Tensor) -> Tensor:
        """The window of every step: seq [B, L + T, ...] (memory then segment) ->
        [B, T, L, ...]; step t sees positions t .. t+L-1 (its L predecessors)."""
        t_len = seq.shape[1] - self.window
        if self.window == 0:
            return seq.new_zeros(seq.shape[0], t_len, 0, *seq.shape[2:])
        win = seq.unfold(1, self.window, 1)[:, :t_len]  # [B, T, ..., L]
        return win.movedim(-1, 2)

    def recur(self, x: Tensor, state: State, lengths: Optional[Tensor]) -> Output:
        """LSTM over embedded words x float [B, T, E], then :meth:`readout` of every step
        over its window; features h*_t float [B, T, k]. The returned window holds the L
        outputs before position lengths[b] (padding never enters it)."""
        h0, c0, memory, valid = state
        b, t_len, _ = x.shape
        y, (h, c) = run_rnn(self.lstm, x, (h0, c0), lengths)
        first = self.memory_parts.start * self.config.hidden_size
        seq = torch.cat([memory, y[..., first:first + self.memory_dim]], 1)  # [B, L+T, D_mem]
        seq_valid = torch.cat([valid, valid.new_ones(b, t_len)], 1)  # [B, L+T]
        features = self.readout(y, seq, self.windows(seq_valid))
        new_memory, new_valid = slide_window(seq, lengths, self.window), slide_window(seq_valid, lengths, self.window)
        return Output(features, (h, c, new_memory, new_valid), None)

    def readout(self, y: Tensor, seq: Tensor, valid: Tensor) -> Tensor:
        """h*_t float [B, T, k] from LSTM outputs y [B, T, parts*k], the stored pieces
        seq [B, L + T, D_mem] (memory then segment) and valid bool [B, T, L]."""
        raise NotImplementedError


class _AttentionLM(_ShortSpanLM):
    """Attention over the previous L outputs (``001`` eq. 1-4, 8-12, 16-17); the classes
    differ only in which piece of h_t is the key, the value and the predict vector."""

    Config = AttentionConfig
    key_part: ClassVar[int] = 0
    value_part: ClassVar[int] = 0
    predict_part: ClassVar[int] = 0

    def __init__(self, config: AttentionConfig, vocab_size: int):
        super().__init__(config, vocab_size,
                         num_parts=max(self.key_part, self.value_part, self.predict_part) + 1,
                         window=config.window,
                         memory_parts=range(0, max(self.key_part, self.value_part) + 1))
        k = config.hidden_size
        self.w_y = nn.Linear(k, k, bias=False)  # W^Y, applied to the window's keys
        self.w_h = nn.Linear(k, k, bias=False)  # W^h, applied to the current key
        self.w_score = nn.Linear(k, 1, bias=False)  # w
        self.w_r = nn.Linear(k, k, bias=False)  # W^r
        self.w_x = nn.Linear(k, k, bias=False)  # W^x
        self._init_weights()

    def readout(self, y: Tensor, seq: Tensor, valid: Tensor) -> Tensor:
        """Masked additive attention of every step over its window (see :meth:`recur`)."""
        keys = self.windows(self.w_y(self.piece(seq, self.key_part)))  # [B, T, L, k]
        values = self.windows(self.piece(seq, self.value_part))  # [B, T, L, k]
        m = torch.tanh(keys + self.w_h(self.piece(y, self.key_part)).unsqueeze(2))
        # w^T m over k: for a float ``nn.Linear`` a product and a sum, one row at a time (as a matrix-vector
        # product torch's CPU kernel rounds a row by the call's row count, .rows); an int8 module as it is
        w = self.w_score
        scores = (m * w.weight[0].to(m.dtype)).sum(-1) if type(w) is nn.Linear else w(m).squeeze(-1)  # [B, T, L]
        # invalid positions -> lowest float: exp gives exactly 0 when one position is
        # valid; a row without any is uniform before the mask zeroes it (r = 0, finite)
        scores = scores.masked_fill(~valid, torch.finfo(scores.dtype).min)
        alpha = torch.softmax(scores, -1) * valid
        if self.record_attention:
            self.recorded_attention.append(alpha.detach())
        r = torch.einsum("btl,btlk->btk", alpha, values)
        return torch.tanh(self.w_r(r) + self.w_x(self.piece(y, self.predict_part)))


AttentionLM = register_variant(
    "attention", "AttentionLM", _AttentionLM, "LSTM with attention over its previous L outputs (``001`` section "
    "2.1); the LSTM has k = ``hidden_size`` units. State and options: see the module docstring.",
    "LSTM attending over its previous L outputs (001 sec. 2.1)")
KeyValueLM = register_variant(
    "key-value", "KeyValueLM", _AttentionLM, "Key-value attention (``001`` section 2.2): h_t = [k_t; v_t], LSTM "
    "of 2k units.", "attention with outputs split into keys and values (001 sec. 2.2)", value_part=1, predict_part=1)
KeyValuePredictLM = register_variant(
    "key-value-predict", "KeyValuePredictLM", _AttentionLM, "Key-value-predict attention (``001`` section 2.3): "
    "h_t = [k_t; v_t; p_t], LSTM of 3k units, default window L = 5.",
    "keys, values and a separate predict vector (001 sec. 2.3)", Config=KeyValuePredictConfig, value_part=1,
    predict_part=2)


@register("ngram-rnn")
class NgramRNNLM(_ShortSpanLM):
    """N-gram RNN (``001`` section 2.4, eq. 21): the LSTM output (N - 1 pieces of k) and
    pieces 2 .. N-1 of the previous N - 2 outputs, concatenated, through tanh(W^N .).
    Missing predecessors at a stream start contribute zero pieces."""

    summary = "prediction from pieces of the last N-1 LSTM outputs (001 sec. 2.4)"

    Config = NgramRNNConfig

    def __init__(self, config: NgramRNNConfig, vocab_size: int):
        super().__init__(config, vocab_size, num_parts=config.order - 1, window=config.order - 2,
                         memory_parts=range(1, config.order - 1))
        k = config.hidden_size
        self.w_n = nn.Linear(self.num_parts * k, k, bias=False)  # W^N
        self._init_weights()

    def readout(self, y: Tensor, seq: Tensor, valid: Tensor) -> Tensor:
        """h*_t = tanh(W^N [h_t^1; h_{t-1}^2; ..]); window position j (h_{t-L+j}) gives
        stored piece L-1-j (0-based over pieces 2 .. N-1)."""
        b, t_len, n = valid.shape
        k = self.config.hidden_size
        win = self.windows(seq) * valid.unsqueeze(-1)  # [B, T, L, L*k]
        win = win.flip(2).reshape(b, t_len, n, n, k)  # [.., step back - 1, piece - 2, k]
        older = torch.diagonal(win, dim1=2, dim2=3)  # [B, T, k, L]: piece i+2 of h_{t-1-i}
        pieces = [self.piece(y, 0), older.transpose(2, 3).reshape(b, t_len, n * k)]
        return torch.tanh(self.w_n(torch.cat(pieces, -1)))
