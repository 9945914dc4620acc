"""The benchmark harness: what every script in ``benchmarks/`` shares, so that a script
states only what it times.

* timing: :func:`time_calls` (warm-up calls, then ``repeat`` timed ones, the CUDA
  device synchronised before each clock reading), :func:`clocked` (one call: wall and
  CPU seconds), :func:`median`, and :func:`add_repeat` for the one ``--repeat`` option;
* memory: :func:`peak_rss_mb` of this process, :func:`run_measured` of a command (its
  own peak RSS and CPU seconds), the CUDA peak (:func:`cuda_peak_mb`);
* the machine: :func:`machine` (one description for every JSON), and
  :class:`OtherLoad` / :func:`wait_for_quiet` (the cores other processes use, since other
  people's jobs on a shared machine distort timings);
* output and errors: :func:`write_json`, :func:`run_main`, :func:`parse_or_work`
  (worker processes), :func:`check_inputs`.

The scripts are modules of the ``benchmarks`` package, run from the repository root
as ``python -m benchmarks.NAME`` (so this tree's ``nbest_rescore`` is the one
imported); a script that starts itself again uses :func:`module_command`.

pyperf (calibrated loops, worker processes, metadata, JSON) was considered: its Runner
owns the command line and the process model and reports a mean over calibrated loops
in its own JSON format, while these scripts time whole commands, report medians of a
given number of runs with their peak RSS and write their own result JSON, which docs
and tests read. This module keeps those figures' meaning.
"""
from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
#: The benchmark's data (``ABC_NBEST_DATA`` overrides ``../shared/data/abc-nbest``).
DATA = Path(os.environ.get("ABC_NBEST_DATA", REPO.parent / "shared" / "data" / "abc-nbest"))
MB = 1 << 20
TICK = os.sysconf("SC_CLK_TCK")


# --- options and statistics ------------------------------------------------------------

def add_repeat(parser, default: int, help: str = "timed runs (medians reported)", nargs=None) -> None:
    """Add the one repetition option, ``--repeat N`` (``nargs``: as argparse's)."""
    parser.add_argument("--repeat", type=int, default=default, nargs=nargs, metavar="N",
                        help=f"{help} (default: {default})")


def median(xs) -> float:
    """The median of ``xs`` (any iterable of numbers), as a float."""
    return float(statistics.median(list(xs)))


# --- timing ----------------------------------------------------------------------------

def sync(device=None) -> None:
    """Wait for the CUDA device's queued work (nothing for a CPU device or None), so that
    a clock read next counts it."""
    if device is not None and str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def clocked(fn: Callable, device=None):
    """``(fn(), wall seconds, CPU seconds of this process)`` of one call, the device
    synchronised before both clock readings."""
    sync(device)
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t0, time.process_time() - c0


def time_calls(fn: Callable, repeat: int, warmup: int = 0, device=None) -> List[float]:
    """Wall seconds of each of ``repeat`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    return [clocked(fn, device)[1] for _ in range(repeat)]


# --- memory ----------------------------------------------------------------------------

def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, MB (``ru_maxrss``: KiB on Linux,
    bytes on macOS)."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / 1024.0 if sys.platform != "darwin" else r / MB


def cuda_peak_mb(device=None, reset: bool = False) -> Optional[float]:
    """Peak CUDA memory allocated on ``device`` since the last reset, MB (None off CUDA);
    with ``reset`` the peak is reset (after a synchronise) and None returned."""
    if device is None or not str(device).startswith("cuda"):
        return None
    import torch

    if reset:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        return None
    return torch.cuda.max_memory_allocated(device) / MB


def run_measured(cmd: Sequence[str], env: Optional[Dict[str, str]] = None, cwd=None, load_pids=None) -> dict:
    """Run ``cmd`` to the end: ``rc``, wall ``seconds``, the command's own ``peak_rss_mb``
    and ``cpu_seconds`` (user + system, its waited-for children included), its
    ``stdout`` and ``stderr`` (text); with ``load_pids`` (a list, may be empty) also
    ``other_cores`` and ``steal_cores`` meanwhile (:class:`OtherLoad`: processes other
    than this one, those pids and the command).

    The command runs under this file run as a small launcher (:func:`_launch`, a fresh
    interpreter of a few MB that reads its children's ``ru_maxrss``): a child forked
    straight from this process would start its ``ru_maxrss`` at this process's peak
    (Linux carries the peak over ``fork`` and ``exec``), and a benchmark that has
    imported torch would read its own size for every small command."""
    meter = OtherLoad(load_pids).start() if load_pids is not None else None
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r", suffix=".json") as usage:
        launcher = [sys.executable, "-I", os.path.abspath(__file__), usage.name, *cmd]
        subprocess.run(launcher, stdout=out, stderr=err, env=env, cwd=cwd, check=False)
        out.seek(0)
        err.seek(0)
        res = {**json.load(usage), "stdout": out.read().decode("utf-8", "replace"),
               "stderr": err.read().decode("utf-8", "replace")}
    if meter is not None:
        res["other_cores"], res["steal_cores"] = meter.stop(res["cpu_seconds"])
    return res


def _launch(usage_file: str, cmd: Sequence[str]) -> None:
    """The launcher of :func:`run_measured` (``python harness.py USAGE_FILE CMD...``):
    run ``cmd`` with this process's stdio and write its exit status ``rc``, wall
    ``seconds``, ``peak_rss_mb`` and ``cpu_seconds`` to ``usage_file`` as JSON."""
    t0 = time.perf_counter()
    try:
        rc = subprocess.call(list(cmd))
    except OSError as exc:  # no such program: reported as a failed command
        print(f"{cmd[0]}: {exc}", file=sys.stderr)
        rc = 127
    seconds = time.perf_counter() - t0
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(usage_file, "w") as f:
        json.dump({"rc": rc, "seconds": seconds, "peak_rss_mb": r.ru_maxrss / 1024.0,
                   "cpu_seconds": r.ru_utime + r.ru_stime}, f)


def module_command(module: str) -> List[str]:
    """The command line that runs the benchmark module ``module`` (e.g.
    ``benchmarks.rescore_speed``) in a fresh interpreter from the repository root."""
    return [sys.executable, "-m", module]


# --- the machine -----------------------------------------------------------------------

def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo") as f:
            name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        name = ""
    return name or platform.processor() or platform.machine()


def machine(threads: Optional[int] = None, device: Optional[str] = None, **extra) -> dict:
    """The machine description of every result JSON: ``cpu`` (model), ``cpu_count``,
    ``nproc`` (cores this process may use), ``mem_gb``, ``python``, ``torch``, torch
    ``threads`` (given, else torch's), ``load_average_at_start``; with ``device`` that
    and, on CUDA, ``gpu`` (its name); then ``extra``."""
    import torch

    info = {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "nproc": len(os.sched_getaffinity(0)),
            "mem_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30), 1),
            "python": platform.python_version(), "torch": torch.__version__,
            "threads": threads or torch.get_num_threads(), "load_average_at_start": list(os.getloadavg())}
    if device is not None:
        info["device"] = str(device)
        if str(device).startswith("cuda") and torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return {**info, **extra}


def machine_cpu_s():
    """(busy CPU seconds of the whole machine, steal seconds) since boot, from /proc/stat
    (None where it cannot be read)."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]] + [0] * 8
    except (OSError, ValueError):
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    return (user + nice + system + irq + softirq) / TICK, steal / TICK


def process_cpu_s(pids) -> float:
    """CPU seconds (user + system) that these processes have used so far (/proc/PID/stat)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15
        except (OSError, ValueError, IndexError):
            pass
    return total / TICK


class OtherLoad:
    """Mean number of cores used by processes other than this benchmark, the given pids
    (e.g. its busy processes) and its measured command between :meth:`start` and
    :meth:`stop` (from /proc: the machine's busy time less theirs), and the
    hypervisor's steal time in cores."""

    def __init__(self, pids=()):
        self.pids = list(pids)

    def _ours(self) -> float:
        t = os.times()
        return process_cpu_s(self.pids) + t.user + t.system

    def start(self):
        self.t0, self.m0, self.o0 = time.perf_counter(), machine_cpu_s(), self._ours()
        return self

    def stop(self, measured_cpu_s: float = 0.0):
        """(other cores, steal cores), or (None, None) without /proc/stat;
        ``measured_cpu_s``: the CPU seconds of the measured command (not ours)."""
        wall, m1, o1 = time.perf_counter() - self.t0, machine_cpu_s(), self._ours()
        if self.m0 is None or m1 is None or wall <= 0:
            return None, None
        other = (m1[0] - self.m0[0]) - (o1 - self.o0) - measured_cpu_s
        return round(max(0.0, other) / wall, 2), round((m1[1] - self.m0[1]) / wall, 2)


def wait_for_quiet(pids, max_other: float, timeout: float) -> float:
    """Wait (sampling 2 s at a time) until other processes use at most ``max_other``
    cores, or ``timeout`` seconds have passed; returns the seconds waited."""
    t0 = time.perf_counter()
    while timeout > 0:
        meter = OtherLoad(pids).start()
        time.sleep(2.0)
        other, _ = meter.stop()
        if other is None or other <= max_other or time.perf_counter() - t0 >= timeout:
            break
    return time.perf_counter() - t0


# --- output and errors -----------------------------------------------------------------

def write_json(path: Optional[str], out: dict) -> None:
    """Write ``out`` to ``path`` (indented JSON) and say so; nothing when ``path`` is None."""
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=2)
        print(f"wrote {path}")


def parse_or_work(parse_args: Callable, worker: Callable, argv=None):
    """``(argv, args)`` of a benchmark that runs its measurements in worker processes
    (``--worker NAME``: the child started by the parent); None after a worker has
    printed its result as JSON on stdout (the parent reads it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return None
    return argv, args


def run_main(main: Callable[[], object]) -> None:
    """Run a script's ``main()``; a :class:`~nbest_rescore.errors.DataError` (a missing
    or malformed checkpoint, N-best directory or reference file) ends the script with
    ``error: <message>`` on stderr and exit status 1, without a traceback."""
    from nbest_rescore.errors import DataError

    try:
        main()
    except DataError as exc:
        sys.exit(f"error: {exc}")


def check_inputs(parser, lm: str, nbest: str) -> None:
    """Stop with a usage error (exit status 2) unless ``lm`` is a file and ``nbest`` a
    directory, before any work starts."""
    if not os.path.isfile(lm):
        parser.error(f"--lm {lm}: no such checkpoint file (write one with nbest-rescore train or "
                     f"examples/make_random_checkpoint.py)")
    if not os.path.isdir(nbest):
        parser.error(f"--nbest {nbest}: no such N-best directory (e.g. ../shared/data/abc-nbest/dev)")


if __name__ == "__main__":  # the launcher of run_measured (stdlib only: run with python -I)
    _launch(sys.argv[1], sys.argv[2:])
