"""The stateful interface every language model implements.

A model reads word ids ``[B, T]`` and predicts the next word at every position. Its
recurrent state (hidden vectors, memories) is a tuple of tensors, each batch-first
``[B, ...]``, so that the generic helpers :func:`select_state`, :func:`expand_state`
and :func:`reset_state` work for every model. A state tensor may only vary in length
along axis 1 where zeros in front mean empty slots (the neural cache keeps only the
slots filled so far, oldest first); :func:`cat_states` and :func:`reset_state` pad such
tensors in front to a common length. Rescoring starts each hypothesis from
the state reached after the 1-best history of its document; training carries the
state across BPTT segments and resets it only at document boundaries.

Subclasses implement :meth:`LanguageModel.init_state` and :meth:`LanguageModel.recur`;
embedding, input/output dropout, weight tying and the output softmax are shared here.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import ClassVar, NamedTuple, Optional, Tuple

import torch
from torch import Tensor, nn

State = Tuple[Tensor, ...]


class Output(NamedTuple):
    """What :meth:`LanguageModel.forward` returns.

    features: float [B, T, D] inputs of the output layer.
    state: the state after the inputs (after ``lengths[b]`` inputs of row b when
        lengths are given, else after all T).
    aux_loss: scalar auxiliary training loss (e.g. AMN's implicit-target loss), or None.
    """

    features: Tensor
    state: State
    aux_loss: Optional[Tensor]


def select_state(state: State, index: Tensor) -> State:
    """Rows ``index`` (int64 [B']) of every state tensor -> state of batch B'."""
    return tuple(s.index_select(0, index) for s in state)


def expand_state(state: State, n: int) -> State:
    """Repeat each row ``n`` times (row b -> rows b*n .. b*n+n-1)."""
    return tuple(s.repeat_interleave(n, dim=0) for s in state)


def _pad_front(t: Tensor, size: int) -> Tensor:
    """``t`` [B, S, ...] with ``size - S`` zero slots put in front along axis 1."""
    if t.dim() < 2 or t.shape[1] == size:
        return t
    return torch.cat([t.new_zeros((t.shape[0], size - t.shape[1], *t.shape[2:])), t], 1)


def align_slots(parts):
    """The tensors ``parts`` (one entry of several states, each [B_i, S_i, ...]) padded
    in front along axis 1 with zeros to the longest S_i, so that they can be
    concatenated, written into one another or mixed row by row. Only the neural cache
    varies in S (its filled slots, oldest first; zero slots are empty); other state
    entries are returned unchanged. Tensors that differ in any other axis are left
    as they are, so the caller's ``torch.cat`` / ``torch.where`` raises RuntimeError."""
    sizes = {p.shape[1] for p in parts if p.dim() >= 2}
    if len(sizes) <= 1:
        return list(parts)
    top = max(sizes)
    return [_pad_front(p, top) for p in parts]


def reset_state(state: State, mask: Tensor, initial: State) -> State:
    """Replace the rows where ``mask`` (bool [B]) is True by the rows of ``initial``
    (tensors of different lengths along axis 1 are aligned first, see :func:`cat_states`)."""
    out = []
    for s, s0 in zip(state, initial):
        s, s0 = align_slots((s, s0))
        m = mask.view(-1, *([1] * (s.dim() - 1)))
        out.append(torch.where(m, s0, s))
    return tuple(out)


def cat_states(states) -> State:
    """Concatenate states along the batch axis. A state tensor whose length along axis
    1 differs between the parts (only the neural cache's filled slots do) is padded in
    front with zeros (empty slots) to the longest."""
    states = list(states)
    return tuple(torch.cat(align_slots(parts), 0) for parts in zip(*states))


def detach_state(state: State) -> State:
    """The same state cut from the autograd graph (between BPTT segments)."""
    return tuple(s.detach() for s in state)


class LanguageModel(nn.Module):
    """Base class: word embedding -> :meth:`recur` -> (dropout) -> linear -> log-softmax.

    Subclasses set ``Config`` (a dataclass with at least ``embedding_dim``,
    ``dropout_emb``, ``dropout_out``, ``tie_weights``) and ``feature_dim``.
    """

    name: ClassVar[str] = "base"
    #: one line for ``nbest-rescore models`` (default: the docstring's first paragraph)
    summary: ClassVar[str] = ""
    Config: ClassVar[type]

    def __init__(self, config, vocab_size: int, feature_dim: int):
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, config.embedding_dim)
        self.drop_emb = nn.Dropout(getattr(config, "dropout_emb", 0.0))
        self.drop_out = nn.Dropout(getattr(config, "dropout_out", 0.0))
        self.project = None
        if getattr(config, "tie_weights", False) and feature_dim != config.embedding_dim:
            self.project = nn.Linear(feature_dim, config.embedding_dim)
            feature_dim = config.embedding_dim
        self.decoder = nn.Linear(feature_dim, vocab_size)
        if getattr(config, "tie_weights", False):
            self.decoder.weight = self.embedding.weight
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    # -- to implement ---------------------------------------------------------------
    def init_state(self, batch_size: int, device=None) -> State:
        """The state at the start of a document for ``batch_size`` streams."""
        raise NotImplementedError

    def recur(self, x: Tensor, state: State, lengths: Optional[Tensor]) -> Output:
        """Run the recurrence on embedded inputs ``x`` float [B, T, E]."""
        raise NotImplementedError

    # -- shared -------------------------------------------------------------------------
    def forward(self, tokens: Tensor, state: State, lengths: Optional[Tensor] = None) -> Output:
        """Read ``tokens`` int64 [B, T] from ``state``.

        Args:
            tokens: word ids [B, T]; positions at or after ``lengths[b]`` are padding.
            state: batch-first state of batch B.
            lengths: int64 [B] (on CPU or the model's device), each in [1, T], or None.
        Returns:
            :class:`Output` with features [B, T, D]; the state is the one reached after
            ``lengths[b]`` inputs of row b (all T when lengths is None). Outputs at
            padded positions are unspecified; earlier positions never depend on later
            tokens (causality). Floating-point state tensors are cast to the
            embedding's dtype (a model cast to bfloat16 accepts a float32 initial state).
        """
        x = self.drop_emb(self.embedding(tokens))
        state = tuple(s.to(x.dtype) if s.is_floating_point() else s for s in state)
        return self.recur(x, state, lengths)

    def logits(self, features: Tensor) -> Tensor:
        """Unnormalised output scores float [B, T, V] from features [B, T, D]."""
        h = self.drop_out(features)
        if self.project is not None:
            h = self.project(h)
        return self.decoder(h)

    def target_logits(self, features: Tensor, targets: Tensor) -> Tensor:
        """The logit of each target word only: ``logits(features).gather(-1, targets)``
        without the [B, T, V] product (features . W[target] + b[target]).

        Args:
            features: float [B, T, D] (from :meth:`forward`); targets: int64 [B, T].
        Returns:
            float [B, T] unnormalised scores (equal to the gathered full logits up to
            floating-point summation order). A model that overrides :meth:`logits`
            (e.g. the cache wrapper) or whose output layer is not a plain ``nn.Linear``
            (e.g. int8-quantised) falls back to the full product.
        """
        if type(self).logits is not LanguageModel.logits:
            return self.logits(features).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        h = self.drop_out(features)
        if self.project is not None:
            h = self.project(h)
        if type(self.decoder) is not nn.Linear:
            return self.decoder(h).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        w = self.decoder.weight.index_select(0, targets.reshape(-1)).view(*targets.shape, -1)  # [B, T, D]
        b = self.decoder.bias.index_select(0, targets.reshape(-1)).view(targets.shape)
        return (h * w.to(h.dtype)).sum(-1) + b.to(h.dtype)

    def log_probs(self, inputs: Tensor, targets: Tensor, state: State,
                  lengths: Optional[Tensor] = None) -> Tuple[Tensor, State]:
        """Natural-log probabilities of ``targets`` given ``inputs`` from ``state``.

        Args:
            inputs, targets: int64 [B, T] (targets are inputs shifted by one).
            state: state of batch B; lengths as in :meth:`forward`.
        Returns:
            (float32 [B, T] log P(targets[b, t] | inputs[b, :t+1], state), new state).
            Padded positions hold unspecified values: mask them.
        """
        out = self.forward(inputs, state, lengths)
        logp = torch.log_softmax(self.logits(out.features).float(), dim=-1)
        return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1), out.state

    def self_normalized_log_probs(self, inputs: Tensor, targets: Tensor, state: State,
                                  lengths: Optional[Tensor] = None) -> Tuple[Tensor, State]:
        """Approximate natural-log probabilities of ``targets``: the target's logit alone,
        log Z taken as 0 (self-normalisation, Chen et al. 2016, the thesis ``000``
        section 3.5 ref. [45]). Only sensible for a model trained with
        ``optim.self_norm_weight > 0``; costs O(D) per word instead of O(V D).

        Arguments and return as in :meth:`log_probs` (float32 [B, T], new state);
        padded positions hold unspecified values. The values are not normalised: they
        differ from :meth:`log_probs` by log Z of each position.
        """
        out = self.forward(inputs, state, lengths)
        return self.target_logits(out.features, targets).float(), out.state

    def on_epoch_end(self, epoch: int) -> None:
        """Hook called by the trainer after each epoch (e.g. attention annealing)."""

    def config_dict(self) -> dict:
        """The model config as a plain dict (stored in checkpoints)."""
        return asdict(self.config)

    def num_parameters(self) -> dict:
        """Parameter counts: ``total`` and ``without_embeddings`` (input and output
        embedding matrices excluded; a tied matrix is counted once)."""
        seen, total = set(), 0
        for p in self.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                total += p.numel()
        emb = self.embedding.weight.numel()
        if self.decoder.weight is not self.embedding.weight:
            emb += self.decoder.weight.numel()
        return {"total": total, "without_embeddings": total - emb}
