"""Training that survives preemption (docs/training.md "Preemption and mid-epoch
checkpoints"): when a mid-epoch checkpoint is due (``optim.checkpoint_interval``), and
SIGTERM/SIGINT, which finish the current step, write the resumable state and end the
run with :data:`EXIT_PREEMPTED`.

The interval (:class:`~nbest_rescore.config.Interval`) is a time (``5m``,
``90s``, ``1h``) or a number of optimiser steps (``500steps``); ``off`` writes after
every epoch only.
"""
from __future__ import annotations

import signal
import threading
from typing import Optional

from ..config import Interval

#: Exit status of a run stopped by SIGTERM/SIGINT after writing its resumable state
#: (EX_TEMPFAIL of sysexits.h: "try again"); rerun with ``--resume <out>.last.pt``
#: (or ``--resume auto``) to continue.
EXIT_PREEMPTED = 75

class IntervalClock:
    """Says when something done every ``interval`` (a mid-epoch checkpoint, a
    validation point) is due: ``interval`` after the last time (or the start of this
    process's run, at global step ``step``, ``elapsed`` seconds and ``words`` training
    words of the run). The seconds are the trainer's clock (with K ranks rank 0's, so
    that all ranks decide alike)."""

    def __init__(self, interval: Interval, step: int, elapsed: float, words: float = 0.0):
        self.interval = interval
        self._step, self._time, self._words = step, elapsed, words

    def due(self, step: int, elapsed: float, words: float = 0.0) -> bool:
        """Whether it is due before global step ``step``, ``elapsed`` s and ``words``
        training words into the run."""
        i = self.interval
        if i.steps is not None:
            return step - self._step >= i.steps
        if i.words is not None:
            return words - self._words >= i.words
        return i.seconds is not None and elapsed - self._time >= i.seconds

    def saved(self, step: int, elapsed: float, words: float = 0.0) -> None:
        """It is done before ``step``: count the interval from here."""
        self._step, self._time, self._words = step, elapsed, words


class StopSignals:
    """While active (a context manager), SIGTERM and SIGINT only set :attr:`received`
    (the signal's name), so that the trainer can finish its step and save; a second
    SIGINT interrupts at once (KeyboardInterrupt). Outside the main thread (where
    handlers cannot be installed) it does nothing."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.received: Optional[str] = None
        self._old = {}

    def _handle(self, signum, frame) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            self._old = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old = {}


class Preempted(Exception):  # (not a DataError: the input was fine, the run is to be continued)
    """A run stopped by a signal after writing its resumable state; the CLI prints
    the message and exits with :data:`EXIT_PREEMPTED`."""


__all__ = ["EXIT_PREEMPTED", "IntervalClock", "StopSignals", "Preempted"]
