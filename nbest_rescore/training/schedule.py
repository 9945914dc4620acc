"""Learning-rate schedule: linear warmup, then decay over the planned training length."""
from __future__ import annotations

import math


class LRSchedule:
    """Multiplier of the base learning rate at a global step.

    factor(n, elapsed) = warmup(n) * decay(p), with warmup(n) = min(1, (n + 1) /
    warmup_steps) and p the fraction of the planned training done: n /
    ``planned_steps`` (``max_epochs`` epochs), or the fraction of ``max_seconds``
    elapsed when that is larger (a time budget ends training first). decay:
    ``constant`` 1; ``cosine`` m + (1 - m) (1 + cos(pi p)) / 2; ``linear`` 1 - (1 - m) p,
    with m = ``min_lr_ratio``.

    Args:
        optim: an :class:`~nbest_rescore.config.OptimConfig` (``lr_schedule``,
            ``warmup_steps``, ``min_lr_ratio``, ``max_seconds``).
        planned_steps: optimiser steps of the whole planned run (>= 1).
    """

    def __init__(self, optim, planned_steps: int):
        self.optim, self.planned = optim, max(1, planned_steps)

    def progress(self, step: int, elapsed: float) -> float:
        """Fraction of the planned run done, in [0, 1]."""
        p = step / self.planned
        if self.optim.max_seconds:
            p = max(p, elapsed / self.optim.max_seconds)
        return min(1.0, max(0.0, p))

    def factor(self, step: int, elapsed: float = 0.0) -> float:
        """Multiplier of the base learning rate at global step ``step`` (0-based)."""
        o = self.optim
        w = min(1.0, (step + 1) / o.warmup_steps) if o.warmup_steps else 1.0
        if o.lr_schedule == "constant":
            return w
        p, m = self.progress(step, elapsed), o.min_lr_ratio
        if o.lr_schedule == "cosine":
            return w * (m + (1 - m) * 0.5 * (1 + math.cos(math.pi * p)))
        return w * (1 - (1 - m) * p)
