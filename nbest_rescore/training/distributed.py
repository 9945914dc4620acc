"""Data-parallel training over K processes (``torchrun``): what the trainer needs of
``torch.distributed`` and ``DistributedDataParallel``, in one place. How the work is
split and what the ranks agree on: docs/training.md (Multi-GPU and multi-node training).

:func:`session` recognises a launch by ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``
(NCCL on CUDA, one device ``cuda:LOCAL_RANK`` per process; gloo on the CPU); without
them (or with one process) every helper below is a no-op.
"""
from __future__ import annotations

import contextlib
import inspect
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, List, Optional, Tuple

import torch

from ..errors import DataError

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class World:
    """This process's place among the training processes.

    rank: 0..size-1 (rank 0 writes checkpoints and logs); size: K processes;
    device: its device (``cuda:LOCAL_RANK`` on CUDA).
    """

    rank: int = 0
    size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def distributed(self) -> bool:
        """More than one process (a process group exists)."""
        return self.size > 1

    @property
    def main(self) -> bool:
        """Rank 0: the process that writes checkpoints, logs and prints."""
        return self.rank == 0

    def shard(self, rows: int) -> slice:
        """This rank's equal, contiguous part of ``rows`` training streams.

        Raises:
            DataError: ``rows`` not divisible by the ranks (fewer documents than streams).
        """
        if rows % self.size:
            raise DataError(f"the training text gives only {rows} streams for {self.size} processes (too few "
                            f"documents for optim.batch_size): lower optim.batch_size or train on more text")
        n = rows // self.size
        return slice(self.rank * n, (self.rank + 1) * n)

    def part(self, rows: int) -> slice:
        """This rank's contiguous part of ``rows`` (sizes differ by at most one; may be
        empty): for evaluation, where nothing is averaged."""
        return slice(self.rank * rows // self.size, (self.rank + 1) * rows // self.size)

    def sum(self, *values: float) -> List[float]:
        """The sums over the ranks (float64), bit-identical on every rank (reduced on
        rank 0, then broadcast). Collective: every rank must call it."""
        return self.from_main(*values, reduce=True)

    def from_main(self, *values: float, reduce: bool = False) -> List[float]:
        """Rank 0's values on every rank (float64; with ``reduce`` first summed onto
        rank 0). Collective."""
        if not self.distributed:
            return [float(v) for v in values]
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        if reduce:
            torch.distributed.reduce(t, dst=0)
        torch.distributed.broadcast(t, src=0)
        return t.tolist()

    def gather(self, obj) -> list:
        """Every rank's ``obj`` (picklable), in rank order, on every rank. Collective."""
        if not self.distributed:
            return [obj]
        out = [None] * self.size
        torch.distributed.all_gather_object(out, obj)
        return out

    def wrap(self, model: torch.nn.Module, forward: Callable) -> Optional[torch.nn.Module]:
        """``DistributedDataParallel`` around ``forward`` (a function of ``model``'s
        parameters, e.g. the trainer's segment forward + loss); None for one process.
        ``find_unused_parameters`` only for an adaptive softmax (clusters without targets
        get no gradient); buffers are not broadcast (schedules the trainer sets alike on
        every rank, no running statistics)."""
        if not self.distributed:
            return None
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        # (torch >= 2.13 names broadcast_buffers=False forward_sync_buffers=False)
        no_sync = ({"forward_sync_buffers": False}
                   if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
                   else {"broadcast_buffers": False})
        return DistributedDataParallel(_Forward(model, forward), device_ids=ids, **no_sync,
                                       find_unused_parameters=getattr(model, "adaptive", None) is not None)

    def seed_epoch(self, seed: int, epoch: int) -> None:
        """With K ranks, seed this rank's generators (dropout) from (seed, epoch, rank)
        at the start of every epoch: ranks draw different masks, and ``--resume``
        restores them without saving K random states. No-op for one process (its
        random state is carried and checkpointed as before)."""
        if self.distributed:
            torch.manual_seed((seed * 1_000_003 + epoch) * 65_537 + self.rank)


SINGLE = World()


class _Forward(torch.nn.Module):
    """A module whose forward is ``fn`` and whose parameters are ``model``'s: what
    DDP wraps, so that the whole segment (model call and output-layer loss) runs inside
    the wrapped forward."""

    def __init__(self, model: torch.nn.Module, fn: Callable):
        super().__init__()
        self.model = model
        self._fn = fn

    def forward(self, *args, **kwargs):
        return self._fn(*args, **kwargs)


class Clock:
    """Seconds since ``start`` (a ``time.perf_counter()`` value) as all ranks see them.

    One process: read at every call. K ranks: rank 0's reading, broadcast at the first
    call and then whenever ``step`` has advanced by ``every`` (the trainer's
    ``log_interval``), with the flags of all ranks (a stop signal). Every rank must call
    it with the same steps.
    """

    def __init__(self, world: World, start: float, every: int):
        self.world, self.start, self.every = world, start, max(1, int(every))
        self._at, self._value, self._flag = None, 0.0, False  # step and values of the last broadcast

    def __call__(self, step: int, flag: bool = False) -> Tuple[float, bool]:
        """(the seconds, whether ``flag`` is set on any rank; K ranks: as of the last
        broadcast, so that every rank answers alike)."""
        if not self.world.distributed:
            return time.perf_counter() - self.start, flag
        if self._at is None or step - self._at >= self.every:
            mine = time.perf_counter() - self.start if self.world.main else 0.0
            self._value, flags = self.world.from_main(mine, float(flag), reduce=True)
            self._flag, self._at = flags > 0, step
        return self._value, self._flag


def launched() -> Optional[tuple]:
    """(rank, world size, local rank) from the launcher's environment when it starts
    more than one process, else None.

    Raises:
        DataError: the variables are not integers or are inconsistent.
    """
    size = os.environ.get("WORLD_SIZE")
    if size is None:
        return None
    try:
        size, rank = int(size), int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError:
        raise DataError(f"WORLD_SIZE={os.environ.get('WORLD_SIZE')!r}, RANK={os.environ.get('RANK')!r}, "
                        f"LOCAL_RANK={os.environ.get('LOCAL_RANK')!r}: expected integers (set by torchrun)") from None
    if size <= 1:
        return None
    if not 0 <= rank < size or local < 0:
        raise DataError(f"RANK {rank} / LOCAL_RANK {local} outside WORLD_SIZE {size}: launch with torchrun")
    return rank, size, local


def _rank_device(device: torch.device, local: int) -> torch.device:
    if device.type != "cuda":
        return device
    if device.index is not None:
        raise DataError(f"--device {device}: under torchrun each process uses cuda:LOCAL_RANK; give --device cuda")
    n = torch.cuda.device_count()
    if local >= n:
        raise DataError(f"LOCAL_RANK {local} but only {n} CUDA device(s) are visible: start at most {n} "
                        f"processes per machine (torchrun --nproc_per_node {n})")
    return torch.device("cuda", local)


@contextlib.contextmanager
def session(device, batch_size: Optional[int] = None) -> Iterator[World]:
    """The :class:`World` of this process for a training run. Under K > 1 processes:
    checks ``batch_size`` before joining the group (``env://``), raises the non-zero
    ranks' log level to warnings, and on leaving waits for every rank (after a
    successful run) and leaves the group; a group made by the caller is left alone.

    Raises:
        DataError: ``batch_size`` not divisible by K, a bad device for the launch, or
            no distributed support in this torch build.
    """
    device = torch.device(device)
    dist = torch.distributed
    external = dist.is_available() and dist.is_initialized()
    where = launched() if not external else (dist.get_rank(), dist.get_world_size(),
                                             int(os.environ.get("LOCAL_RANK", "0")))
    if where is None or where[1] <= 1:
        yield World(device=device)
        return
    rank, size, local = where
    world = World(rank, size, _rank_device(device, local))
    if batch_size is not None and batch_size % size:  # the global batch must divide among the ranks
        lower, upper = batch_size // size * size, -(-batch_size // size) * size
        raise DataError(f"optim.batch_size {batch_size} (the global batch: streams over all processes) is "
                        f"not divisible by the {size} processes of this launch: set optim.batch_size "
                        f"to a multiple of {size} (e.g. {f'{lower} or {upper}' if lower else upper}) or change "
                        f"--nproc_per_node/--nnodes")
    if not dist.is_available():
        raise DataError("WORLD_SIZE > 1 but this torch build has no torch.distributed: train in one process")
    if world.device.type == "cuda":
        torch.cuda.set_device(world.device)
    if not external:
        for var in ("MASTER_ADDR", "MASTER_PORT"):
            if var not in os.environ:
                raise DataError(f"WORLD_SIZE={size} but {var} is not set: start the processes with torchrun")
        dist.init_process_group("nccl" if world.device.type == "cuda" else "gloo", rank=rank, world_size=size)
    pkg = logging.getLogger("nbest_rescore")
    old_level = pkg.level
    if not world.main:
        pkg.setLevel(max(logging.WARNING, pkg.getEffectiveLevel()))
    log.info("distributed training: %d processes (%s), rank 0 on %s", size,
             "nccl" if world.device.type == "cuda" else "gloo", world.device)
    ok = False
    try:
        yield world
        ok = True
    finally:
        pkg.setLevel(old_level)
        if not external:
            if ok:
                dist.barrier()
            dist.destroy_process_group()


__all__ = ["World", "SINGLE", "Clock", "launched", "session"]
