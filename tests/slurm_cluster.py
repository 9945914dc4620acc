"""A private single-node Slurm for the tests (the ``slurm`` fixture of tests/conftest.py).

:func:`start` runs, as children of the test process and all in one folder: ``munged``
with its own key and socket, ``slurmctld`` and ``slurmd`` (``-D``, in the foreground) on
two free ports with a generated ``slurm.conf`` (this machine as its one node, with the
CPUs and memory ``slurmd -C`` reports; partitions ``shared`` (the default) and ``gpu``,
the names of Kaldi's ``utils/parallel/slurm.pl`` default config; no cgroups, no
accounting; ``JobRequeue=1``). A system munge or Slurm on this machine is left alone:
nothing here uses its socket, ports, pid files or spool. Clients find the cluster
through ``SLURM_CONF`` (:attr:`SlurmCluster.env`). :meth:`SlurmCluster.stop` cancels
the cluster's jobs and ends the three daemons it started.

Jobs: :meth:`SlurmCluster.submit` (``sbatch --parsable``), :meth:`SlurmCluster.wait`
(polls ``scontrol show job``, bounded; there is no ``sacct`` without accounting) and
:meth:`SlurmCluster.requeue`. A preemptible job (e.g. training that saves
``<out>.last.pt`` on SIGTERM and exits 75) is requeued with ``cluster.requeue(job)``:
``scontrol requeue`` sends SIGTERM to the running job (SIGKILL ``KillWait`` = 10 s
later), and the job runs its batch script again with ``SLURM_RESTART_COUNT`` = 1, 2 ...
(the script resumes when the checkpoint exists). Slurm holds a requeued job for about
two minutes (``Reason=BeginTime``); ``requeue`` lifts that with ``scontrol update
StartTime=now``, 2 s after the job is pending (a relaunch in the second its previous
credential was revoked fails). A job that already ended (e.g. exit 75) can be requeued the same way;
``sbatch --no-requeue`` refuses it. Jobs get the submitter's environment (sbatch's
default ``--export=ALL``: PATH, PYTHONPATH ...). A resuming batch script, e.g.::

    #!/bin/bash
    # submitted with: cluster.submit("--requeue", "--open-mode=append", "-o", "train.log", "train.sh")
    resume=(); [ -f lm.last.pt ] && resume=(--resume lm.last.pt)
    exec nbest-rescore train --config cfg.yaml --out lm.pt --checkpoint-interval 5steps "${resume[@]}"

(``exec``: the job's exit status is the trainer's, 75 after SIGTERM; Slurm signals every
process of the job, the shell too.)
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "sinfo", "scancel")
INSTALL = "apt-get install slurmctld slurmd munge"
# job states after which a job runs no more (unless requeued)
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
         "DEADLINE", "PREEMPTED"}


class SlurmUnavailable(RuntimeError):
    """The private Slurm cannot run here; the message is one line (the tests' skip reason)."""


def missing_tools() -> List[str]:
    """The daemons and client commands not found on PATH (or in /usr/sbin)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [t for t in DAEMONS + CLIENTS if shutil.which(t, path=path) is None]


def _tool(name: str) -> str:
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])) or name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_job(line: str) -> Dict[str, str]:
    """``scontrol show job -o`` line -> {field: value} (JobId, JobState, ExitCode, Restarts ...)."""
    return dict(re.findall(r"(?:^|\s)([A-Za-z][\w/:]*)=(\S*)", line))


def _node_line(node: str) -> str:
    """NodeName line with the CPUs, sockets and memory that ``slurmd -C`` reports."""
    res = subprocess.run([_tool("slurmd"), "-C"], capture_output=True, text=True, timeout=30)
    first = res.stdout.splitlines()[0] if res.returncode == 0 and res.stdout.startswith("NodeName=") else ""
    hw = first.split(None, 1)[1] if " " in first else f"CPUs={os.cpu_count() or 1}"
    return f"NodeName={node} NodeAddr=127.0.0.1 {hw} State=UNKNOWN"


def write_conf(root: Path, node: str) -> Path:
    """``root/slurm.conf`` for a cluster of this machine alone, state and spool under root."""
    lines = [
        "ClusterName=nbtest", f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={root}/munge/munge.socket",
        f"StateSaveLocation={root}/state", f"SlurmdSpoolDir={root}/spool",
        f"SlurmctldPidFile={root}/slurmctld.pid", f"SlurmdPidFile={root}/slurmd.pid",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none", "SwitchType=switch/none",
        "MpiDefault=none", "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
        "ReturnToService=2", "JobRequeue=1", "KillWait=10", "MailProg=/bin/true",
        _node_line(node),
        f"PartitionName=shared Nodes={node} Default=YES MaxTime=INFINITE State=UP",
        f"PartitionName=gpu Nodes={node} MaxTime=INFINITE State=UP",
    ]
    conf = root / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


@dataclass
class SlurmCluster:
    """A running private Slurm: ``env`` is os.environ with ``SLURM_CONF`` set (give it to
    sbatch, squeue, Kaldi's slurm.pl ...); ``root`` holds the config, state and daemon logs."""

    root: Path
    env: Dict[str, str]
    node: str
    procs: Dict[str, subprocess.Popen] = field(default_factory=dict)

    def _run(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run([_tool(args[0]), *args[1:]], env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def submit(self, *args, cwd=None) -> str:
        """``sbatch --parsable ARGS`` (options, then the script and its arguments; or
        ``--wrap CMD``) run in ``cwd``; returns the job id."""
        res = subprocess.run([_tool("sbatch"), "--parsable", *map(str, args)], env=self.env, cwd=cwd,
                             capture_output=True, text=True, timeout=30)
        if res.returncode != 0:
            raise RuntimeError(f"sbatch failed ({res.returncode}): {res.stderr.strip()}")
        return res.stdout.strip().split(";")[0]

    def cancel(self, job_id: str) -> None:
        """``scancel`` the job."""
        self._run("scancel", str(job_id))

    def jobs(self, job_id: str) -> List[Dict[str, str]]:
        """``scontrol show job -o`` of a job (one dict per array task); [] once Slurm forgot it."""
        res = self._run("scontrol", "show", "job", "-o", str(job_id))
        return [parse_job(line) for line in res.stdout.splitlines() if line.startswith("JobId=")]

    def wait(self, job_id: str, timeout: float = 120, states=ENDED, min_restarts: int = 0) -> Dict[str, str]:
        """Polls until every task of the job is in ``states`` (default: ended) after at
        least ``min_restarts`` requeues; returns the job's fields (of its last task), with
        ``exit_code`` the script's exit status as an int. TimeoutError names the state."""
        deadline, info = time.monotonic() + timeout, []
        while time.monotonic() < deadline:
            info = self.jobs(job_id)
            if info and all(j.get("JobState") in states and int(j.get("Restarts", 0)) >= min_restarts
                            for j in info):
                last = dict(info[-1])
                last["exit_code"] = int(last.get("ExitCode", "0:0").split(":")[0])
                return last
            time.sleep(0.5)
        got = [(j.get("JobState"), j.get("Reason"), j.get("Restarts")) for j in info]
        raise TimeoutError(f"Slurm job {job_id} not in {sorted(states)} after {timeout:.0f} s: {got}")

    def requeue(self, job_id: str) -> None:
        """``scontrol requeue`` (SIGTERM to a running job, then it starts again from its
        batch script) and ``scontrol update StartTime=now``: without it Slurm holds a
        requeued job about two minutes (Reason=BeginTime, the credential lifetime). The
        update waits 2 s after the job is pending: slurmd refuses a job credential created
        in the same second as the revocation of the job's previous one (slurm_cred.c,
        ``ctime <= revoked``), and the relaunch would end FAILED."""
        res = self._run("scontrol", "requeue", str(job_id))
        if res.returncode != 0:
            raise RuntimeError(f"scontrol requeue {job_id}: {(res.stdout + res.stderr).strip()}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            info = self.jobs(job_id)
            if info and info[-1].get("JobState") == "PENDING":
                # slurmd refuses a credential made in the second (or before) it revoked the
                # job's last one ("cred revoked": the batch launch fails and the job ends
                # FAILED); the revocation came before PENDING, so 2 s later is always after
                time.sleep(2.0)
                self._run("scontrol", "update", f"JobId={job_id}", "StartTime=now")
                return
            time.sleep(0.2)
        raise TimeoutError(f"Slurm job {job_id} was not pending 30 s after scontrol requeue")

    def node_state(self) -> str:
        """``sinfo``'s state of the node (idle, mixed, down ...), '' when the controller does not answer."""
        res = self._run("sinfo", "-h", "-N", "-o", "%T", timeout=10)
        return res.stdout.split()[0] if res.returncode == 0 and res.stdout.split() else ""

    def why_not_up(self) -> str:
        """One line on why the cluster is not up: a daemon that exited, with the last error
        of its log (not the mpi/pmix plugin's, harmless here), else the node's state and reason."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                return f"{name} exited with status {proc.returncode}: {self._last_error(name)}"
        res = self._run("sinfo", "-h", "-N", "-o", "%T %E", timeout=10)
        if res.returncode == 0 and res.stdout.strip():
            return f"node {self.node}: {res.stdout.splitlines()[0].strip()}; slurmd: {self._last_error('slurmd')}"
        return f"sinfo: {(res.stderr.strip().splitlines() or ['no answer'])[-1]}"

    def _last_error(self, name: str) -> str:
        log = self.root / f"{name}.log"
        text = log.read_text(errors="replace").splitlines() if log.is_file() else []
        lines = [ln for ln in text if ("rror" in ln or "atal" in ln) and "pmix" not in ln.lower() and "MPI:" not in ln]
        return lines[-1].strip() if lines else (text[-1].strip() if text else "no log")

    def stop(self) -> None:
        """Cancels the cluster's jobs, then ends slurmd, slurmctld and munged (the processes
        this cluster started, by their Popen handles)."""
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            ids = self._run("squeue", "-h", "-o", "%A", timeout=10).stdout.split()
            if ids:
                self._run("scancel", *ids, timeout=10)
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline and self._run("squeue", "-h", timeout=10).stdout.strip():
                    time.sleep(0.3)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


def _daemon(cluster: SlurmCluster, name: str, *args: str) -> None:
    log = open(cluster.root / f"{name}.log", "w")
    cluster.procs[name] = subprocess.Popen([_tool(name), *args], stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=cluster.env, start_new_session=True)
    log.close()


def _wait_for(cluster: SlurmCluster, what: str, ready, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        dead = [n for n, p in cluster.procs.items() if p.poll() is not None]
        if dead:
            break
        time.sleep(0.2)
    why = cluster.why_not_up()
    cluster.stop()
    raise SlurmUnavailable(f"private Slurm: {what} not up after {timeout:.0f} s ({why}; logs in {cluster.root})")


def start(root: Path, timeout: float = 30) -> SlurmCluster:
    """Starts munged, slurmctld and slurmd under ``root`` and waits (at most ``timeout``
    seconds each) until sinfo shows the node idle; raises :class:`SlurmUnavailable` (a
    one-line reason) when the tools are missing, this is not root, or a daemon fails."""
    missing = missing_tools()
    if missing:
        raise SlurmUnavailable(f"Slurm/munge not installed ({', '.join(missing)} missing): {INSTALL}")
    if os.geteuid() != 0:
        raise SlurmUnavailable("a private Slurm needs root (slurmd starts jobs as their user)")
    root = Path(root)
    node = socket.gethostname().split(".")[0]
    for d in ("state", "spool", "munge"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o755)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = write_conf(root, node)
    cluster = SlurmCluster(root, {**os.environ, "SLURM_CONF": str(conf)}, node)
    atexit.register(cluster.stop)  # should the test process end without the fixture's teardown
    sock = root / "munge" / "munge.socket"
    _daemon(cluster, "munged", "-F", "--force", f"--key-file={key}", f"--socket={sock}",
            f"--pid-file={root}/munge/munged.pid", f"--seed-file={root}/munge/munged.seed")
    _wait_for(cluster, "munged", sock.exists, timeout)
    _daemon(cluster, "slurmctld", "-D", "-c", "-f", str(conf))
    _daemon(cluster, "slurmd", "-D", "-f", str(conf), "-N", node)
    _wait_for(cluster, f"node {node}", lambda: cluster.node_state() == "idle", timeout)
    return cluster
