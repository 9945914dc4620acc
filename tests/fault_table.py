#!/usr/bin/env python
"""Fault injection: SIGKILL the real commands while they run and check what they leave.

For each command (``score``, ``tune``, ``kaldi-score``, ``merge``, ``split``,
``convert --to jsonl``) on the ci lists with a tiny random GRU:

1. a *previous* output set is written with other settings (every file of it differs
   from the new run's, so a mix of the two sets shows);
2. the new command runs once uninterrupted as ``python -m nbest_rescore`` (the
   *reference*; its duration sets the kill times) and once through the fork server
   below (which must give the same bytes);
3. each kill starts from the previous set and SIGKILLs one run of the new command:
   at seeded random times (stratified over the measured duration), at phases of the
   output code (right after the staging folder or temporary file is made, before the
   first rename inside it, right before and right after the rename that publishes the
   set, in the middle of a multi-entry commit) and, once per command, a real
   ``python -m nbest_rescore`` process at a seeded random time;
4. after the kill the output location must hold the whole previous set or the whole
   new set, byte for byte, plus only hidden staging folders or temporary files of the
   killed process; then an uninterrupted rerun must remove those and write exactly the
   reference set.

JSON outputs are compared without their timing fields (:data:`TIMING_KEYS`).

To keep this fast, all but the real runs are forked from one *fork server* (a Python
that has imported torch and the toolkit once): a forked child is a process of its own
that runs ``nbest_rescore.cli.main`` with the command's arguments, exactly what
``python -m nbest_rescore`` runs after its imports; phase kills are armed in the
child by wrapping ``os.replace``/``os.rename``, the folder exchange of
:mod:`nbest_rescore.io.atomic` and ``tempfile.mkdtemp``/``mkstemp`` (only for paths
in the run's folder); the child SIGKILLs itself there.

Regenerate the table (about a minute on one core)::

    OMP_NUM_THREADS=1 python tests/fault_table.py --data ../shared/data/abc-nbest/ci \\
        --markdown fault_table.md

It is the harness of tests/test_fault_injection.py, which runs the same cases and asserts
the outcomes (and writes this table to the file named by ``FAULT_TABLE`` when that is set).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[1]
RUN_MARKER = ".nbest-rescore-run"  # nbest_rescore.io.output_checks.RUN_MARKER (kept here: no toolkit import)
#: nbest_rescore.io.output_checks._PROBE: the empty folder the output checks make and remove
#: before any work (hidden, but not staging: a kill on seeing it would come too late).
PROBE_PREFIX = ".nbest-rescore-probe-"
#: How often a real kill ``staging seen`` is tried until it leaves the killed run's
#: staging behind (the staging may be published between the look and the SIGKILL).
WATCH_TRIES = 3
#: Keys of the JSON outputs that hold measured times (left out of every comparison).
TIMING_KEYS = frozenset({"seconds", "tokens_per_s"})
#: Longest an uninterrupted forked run may take (seconds) before it counts as hung.
RUN_LIMIT = 300.0
#: Phase kill points: (name in the table, hook spec). ``EVENT:N:WHEN`` kills the child
#: before/after the N-th event (1-based) of that kind: ``stage`` = a staging folder or
#: temporary file made, ``inner`` = a rename inside staging, ``commit`` = a rename (or
#: folder exchange) whose destination is outside staging, ``probe`` = the empty folder
#: the output checks make (and remove) before any work.
PHASES = {
    "probe made": "probe:1:after",
    "staging made": "stage:1:after",
    "before 1st inner rename": "inner:1:before",
    "before commit rename": "commit:1:before",
    "after 1st commit rename": "commit:1:after",
}


LEGEND = """\
Kill points: `random i/k @ t`: SIGKILL t seconds after the fork (seeded, stratified
over the measured duration of an uninterrupted run); `probe made`: right after the
empty folder that checks the output is writable is made, before any work; `staging
made`: right after the hidden staging folder (or, for one file, the temporary file) is created; `before 1st
inner rename`: the first output file complete under its temporary name inside
staging; `before commit rename`: the whole set staged (run marker included), nothing
published; `after 1st commit rename`: right after the first rename that publishes
(the folder exchange, the file rename, or for kaldi-score the first of its per-entry
renames); `staging seen`: a real `python -m nbest_rescore` process killed as soon as
the harness sees its staging folder or temporary file (not the writability probe);
`(try N)`: the earlier tries' staging was published before the SIGKILL landed. Rerun `OK`: an uninterrupted
run afterwards left exactly the reference set and no hidden leftovers; `OK (probe)`:
the kill changed nothing, so the probe run from the same state is the rerun (a
`writability probe` leftover is the empty folder the output checks make and remove
before any work; the next run removes one of a dead process). JSON
outputs are compared without their timing fields (`seconds`, `tokens_per_s`).
`convert over its input`: no kill; `convert` run with its output on its own input
must be refused in one line (exit 1) and leave the folder as it was, byte for byte.
"""


# --------------------------------------------------------------------------- fork server

def _staged(path: str) -> bool:
    """Whether ``path`` lies in a staging folder or is a temporary file (a hidden name)."""
    return any(part.startswith(".") and part not in (".", "..", RUN_MARKER) for part in Path(path).parts) \
        or ".partial-" in path


def _arm(spec: str, root: str) -> None:
    """In a forked child: SIGKILL this process at the event ``spec`` (see :data:`PHASES`)
    of the output code, counting only paths under ``root``."""
    import tempfile

    from nbest_rescore.io import atomic, output_checks

    kind, nth, when = spec.split(":")
    counts = {"probe": 0, "stage": 0, "inner": 0, "commit": 0}

    def hit(event: str, phase: str, first: bool) -> None:
        if first:
            counts[event] += 1
        if event == kind and counts[event] == int(nth) and phase == when:
            os.kill(os.getpid(), signal.SIGKILL)

    def mine(path) -> bool:
        return os.path.abspath(os.fspath(path)).startswith(root)

    def renamer(orig):
        def wrapped(src, dst, *args, **kwargs):
            if not mine(dst):
                return orig(src, dst, *args, **kwargs)
            event = "inner" if _staged(os.fspath(dst)) else "commit"
            hit(event, "before", True)
            out = orig(src, dst, *args, **kwargs)
            if out is not False:  # _exchange returns False when it did nothing
                hit(event, "after", False)
            return out
        return wrapped

    def stager(orig):
        def wrapped(*args, **kwargs):
            out = orig(*args, **kwargs)
            if mine(kwargs.get("dir") or "."):
                hit("probe" if str(kwargs.get("prefix", "")).startswith(output_checks._PROBE) else "stage", "after", True)
            return out
        return wrapped

    os.replace, os.rename = renamer(os.replace), renamer(os.rename)
    atomic._exchange = renamer(atomic._exchange)
    tempfile.mkdtemp, tempfile.mkstemp = stager(tempfile.mkdtemp), stager(tempfile.mkstemp)


def _sabotage() -> None:
    """In a forked child: replace the folder swap of :mod:`nbest_rescore.io.atomic` by a
    non-atomic copy (delete the old folder, copy the new files one by one, SIGKILL after
    the first): the control case, which the checks must catch as a partial set."""
    from nbest_rescore.io import atomic

    def copy_over(staged, target):
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir()
        for entry in sorted(staged.iterdir()):
            shutil.copyfile(entry, target / entry.name)
            os.kill(os.getpid(), signal.SIGKILL)

    atomic._swap_in = copy_over


def _child(req: dict) -> None:
    """Body of a forked child: run one request and ``os._exit`` with its status."""
    code = 1
    try:
        os.chdir(req["cwd"])
        fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        if req.get("point"):
            _arm(req["point"], os.path.abspath(req["cwd"]))
        if req.get("sabotage"):
            _sabotage()
        if req.get("call"):
            from tiny_models import random_checkpoint  # tests/tiny_models.py, beside this file

            from nbest_rescore.io.kaldi_nbest import read_kaldi_nbest_dir
            random_checkpoint(read_kaldi_nbest_dir(req["call"]["nbest"]), req["call"]["out"])
            code = 0
        else:
            from nbest_rescore.cli import main
            sys.argv = ["nbest-rescore", *req["args"]]
            try:
                main(req["args"], prog_name="nbest-rescore")
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # reported through the log and the exit status
        import traceback
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _wait(pid: int, delay: Optional[float], t0: float) -> dict:
    """Wait for the child ``pid``; SIGKILL it ``delay`` s after ``t0`` if still running
    (without a delay: after :data:`RUN_LIMIT` s, a run that hangs)."""
    killed_at, step = None, 0.002 if delay is not None else 0.01
    limit = delay if delay is not None else RUN_LIMIT
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        now = time.monotonic()
        if now - t0 >= limit:
            os.kill(pid, signal.SIGKILL)
            killed_at = now - t0
            _, status = os.waitpid(pid, 0)
            break
        time.sleep(min(step, max(0.0, t0 + limit - now)))
    seconds = time.monotonic() - t0
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    return {"pid": pid, "killed": killed, "rc": None if killed else os.waitstatus_to_exitcode(status),
            "seconds": killed_at if killed_at is not None else seconds}


def serve() -> None:
    """The fork server: import the toolkit once, then for each JSON request on stdin
    fork a child that runs it (:func:`_child`) and answer one JSON line on stdout."""
    import importlib

    # nbest_rescore.cli first: it sets OMP_WAIT_POLICY before torch loads
    for name in ("nbest_rescore.cli", "nbest_rescore.api", "nbest_rescore.api.convert_job",
                 "nbest_rescore.api.kaldi_score_job", "nbest_rescore.api.shards", "nbest_rescore.api.tune_job",
                 "nbest_rescore.evaluation.plots", "matplotlib.pyplot"):
        importlib.import_module(name)
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(req)
        print(json.dumps(_wait(pid, req.get("delay"), t0)), flush=True)


class ForkServer:
    """Client of :func:`serve` running in a child Python (``python fault_table.py --serve``)."""

    def __init__(self, env: Dict[str, str]):
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
        ready = self.proc.stdout.readline()
        if not ready:
            raise RuntimeError("the fork server did not start")

    def run(self, cwd: Path, log: Path, args: Sequence[str] = (), **extra) -> dict:
        """Run ``nbest-rescore ARGS`` in ``cwd`` in a forked child; ``extra``: ``point``
        (a hook spec), ``delay`` (SIGKILL after so many seconds), ``sabotage``, ``call``."""
        req = {"cwd": str(cwd), "log": str(log), "args": [str(a) for a in args], **extra}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"the fork server stopped (exit status {self.proc.poll()})")
        return json.loads(answer)

    def close(self) -> None:
        """Stop the server (its stdin closed, then waited for)."""
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


def _staging_seen(folders: Sequence[Path]) -> bool:
    """Whether one of ``folders`` holds a hidden staging folder or temporary file (the
    writability probe, made and removed before any work, does not count)."""
    for folder in folders:
        try:
            if any(_staged(name) and not name.startswith(PROBE_PREFIX) for name in os.listdir(folder)):
                return True
        except OSError:
            pass
    return False


def run_real(cwd: Path, log: Path, args: Sequence[str], env: Dict[str, str], delay: Optional[float] = None,
             watch: Sequence[Path] = ()) -> dict:
    """``python -m nbest_rescore ARGS`` in ``cwd`` (stdout and stderr into ``log``),
    SIGKILLed when still running after ``delay`` seconds, or (``watch``) as soon as a
    staging folder or temporary file is seen in one of those folders (polled every
    millisecond or so)."""
    t0 = time.monotonic()
    with open(log, "w") as out:
        p = subprocess.Popen([sys.executable, "-m", "nbest_rescore", *map(str, args)], cwd=cwd, env=env,
                             stdout=out, stderr=subprocess.STDOUT)
        limit = delay if delay is not None else RUN_LIMIT
        while p.poll() is None:
            now = time.monotonic() - t0
            if now >= limit or (watch and _staging_seen(watch)):
                p.send_signal(signal.SIGKILL)
                p.wait()
                return {"pid": p.pid, "killed": True, "rc": None, "seconds": now}
            time.sleep(0.001 if watch else min(0.005, max(0.0, limit - now)))
    return {"pid": p.pid, "killed": False, "rc": p.returncode, "seconds": time.monotonic() - t0}


# --------------------------------------------------------------------------- states

def _normalized(name: str, data: bytes) -> bytes:
    """``data`` of the file ``name``; JSON files without :data:`TIMING_KEYS`."""
    if not (name.endswith(".json") or name == RUN_MARKER):
        return data

    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k not in TIMING_KEYS}
        return [strip(x) for x in v] if isinstance(v, list) else v

    try:
        return json.dumps(strip(json.loads(data)), sort_keys=True).encode()
    except ValueError:
        return data  # half-written: compares unequal to any whole file


def snapshot(root: Path) -> Dict[str, Optional[bytes]]:
    """Every path under ``root`` (relative): file -> normalized bytes, folder -> None."""
    out: Dict[str, Optional[bytes]] = {}
    for dirpath, dirs, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirs:
            out[os.path.normpath(os.path.join(rel, d))] = None
        for f in files:
            out[os.path.normpath(os.path.join(rel, f))] = _normalized(f, Path(dirpath, f).read_bytes())
    return out


def split_leftovers(snap: Dict[str, Optional[bytes]]) -> Tuple[Dict[str, Optional[bytes]], List[str]]:
    """(the visible state, the hidden top entries: staging folders and temporary files)."""
    visible = {p: v for p, v in snap.items() if not _staged(p)}
    hidden = sorted({_hidden_top(p) for p in snap if _staged(p)})
    return visible, hidden


def _hidden_top(path: str) -> str:
    """The path down to its first hidden component (a staging folder or temporary file)."""
    parts = Path(path).parts
    for i, part in enumerate(parts):
        if (part.startswith(".") and part != RUN_MARKER) or ".partial-" in part:
            return str(Path(*parts[:i + 1]))
    return path


def classify(visible: dict, prev: dict, ref: dict) -> str:
    """``previous set``, ``new set``, ``MIXED`` (every path as in one of the two sets,
    but not all from the same one) or ``PARTIAL`` (a path in neither set, or with other
    bytes: a half-written file, a missing file)."""
    if visible == prev:
        return "previous set"
    if visible == ref:
        return "new set"
    from_prev = {p for p in visible if p in prev and visible[p] == prev[p]}
    from_ref = {p for p in visible if p in ref and visible[p] == ref[p]}
    if from_prev | from_ref == set(visible) and (set(prev) | set(ref)) >= set(visible) and \
            (set(prev) <= set(visible) or set(ref) <= set(visible)):
        return f"MIXED ({len(from_ref - from_prev)} new, {len(from_prev - from_ref)} old)"
    return "PARTIAL"


def describe_leftovers(folder: Path, hidden: Sequence[str], pid: int, prev: dict, out: str) -> str:
    """One cell: the hidden entries (paths under ``folder``) a killed run left, by kind
    (``-``: none); a staging folder whose files are those of the previous set ``prev``
    (visible snapshot; at ``out`` or beside the staging folder) is the old set, swapped
    out and not yet deleted."""
    kinds = []
    for h in hidden:
        name = Path(h).name
        mine = "" if any(f"{m}{pid}-" in name for m in (".partial-", ".", "-probe-")) else f" (not of pid {pid})"
        if "-probe-" in name:
            kinds.append("writability probe" + mine)
            continue
        if ".partial-" not in name:
            kinds.append("temporary file" + mine)
            continue
        files = {p: v for p, v in snapshot(folder / h).items() if v is not None}
        homes = (str(Path(h).parent), out)
        old = "-old-" in name or (bool(files) and all(
            any(prev.get(os.path.normpath(os.path.join(home, p))) == v for home in homes) for p, v in files.items()))
        what = "old set, swapped out" if old else "staging folder"
        kinds.append(what + mine)
    return ", ".join(sorted(kinds)) or "-"


# --------------------------------------------------------------------------- cases

@dataclass
class Command:
    """One command under test: ``args`` (new run) and ``prev_args`` (the previous set's
    run), both with ``out`` relative to the run folder; ``out`` is what they write
    (a folder, a decode folder or a file); ``extra``: files the run folder starts with
    (relative path -> bytes, e.g. a decode folder's other files)."""

    name: str
    args: List[str]
    prev_args: List[str]
    out: str
    extra: Dict[str, bytes] = field(default_factory=dict)


@dataclass
class Case:
    """One kill: ``command``, ``point`` (phase or time), ``how`` (fork | real),
    ``killed`` (or finished first), ``at`` (seconds after start), ``state`` after the
    kill, ``leftovers`` (hidden entries), ``rerun`` (``OK`` or what was wrong)."""

    command: str
    point: str
    how: str
    killed: bool
    at: float
    state: str
    leftovers: str
    rerun: str
    hidden: List[str] = field(default_factory=list)
    pid: int = 0


#: The cases of :meth:`Harness.over_input` (kill point column, arguments in a folder
#: holding ``out/n.jsonl`` and the Kaldi shard ``kaldi/``): refused before any work.
OVER_INPUT_NAME = "convert over its input"
OVER_INPUT = (
    ("--out is the --nbest file", ["convert", "--nbest", "out/n.jsonl", "--to", "jsonl", "--out", "out/n.jsonl"]),
    ("--out is the --nbest folder", ["convert", "--nbest", "kaldi", "--to", "kaldi", "--out", "kaldi"]),
    ("--out inside the --nbest folder", ["convert", "--nbest", "kaldi", "--to", "plain", "--out", "kaldi/p"]))


def commands(data: Path, work: Path) -> List[Command]:
    """The commands and their previous-set variants; inputs are prepared by
    :meth:`Harness.setup` under ``work``."""
    ref = str(data / "ref.txt")
    lm = str(work / "gru.pt")
    score = ["--lm", lm, "--nbest", str(data), "--ref", ref, "--threads", "1", "--no-progress"]
    tune = ["tune", "--nbest", str(work / "shards" / "1"), "--ref", ref, "--replications", "20"]
    kaldi = ["kaldi-score", "--ref", ref, "--min-lmwt", "9", "--max-lmwt", "11", "--word-ins-penalty", "0.0,0.5",
             "--out", "decode", str(work / "archives.1")]
    decode_other = {"decode/lat.1.gz": b"lattice\n", "decode/num_jobs": b"1\n", "decode/log/decode.1.log": b"log\n"}
    return [
        Command("score", ["score", *score, "--out", "out"],
                ["score", *score, "--out", "out", "--history", "none", "--lm-weight", "8"], "out"),
        Command("tune", [*tune, "--nn-cost", str(work / "jobs_b" / "1" / "nn_cost"), "--interps", "0:1:0.5",
                         "--lm-weights", "8:10:1", "--out", "out"],
                [*tune, "--nn-cost", str(work / "jobs_a" / "1" / "nn_cost"), "--interps", "0:1:1",
                 "--lm-weights", "8:9:1", "--out", "out"], "out"),
        Command("kaldi-score", [*kaldi[:1], "--lm-cost", "lmwt.interp", *kaldi[1:]],
                [*kaldi[:1], "--lm-cost", "lmwt.alt", "--ref-filter", "sed 's/$/ uh/'", *kaldi[1:]], "decode",
                decode_other),
        Command("merge", ["merge", "--out", "out", "--ref", ref, *(str(work / "jobs_b" / s) for s in "12")],
                ["merge", "--out", "out", "--ref", ref, *(str(work / "jobs_a" / s) for s in "12")], "out"),
        Command("split", ["split", "--nj", "2", str(data), "out"], ["split", "--nj", "3", str(data), "out"], "out"),
        Command("convert --to jsonl", ["convert", "--nbest", str(data), "--to", "jsonl", "--out", "out/n.jsonl"],
                ["convert", "--nbest", str(work / "shards" / "1"), "--to", "jsonl", "--out", "out/n.jsonl"],
                "out/n.jsonl"),
    ]


class Harness:
    """Runs the cases of :func:`commands` under ``work`` (see the module docstring):
    ``kills`` random-time kills per command (seeded by ``seed``); ``real``: the
    commands that also run as ``python -m nbest_rescore`` (once whole, as the
    reference the forked run must equal, and once killed as soon as its staging
    folder or temporary file shows; None: all). Use it as a context manager (it
    starts and stops the fork server)."""

    def __init__(self, data: Path, work: Path, seed: int = 0, kills: int = 3,
                 real: Optional[Sequence[str]] = None):
        self.data, self.work, self.seed, self.kills, self.real = Path(data), Path(work), seed, kills, real
        self.env = {**os.environ, "OMP_NUM_THREADS": "1",
                    "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        self.server: Optional[ForkServer] = None
        self.logs = self.work / "logs"
        self._n = 0
        self.seconds: Dict[str, float] = {}  # wall time of the setup and of each command's cases
        #: command -> the files its previous and new sets share byte for byte (a mix of
        #: the two sets cannot show in those)
        self.identical: Dict[str, List[str]] = {}

    def __enter__(self):
        self.logs.mkdir(parents=True, exist_ok=True)
        self.server = ForkServer(self.env)
        return self

    def __exit__(self, *exc):
        self.server.close()

    def log(self, tag: str) -> Path:
        """A fresh log file name for one run."""
        self._n += 1
        return self.logs / f"{self._n:03d}-{''.join(c if c.isalnum() else '_' for c in tag)}.log"

    def checked(self, res: dict, log: Path, what: str) -> dict:
        """``res`` of an uninterrupted run; raises RuntimeError (with the log's end) if it failed."""
        if res["killed"] or res["rc"] != 0:
            raise RuntimeError(f"{what} failed ({res}):\n{log.read_text()[-2000:]}")
        return res

    def setup(self) -> None:
        """The inputs: the tiny GRU, 2 shards of ci, each scored with two settings
        (jobs_a: no history, LM weight 8; jobs_b: the defaults), and an archive folder
        for kaldi-score with a second LM cost file (``lmwt.alt``: the n-gram cost plus
        seeded noise)."""
        w, d = self.work, self.data
        lg = self.log("model")
        self.checked(self.server.run(w, lg, call={"nbest": str(d), "out": str(w / "gru.pt")}), lg, "model")
        runs = [["split", "--nj", "2", d, w / "shards"]]
        for s in "12":
            base = ["score", "--lm", w / "gru.pt", "--nbest", w / "shards" / s, "--threads", "1", "--no-progress"]
            runs += [[*base, "--out", w / "jobs_a" / s, "--history", "none", "--lm-weight", "8"],
                     [*base, "--out", w / "jobs_b" / s]]
        for args in runs:
            lg = self.log("setup")
            self.checked(self.server.run(w, lg, args), lg, " ".join(map(str, args)))
        arch = w / "archives.1"
        arch.mkdir()
        shutil.copyfile(d / "text", arch / "words_text")
        shutil.copyfile(d / "ac_cost", arch / "acwt")
        shutil.copyfile(d / "lm_cost", arch / "lmwt.interp")
        rng = random.Random(self.seed)
        with open(d / "lm_cost") as src, open(arch / "lmwt.alt", "w") as dst:
            for line in src:
                key, cost = line.split()
                dst.write(f"{key} {float(cost) + rng.uniform(0, 20):.4f}\n")

    def _folder(self, cmd: Command, tag: str) -> Path:
        folder = self.work / cmd.name.split()[0] / tag
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for rel, data in cmd.extra.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(data)
        if cmd.out.endswith(".jsonl"):
            (folder / cmd.out).parent.mkdir(parents=True, exist_ok=True)
        return folder

    def _restore(self, cmd: Command, prev: Path, tag: str) -> Path:
        """A run folder holding the previous set (a copy of ``prev``)."""
        folder = self.work / cmd.name.split()[0] / tag
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(prev, folder, symlinks=True)
        return folder

    def run_command(self, cmd: Command) -> List[Case]:
        """The previous set, the reference run(s), then every kill of ``cmd``."""
        prev = self._folder(cmd, "prev")
        lg = self.log(f"{cmd.name}-prev")
        self.checked(self.server.run(prev, lg, cmd.prev_args), lg, f"{cmd.name} (previous set)")
        probe = self._restore(cmd, prev, "probe")
        lg = self.log(f"{cmd.name}-probe")
        t_fork = self.checked(self.server.run(probe, lg, cmd.args), lg, f"{cmd.name} (fork probe)")["seconds"]
        ref_snap = snapshot(probe)
        prev_snap = snapshot(prev)
        self.identical[cmd.name] = sorted(p for p, v in ref_snap.items() if v is not None and prev_snap.get(p) == v)
        real = self.real is None or cmd.name in self.real
        if real:
            ref = self._restore(cmd, prev, "ref")
            lg = self.log(f"{cmd.name}-ref")
            self.checked(run_real(ref, lg, cmd.args, self.env), lg, f"{cmd.name} (python -m nbest_rescore)")
            if snapshot(ref) != ref_snap:
                raise RuntimeError(f"{cmd.name}: the forked run's outputs differ from python -m nbest_rescore's")
        rng = random.Random(f"{self.seed}-{cmd.name}")
        plan = [(f"random {i + 1}/{self.kills}", "fork", {"delay": 0.9 * t_fork * (i + rng.random()) / self.kills})
                for i in range(self.kills)]
        plan += [(name, "fork", {"point": spec}) for name, spec in PHASES.items()
                 if not (spec.startswith("inner") and cmd.out.endswith(".jsonl"))]  # one file: no inner rename
        cases = [self._kill(cmd, prev, prev_snap, ref_snap, *p) for p in plan]
        if real:
            cases.append(self._watched_kill(cmd, prev, prev_snap, ref_snap))
        return cases

    def _watched_kill(self, cmd: Command, prev: Path, prev_snap: dict, ref_snap: dict) -> Case:
        """The real kill on seeing staging, tried up to :data:`WATCH_TRIES` times until
        the kill lands while the staging still exists (the try is in the kill point)."""
        for attempt in range(1, WATCH_TRIES + 1):
            point = "staging seen" + (f" (try {attempt})" if attempt > 1 else "")
            case = self._kill(cmd, prev, prev_snap, ref_snap, point, "real", {"watch": True})
            if case.hidden:
                break
        return case

    def _kill(self, cmd: Command, prev: Path, prev_snap: dict, ref_snap: dict, point: str, how: str,
              kw: dict) -> Case:
        """One kill from the previous set, the state it left, and the rerun."""
        folder = self._restore(cmd, prev, "run")
        lg = self.log(f"{cmd.name}-{point}")
        out = folder / cmd.out
        res = run_real(folder, lg, cmd.args, self.env, watch=[folder, out.parent if out.suffix else out]) \
            if how == "real" else self.server.run(folder, lg, cmd.args, **kw)
        if not res["killed"] and res["rc"] != 0:
            raise RuntimeError(f"{cmd.name} at {point}: failed without a kill ({res}):\n{lg.read_text()[-2000:]}")
        snap = snapshot(folder)
        visible, hidden = split_leftovers(snap)
        state = classify(visible, split_leftovers(prev_snap)[0], ref_snap)
        if not res["killed"]:
            state += " (ran to the end)"
        left = describe_leftovers(folder, hidden, res["pid"], split_leftovers(prev_snap)[0], cmd.out)
        at = f"{point} @ {res['seconds']:.2f} s" if "random" in point else point
        rerun = "OK (probe)" if snap == prev_snap else self._rerun(cmd, folder, ref_snap)
        return Case(cmd.name, at, how, res["killed"], res["seconds"], state, left, rerun, hidden, res["pid"])

    def _rerun(self, cmd: Command, folder: Path, ref_snap: dict) -> str:
        """An uninterrupted run in ``folder``: ``OK`` when it leaves exactly the reference."""
        lg = self.log(f"{cmd.name}-rerun")
        res = self.server.run(folder, lg, cmd.args)
        if res["killed"] or res["rc"] != 0:
            return f"FAILED (exit {res['rc']}): {lg.read_text().strip().splitlines()[-1:]}"
        after = snapshot(folder)
        if after == ref_snap:
            return "OK"
        remaining = split_leftovers(after)[1]
        return f"leftovers not removed: {remaining}" if remaining else "DIFFERS from the reference"

    def control(self, name: str = "merge") -> Case:
        """The control case: command ``name`` (its previous set already written by
        :meth:`run_command`) with the folder swap sabotaged (:func:`_sabotage`); the
        checks must report a partial set."""
        cmd = next(c for c in commands(self.data, self.work) if c.name == name)
        prev = self.work / cmd.name.split()[0] / "prev"
        folder = self._restore(cmd, prev, "control")
        res = self.server.run(folder, self.log(f"{name}-control"), cmd.args, sabotage=True)
        visible, hidden = split_leftovers(snapshot(folder))
        ref = snapshot(self.work / cmd.name.split()[0] / "probe")
        state = classify(visible, split_leftovers(snapshot(prev))[0], ref)
        return Case(name, "sabotaged swap (control)", "fork", res["killed"], res["seconds"], state,
                    describe_leftovers(folder, hidden, res["pid"], {}, cmd.out), "-", hidden, res["pid"])

    def over_input(self) -> List[Case]:
        """``convert`` with its output on its own input (:data:`OVER_INPUT`: a JSON Lines
        file, a Kaldi folder, a folder inside the input), each from a folder holding
        ``convert --to jsonl``'s previous set and a Kaldi shard: the run must be refused
        (exit 1, one line) and leave the folder byte for byte as it was."""
        folder = self._restore(commands(self.data, self.work)[-1], self.work / "convert" / "prev", "over-input")
        shutil.copytree(self.work / "shards" / "1", folder / "kaldi")
        before = snapshot(folder)
        cases = []
        for point, args in OVER_INPUT:
            lg = self.log(f"over-input-{point}")
            res = self.server.run(folder, lg, args)
            said = lg.read_text().strip().splitlines()
            refused = res["rc"] == 1 and len(said) == 1 and said[0].startswith("Error: ")
            state = "input unchanged" if snapshot(folder) == before else "INPUT CHANGED"
            cases.append(Case(OVER_INPUT_NAME, point, "fork", False, res["seconds"], f"{state} (exit {res['rc']})",
                              "none", "OK (refused in one line)" if refused else f"NOT REFUSED: {said[-1:]}",
                              pid=res["pid"]))
        return cases

    def run_all(self, names: Optional[Sequence[str]] = None) -> List[Case]:
        """:meth:`setup`, then the cases of every command (or those named), and with
        ``convert --to jsonl`` those of :meth:`over_input`."""
        t0 = time.monotonic()
        self.setup()
        self.seconds = {"setup": time.monotonic() - t0}
        cases = []
        for cmd in commands(self.data, self.work):
            if names is None or cmd.name in names:
                t0 = time.monotonic()
                cases += self.run_command(cmd)
                self.seconds[cmd.name] = time.monotonic() - t0
        if names is None or "convert --to jsonl" in names:
            cases += self.over_input()
        return cases


def documented_mix(case: Case) -> bool:
    """``case`` is kaldi-score killed between its per-entry renames (documented: each
    file whole, old or new): a MIXED state, at the phase kill point or at a random
    time that fell in the commit (its ``.entries.partial-PID`` staging left behind)."""
    in_commit = case.point == "after 1st commit rename" or \
        any(f".entries.partial-{case.pid}-" in h for h in case.hidden)
    return case.command == "kaldi-score" and in_commit and case.state.startswith("MIXED")


def unexpected(case: Case) -> bool:
    """Whether ``case`` breaks the guarantees: a partial set, a mix of two runs other
    than kaldi-score's between its per-entry renames (:func:`documented_mix`), hidden
    leftovers of another process, or a rerun that was not OK."""
    whole = not case.state.startswith(("MIXED", "PARTIAL", "INPUT CHANGED")) or documented_mix(case)
    return not whole or "not of pid" in case.leftovers or not case.rerun.startswith("OK")


def markdown(cases: Sequence[Case]) -> str:
    """The fault-injection table (command x kill point x outcome) as Markdown."""
    rows = ["| command | kill point | process | output location after the kill | hidden leftovers | rerun |",
            "|---|---|---|---|---|---|"]
    for c in cases:
        how = "python -m" if c.how == "real" else "forked"
        rows.append(f"| {c.command} | {c.point} | {how} | {c.state} | {c.leftovers} | {c.rerun} |")
    return "\n".join(rows) + "\n\n" + LEGEND


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "abc-nbest" / "ci"),
                   help="the ci N-best folder (default: ../shared/data/abc-nbest/ci)")
    p.add_argument("--work", help="scratch folder (default: a new temporary folder, removed at the end)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random kill times (default 0)")
    p.add_argument("--kills", type=int, default=3, help="random-time kills per command (default 3)")
    p.add_argument("--no-real", action="store_true",
                   help="leave out the python -m nbest_rescore runs (the reference is then a forked run)")
    p.add_argument("--command", action="append", help="only this command (repeatable), e.g. --command merge")
    p.add_argument("--markdown", help="also write the table to this file")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    """Run every case, print the Markdown table; exit status 1 if any case is not a
    whole set or a rerun was not OK."""
    args = parse_args(argv)
    if args.serve:
        serve()
        return 0
    import tempfile

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="fault-table-"))
    t0 = time.monotonic()
    try:
        with Harness(Path(args.data), work, args.seed, args.kills, () if args.no_real else None) as h:
            cases = h.run_all(args.command)
            seconds = h.seconds
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    table = markdown(cases)
    print(table)
    print(f"{len(cases)} kills in {time.monotonic() - t0:.0f} s (seed {args.seed}; "
          f"{', '.join(f'{k} {v:.1f} s' for k, v in seconds.items())})")
    if args.markdown:
        Path(args.markdown).write_text(table)
    return 1 if any(map(unexpected, cases)) else 0


if __name__ == "__main__":
    sys.exit(main())
