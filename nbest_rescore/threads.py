"""CPU thread policy that survives shared machines.

Kaldi runs ``--nj`` jobs side by side on shared nodes, so a rescoring or training
process must not assume it owns every core. The policy:

* **How many threads**: the ``--threads`` option when given; else ``OMP_NUM_THREADS``
  or ``MKL_NUM_THREADS`` when set (Kaldi's job runners and cluster schedulers set
  them); else the number of cores this process may run on (its CPU affinity, which
  ``taskset``, cgroups and Slurm restrict), not the machine's core count.
* **How threads wait**: OpenMP's worker threads sleep as soon as they are idle
  between parallel regions (``OMP_WAIT_POLICY=PASSIVE``), unless the user set the
  variable. Unset (what a plain torch script gets), GNU OpenMP (libgomp, which torch's
  Linux CPU wheels ship) lets an idle thread spin for ``GOMP_SPINCOUNT`` iterations
  (300,000 by default, 100 with more OpenMP threads than CPUs) before it sleeps (on a
  2-core AMD EPYC roughly 10 ms of CPU per wait, in a small probe); ``ACTIVE`` spins
  practically forever. Spinning threads steal the time slices of other busy processes
  on their cores: scoring with 2 threads beside two busy processes on 2 cores took 17x
  its idle time unset, 6.4x with ``ACTIVE`` and 1.9x with ``PASSIVE``; idle,
  ``PASSIVE`` was 1.3x slower than unset (``benchmarks/contention.py``, the README's
  "Shared cores" table). The variable is read when the OpenMP runtime loads (when
  torch is first imported), so :func:`prefer_passive_wait` must run before that: the
  command line does it at start-up; Python API users who import torch first should
  export ``OMP_WAIT_POLICY=PASSIVE`` themselves.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Mapping, Optional

from .errors import DataError

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class ThreadPolicy:
    """The CPU threads a process uses: ``threads`` (>= 1), ``source`` (where the
    number came from: ``--threads``, an environment variable, or the CPU affinity)
    and ``wait_policy`` (``OMP_WAIT_POLICY`` as this process's environment has it, e.g.
    ``PASSIVE``, or ``unset (...)``; the OpenMP runtime read it when torch loaded)."""

    threads: int
    source: str
    wait_policy: str

    def describe(self) -> str:
        """One log line, e.g. ``2 CPU threads (CPU affinity: 2 cores), OpenMP wait policy PASSIVE``."""
        return f"{self.threads} CPU thread{'s' if self.threads != 1 else ''} ({self.source}), " \
               f"OpenMP wait policy {self.wait_policy}"


def prefer_passive_wait(environ: Optional[Mapping[str, str]] = None) -> None:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` unless it is set already (see the module
    docstring; effective only before torch is imported)."""
    (os.environ if environ is None else environ).setdefault("OMP_WAIT_POLICY", "PASSIVE")


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity; ``os.cpu_count()`` where the
    platform has no affinity call), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def thread_policy(requested: Optional[int] = None, environ: Optional[Mapping[str, str]] = None) -> ThreadPolicy:
    """The thread count for this process (see the module docstring).

    Args:
        requested: the ``--threads`` option (None: not given).
        environ: the environment to read (default ``os.environ``).
    Raises:
        DataError: ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` is set but not an integer
            >= 1 (naming the variable, its value and a fix).
    """
    env = os.environ if environ is None else environ
    wait = env.get("OMP_WAIT_POLICY", "unset (the OpenMP runtime's default; GNU OpenMP: spin a while, then sleep)")
    if requested is not None:
        return ThreadPolicy(requested, "--threads", wait)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        value = env.get(name, "").strip()
        if not value:
            continue
        first = value.split(",")[0]  # OpenMP allows a list per nesting level
        if not first.isdigit() or int(first) < 1:
            raise DataError(f"environment variable {name}={value!r}: expected an integer >= 1 "
                            f"(the number of CPU threads); e.g. export {name}=1, or unset it")
        return ThreadPolicy(int(first), f"{name}={value}", wait)
    cores = available_cores()
    return ThreadPolicy(cores, f"CPU affinity: {cores} core{'s' if cores != 1 else ''}", wait)
