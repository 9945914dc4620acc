"""Progress of long runs (training, perplexity, scoring), also where nobody watches a
terminal: a tqdm bar when the stream (stderr) is a terminal, else a log line of the
``nbest_rescore.progress`` logger (INFO) at the first call, then at a fixed interval,
and a last one at :meth:`Progress.close`, e.g.
``epoch 1: 1200/50000 tok (2.4%), 850 tok/s, ppl 312.40, ETA 57 s``.
"""
from __future__ import annotations

import logging
import math
import sys
import time
from typing import Callable, Optional, TextIO

log = logging.getLogger("nbest_rescore.progress")

INTERVAL_S = 30.0  # seconds between two log lines (no terminal)


class Progress:
    """A progress reporter called as ``progress(done, total)`` (cumulative counts, e.g.
    tokens for training and perplexity, hypotheses for scoring); ``close()`` at the end.
    The CLI makes one per command: ``Progress("hyp", no_progress)``.

    Args:
        unit: the counted thing, e.g. ``"tok"`` or ``"hyp"``.
        disable: report nothing (``--no-progress``).
        desc: prefix of the bar and of the log lines (e.g. ``"epoch 3"``).
        interval: seconds between log lines when ``stream`` is not a terminal (None:
            :data:`INTERVAL_S`); the first line comes at the first call.
        leave: keep the finished bar on the terminal.
        stream: the terminal the bar goes to (None: ``sys.stderr`` at the first call).
        clock: seconds, monotonic (tests inject a fake one).
    """

    def __init__(self, unit: str = "tok", disable: bool = False, *, desc: str = "", interval: Optional[float] = None,
                 leave: bool = True, stream: Optional[TextIO] = None, clock: Callable[[], float] = time.monotonic):
        self.unit, self.desc, self.disable, self.leave = unit, desc, disable, leave
        self.interval = INTERVAL_S if interval is None else float(interval)
        self.stream, self.clock = stream, clock
        self.bar = None
        self.start = self.next_line = None
        self.done = self.total = 0
        self.first_done = 0  # ``done`` at the first call (the rate counts from there)
        self.logged = -1  # ``done`` of the last log line
        self.perplexity: Optional[float] = None

    def __call__(self, done: int, total: int) -> None:
        """Record that ``done`` of ``total`` are done (cumulative)."""
        if self.disable:
            return
        if self.start is None:  # the first call
            stream = self.stream if self.stream is not None else sys.stderr
            self.start = self.next_line = self.clock()
            self.first_done = done
            try:
                terminal = bool(stream.isatty())
            except (AttributeError, ValueError):  # no isatty, or a closed file
                terminal = False
            if terminal:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=self.desc or None, unit=self.unit, file=stream, leave=self.leave)
        self.done, self.total = done, total
        if self.bar is not None:
            self.bar.total = total
            self.bar.update(done - self.bar.n)
        elif self.clock() >= self.next_line:
            self._log()

    def _log(self) -> None:
        log.info("%s", self.line())
        self.logged = self.done
        self.next_line = self.clock() + self.interval

    def set_perplexity(self, perplexity: float) -> None:
        """The current perplexity (shown in the bar and in the next log lines)."""
        self.perplexity = perplexity
        if self.bar is not None:
            self.bar.set_postfix(ppl=f"{perplexity:.1f}", refresh=False)

    def line(self) -> str:
        """``DESC: done/total UNIT (percent), rate UNIT/s[, ppl P], ETA`` of now; the
        rate counts from the first call (``?`` until more is done)."""
        elapsed = self.clock() - self.start if self.start is not None else 0.0
        rate = (self.done - self.first_done) / elapsed if elapsed > 0 and self.done > self.first_done else None
        speed = "?" if rate is None else f"{rate:.0f}"
        eta = "?" if rate is None else _duration(max(self.total - self.done, 0) / rate)
        pct = 100.0 * self.done / max(self.total, 1)
        ppl = "" if self.perplexity is None else f", ppl {self.perplexity:.2f}"
        head = f"{self.desc}: " if self.desc else ""
        return f"{head}{self.done}/{self.total} {self.unit} ({pct:.1f}%), {speed} {self.unit}/s{ppl}, ETA {eta}"

    def close(self) -> None:
        """Close the bar, or log the last state when it has not been logged yet."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.start is not None and self.logged != self.done:
            self._log()


def _duration(seconds: float) -> str:
    """``42 s``, ``12 min 5 s`` or ``3 h 20 min``."""
    if not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"
