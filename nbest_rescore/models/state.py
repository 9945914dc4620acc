"""A model's state and the helpers that work on every model's state. The state
(hidden vectors, memories) is a tuple of tensors, each batch-first ``[B, ...]``, so that
:func:`select_state`, :func:`expand_state` and :func:`reset_state` work for every model. A state tensor may only vary in length
along axis 1 where zeros in front mean empty slots (the neural cache keeps only the
slots filled so far, oldest first); :func:`cat_states` and :func:`reset_state` pad such
tensors in front to a common length. Rescoring starts each hypothesis from
the state reached after the 1-best history of its document; training carries the
state across BPTT segments and resets it only at document boundaries.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

State = Tuple[Tensor, ...]


class Output(NamedTuple):
    """What :meth:`~.base.LanguageModel.forward` returns.

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


def pad_front(t: Tensor, size: int) -> Tensor:
    """``t`` [B, S, ...] with ``size - S`` zero slots put in front along axis 1."""
    if t.dim() < 2 or t.shape[1] == size:
        return t
    return torch.cat([t.new_zeros((t.shape[0], size - t.shape[1], *t.shape[2:])), t], 1)


def align_slots(parts):
    """The tensors ``parts`` (one entry of several states, each [B_i, S_i, ...]) padded in
    front to the longest S_i (:func:`pad_front`; see the module docstring), so that
    they can be concatenated, written into one another or mixed row by row. Tensors that
    differ in another axis are left as they are (the caller's op raises RuntimeError)."""
    top = max((p.shape[1] for p in parts if p.dim() >= 2), default=0)
    return [pad_front(p, top) for p in parts]


def reset_state(state: State, mask: Tensor, initial: State) -> State:
    """Replace the rows where ``mask`` (bool [B]) is True by the rows of ``initial``
    (aligned first, :func:`align_slots`)."""
    out = []
    for s, s0 in zip(state, initial):
        s, s0 = align_slots((s, s0))
        m = mask.view(-1, *([1] * (s.dim() - 1)))
        out.append(torch.where(m, s0, s))
    return tuple(out)


def cat_states(states) -> State:
    """Concatenate states along the batch axis (aligned first, :func:`align_slots`)."""
    return tuple(torch.cat(align_slots(parts), 0) for parts in zip(*states))


def hold_done(t: int, lengths: Optional[Tensor], new: Tensor, old: Tensor, dim: int = 0) -> Tensor:
    """Step ``t`` of a step loop: ``new``, but ``old`` in the rows (batch axis ``dim``) that
    have read all their ``lengths[b]`` inputs already (``new`` itself when lengths is None)."""
    if lengths is None:
        return new
    shape = [1] * new.dim()
    shape[dim] = -1
    return torch.where((t < lengths).view(shape), new, old)


def state_row_bytes(state: State) -> int:
    """Bytes of one row (one stream) of ``state``."""
    return sum(s[:1].numel() * s.element_size() for s in state)


def detach_state(state: State) -> State:
    """The same state cut from the autograd graph (between BPTT segments)."""
    return tuple(s.detach() for s in state)


def run_rnn(rnn: nn.Module, x: Tensor, state: State, lengths: Optional[Tensor]) -> Tuple[Tensor, State]:
    """torch's batch-first ``nn.RNN``/``nn.GRU``/``nn.LSTM`` over ``x`` float [B, T, E] from
    the batch-first state ``(h,)`` or ``(h, c)`` float [B, L, H], packed when ``lengths``
    vary (each row's end state taken at its own length) -> (outputs [B, T, H], end state)."""
    hx = tuple(s.transpose(0, 1).contiguous() for s in state)
    hx = hx if len(hx) == 2 else hx[0]
    if lengths is None or bool((lengths == x.shape[1]).all()):
        y, hn = rnn(x, hx)
    else:
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        y, hn = rnn(packed, hx)
        y, _ = pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
    return y, tuple(s.transpose(0, 1) for s in (hn if isinstance(hn, tuple) else (hn,)))


def lstm_forget_bias(lstm: nn.Module, hidden: int) -> None:
    """Forget-gate bias 1 in every layer of ``lstm`` (``bias_ih`` 1, ``bias_hh`` 0; gates i, f, g, o)."""
    with torch.no_grad():
        for name, p in lstm.named_parameters():
            if name.startswith("bias_ih"):
                p[hidden:2 * hidden].fill_(1.0)
            elif name.startswith("bias_hh"):
                p[hidden:2 * hidden].zero_()


def slide_window(seq: Tensor, lengths: Optional[Tensor], size: int) -> Tensor:
    """The window carried to the next call: of ``seq`` [B, size + T, ...] (the state's
    ``size`` slots, then the T positions read), the ``size`` positions that end at each
    row's last real input, ``lengths[b]`` .. ``lengths[b] + size - 1`` (the last ``size``
    when ``lengths`` is None), so that padding never enters it."""
    t_len = seq.shape[1] - size
    if lengths is None or bool((lengths == t_len).all()):
        return seq[:, t_len:]
    idx = lengths.to(seq.device).view(-1, 1) + torch.arange(size, device=seq.device)  # [B, size]
    return seq.gather(1, idx.view(*idx.shape, *([1] * (seq.dim() - 2))).expand(-1, -1, *seq.shape[2:]))
