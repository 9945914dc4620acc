"""The whole training step captured as one CUDA graph (``optim.cuda_graph``).

A BPTT step of a recurrent LM launches a few hundred small kernels, so on a fast GPU
the host's launch work sets the pace. With every segment of the same shape (streams
aligned to the BPTT length) the step (as docs/training.md, ``cuda_graph``, lists it,
and the running NLL) is recorded once and replayed per segment: the host copies the
segment's ids into static buffers and launches one graph. The optimiser must be
capturable with a tensor learning rate
(:func:`~nbest_rescore.training.step.make_optimizer` with ``capturable=True``).

Warm-up runs needed before capture (cuDNN plans, optimiser state) are undone: the
weights, optimiser state and random state are restored in place, so training starts
from exactly the state it had. Models whose step reads values back to the host or
changes shapes (the adaptive softmax's per-cluster row selection, the neural cache)
cannot be captured: :func:`GraphedStep.capture` raises and the caller trains eagerly.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor


class GraphedStep:
    """One training step of fixed shape [B, T], replayable.

    Args:
        model, opt: the model (on CUDA, train mode) and its capturable optimiser.
        batch, bptt: B and T of every segment.
        step_fn: ``step_fn(state, inputs, targets, mask, reset) -> (new_state,
            SegmentLoss)`` doing forward, loss, backward, clipping and the update
            (:func:`~.step.train_step` with its options bound).
    """

    def __init__(self, model, opt, batch: int, bptt: int, step_fn):
        self.model, self.opt, self.step_fn = model, opt, step_fn
        self.device = dev = next(model.parameters()).device
        # the static inputs, targets, mask and reset that every replay reads
        self.segment = tuple(torch.full((batch, bptt), fill, dtype=dtype, device=dev) for dtype, fill in
                             ((torch.long, 0), (torch.long, 0), (torch.bool, False), (torch.bool, True)))
        self.state = tuple(s.clone() for s in model.init_state(batch, dev))
        # the summed NLL, |log Z| and auxiliary loss of the real tokens
        self.nll, self.abs_log_z, self.aux = (torch.zeros((), dtype=torch.float64, device=dev) for _ in range(3))
        self.graph: Optional[torch.cuda.CUDAGraph] = None
        self.shape = (batch, bptt)

    def _body(self) -> None:
        new_state, step = self.step_fn(self.state, *self.segment)
        for s, n in zip(self.state, new_state):
            s.copy_(n.detach())
        for total, x in ((self.nll, step.nll), (self.abs_log_z, step.abs_log_z), (self.aux, step.aux)):
            if x is not None:
                total.add_(x)

    def capture(self, warmup: int = 3) -> None:
        """Warm up (then undo the warm-up's effects) and record the step.

        Raises:
            RuntimeError (or another torch error): the step cannot be captured
                (host synchronisation or data-dependent shapes inside it).
        """
        weights = [*self.model.parameters(), *self.model.buffers()]
        saved_weights = [w.detach().clone() for w in weights]
        before = {(id(p), k): t.detach().clone() for p, st in self.opt.state.items() for k, t in st.items()
                  if isinstance(t, Tensor)}
        rng = torch.cuda.get_rng_state(self.device)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(warmup):
                self._body()
        torch.cuda.current_stream(self.device).wait_stream(side)
        # undo the warm-up in place: weights, buffers, optimiser state (moments and step
        # counts it had, zeros where the warm-up created them), random state
        with torch.no_grad():
            for w, saved in zip(weights, saved_weights):
                w.copy_(saved)
            for p, st in self.opt.state.items():
                for k, t in st.items():
                    if isinstance(t, Tensor):
                        saved = before.get((id(p), k))
                        t.copy_(saved) if saved is not None else t.zero_()
        torch.cuda.set_rng_state(rng, self.device)
        self.opt.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._body()
        torch.cuda.synchronize(self.device)
        self.graph = graph
        self.clear()

    def clear(self) -> None:
        """Zero the NLL accumulators and reset the carried state to the initial one."""
        for total in (self.nll, self.abs_log_z, self.aux):
            total.zero_()
        for s, s0 in zip(self.state, self.model.init_state(self.shape[0], self.device)):
            s.copy_(s0)

    def replay(self, inputs: Tensor, targets: Tensor, mask: Tensor, reset: Tensor) -> None:
        """One update on this segment (device tensors [B, T]); no host synchronisation."""
        for static, t in zip(self.segment, (inputs, targets, mask, reset)):
            static.copy_(t, non_blocking=True)
        self.graph.replay()
