"""Training that survives preemption (issue 29): mid-epoch checkpoints every
``--checkpoint-interval``, SIGTERM/SIGINT save and exit 75, ``--resume`` (``auto``)
continues exactly: the final weights equal an uninterrupted run's bit for bit (CPU, one
process), whether the run was stopped by a signal or SIGKILLed at a random point.

Every run is a real ``python -m nbest_rescore train`` process on one thread."""
import copy
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from nbest_rescore.config import parse_interval, Interval
from nbest_rescore.errors import DataError
from nbest_rescore.io.checkpoint import load_checkpoint
from nbest_rescore.training.checkpointing import last_path
from nbest_rescore.training.preemption import EXIT_PREEMPTED, IntervalClock

REPO = Path(__file__).resolve().parents[2]
INTERVAL = 7  # steps between mid-epoch checkpoints in these runs


def write_config(DATA, path: Path, max_words: int = 6000) -> Path:
    """A tiny GRU with dropout (the random state matters), a cosine schedule with
    warmup and shuffled documents; B = 8 streams of BPTT 10 over ``max_words`` words
    of lm_train: about 75 updates per epoch."""
    cfg = {"model": "gru", "model_config": {"embedding_dim": 16, "hidden_size": 16, "dropout_emb": 0.2,
                                            "dropout_out": 0.2},
           "data": {"train": str(DATA / "lm" / "lm_train.txt"), "valid": str(DATA / "lm" / "lm_valid.txt"),
                    "max_words": max_words, "max_valid_words": 500},
           "vocab": {"max_size": 2000},
           "optim": {"batch_size": 8, "bptt": 10, "lr": 0.01, "max_epochs": 3, "patience": 5, "seed": 1,
                     "threads": 1, "lr_schedule": "cosine", "warmup_steps": 5, "min_lr_ratio": 0.1}}
    path.write_text(yaml.safe_dump(cfg))
    return path


def train_cmd(config: Path, out: Path, *args: str) -> list:
    return [sys.executable, "-m", "nbest_rescore", "-v", "train", "--config", str(config), "--out", str(out),
            "--no-progress", *args]


def env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def run(cmd: list) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=300)


def same_bytes(a: Path, b: Path) -> bool:
    """The two checkpoints' weights are bit-identical."""
    x, y = load_checkpoint(a)["state_dict"], load_checkpoint(b)["state_dict"]
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def saved_step(path: Path) -> int:
    """The global step a ``.last.pt`` continues at."""
    r = load_checkpoint(path)["resume"]
    return r["step"] + (r["position"]["segments"] if r.get("position") else 0)


@pytest.fixture(scope="module")
def reference(DATA, tmp_path_factory):
    """The uninterrupted run (mid-epoch checkpoints on: they must not change the weights)."""
    d = tmp_path_factory.mktemp("reference")
    config = write_config(DATA, d / "c.yaml")
    r = run(train_cmd(config, d / "a.pt", "--checkpoint-interval", f"{INTERVAL}steps"))
    assert r.returncode == 0, r.stderr[-2000:]
    plain = run(train_cmd(config, d / "plain.pt", "--checkpoint-interval", "off"))
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert same_bytes(d / "a.pt", d / "plain.pt")
    return config, d / "a.pt"


def test_interval_spellings():
    assert parse_interval("5m") == Interval(seconds=300.0)
    assert parse_interval("90s") == Interval(seconds=90.0)
    assert parse_interval("1.5h") == Interval(seconds=5400.0)
    assert parse_interval("500steps") == Interval(steps=500)
    assert parse_interval("300kwords", "optim.valid_every", "words") == Interval(words=300000)
    assert parse_interval("1.5mwords", "optim.valid_every", "words") == Interval(words=1500000)
    assert parse_interval("epoch", "optim.valid_every", "words").off
    with pytest.raises(DataError, match="optim.valid_every must be a time .* training words"):
        parse_interval("500steps", "optim.valid_every", "words")
    with pytest.raises(DataError, match="optim.checkpoint_interval must be a time"):
        parse_interval("300kwords")
    assert parse_interval("off").off and parse_interval("0").off
    for bad in ("10", "-5m", "5 parsecs", "2.5steps", ""):
        with pytest.raises(DataError, match="optim.checkpoint_interval must be a time"):
            parse_interval(bad)
    clock = IntervalClock(parse_interval("60s"), step=0, elapsed=10.0)
    assert not clock.due(5, 69.0) and clock.due(5, 70.0)
    clock.saved(5, 70.0)
    assert not clock.due(6, 100.0)
    steps = IntervalClock(parse_interval("7steps"), step=3, elapsed=0.0)
    assert not steps.due(9, 1e9) and steps.due(10, 0.0)
    words = IntervalClock(parse_interval("1000words", "optim.valid_every", "words"), step=0, elapsed=0.0, words=500)
    assert not words.due(3, 1e9, 1499) and words.due(3, 0.0, 1500)


def test_sigterm_saves_exits_75_and_resume_is_bit_identical(reference, tmp_path):
    """SIGTERM at the first epoch's log line (no sleep: an epoch of this tiny model can
    take less than 0.2 s): the step in hand finishes,
    <out>.last.pt holds a state in epoch 2, exit 75 with one line; --resume auto ends with the
    uninterrupted run's weights, bit for bit."""
    config, a = reference
    out = tmp_path / "b.pt"
    proc = subprocess.Popen(train_cmd(config, out, "--checkpoint-interval", "off"), env=env(),
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "epoch 1: train ppl" in line:  # (logged before epoch 1's checkpoint: the signal is
            proc.send_signal(signal.SIGTERM)  # seen at the first update of epoch 2 at the latest)
            break
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == EXIT_PREEMPTED, err[-2000:]
    assert "Traceback" not in err
    stopped = [x for x in err.splitlines() if x.startswith("Stopped: training stopped by SIGTERM in epoch 2")]
    assert len(stopped) == 1 and f"--resume {last_path(out)}" in stopped[0], err[-2000:]
    state = load_checkpoint(last_path(out))["resume"]
    assert state["epoch"] == 1 and state["position"] is not None  # (in epoch 2)
    r = run(train_cmd(config, out, "--resume", "auto"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert same_bytes(out, a)


def stamp(path: str):
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return None


def wait_for_writes(proc: subprocess.Popen, path: str, writes: int) -> None:
    """Until ``path`` has been (re)written ``writes`` times or ``proc`` has ended."""
    seen, last = 0, stamp(path)
    while seen < writes and proc.poll() is None:
        now = stamp(path)
        if now is not None and now != last:
            seen, last = seen + 1, now
        time.sleep(0.01)


@pytest.mark.slow
def test_sigkill_at_random_points_loses_at_most_one_interval(reference, tmp_path):
    """SIGKILL at seeded random points (after 5-12 checkpoint writes, then 0-0.3 s into
    the next interval, so within a write too): the .last.pt left is whole and newer
    than at the last kill, and resuming until done gives the uninterrupted weights bit
    for bit."""
    config, a = reference
    rng = random.Random(29)  # one chain of 2 or more kills (each costs a process start)
    out = tmp_path / "m.pt"
    cmd = train_cmd(config, out, "--checkpoint-interval", f"{INTERVAL}steps", "--resume", "auto")
    kills, before = 0, -1
    while True:
        proc = subprocess.Popen(cmd, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_writes(proc, last_path(out), rng.randint(5, 12))
        time.sleep(rng.uniform(0.0, 0.3))
        if proc.poll() is not None:
            break  # finished before the kill
        proc.kill()
        proc.wait()
        kills += 1
        now = saved_step(last_path(out))  # a whole file, and later than before the kill
        assert now > before, (before, now)
        before = now
    assert proc.returncode == 0 and kills >= 2, kills
    assert same_bytes(out, a), f"{kills} kills"


def test_sigint_writes_a_mid_epoch_state_of_one_process(reference, tmp_path):
    """SIGINT (Ctrl-C) as SIGTERM: exit 75 and a mid-epoch state holding one rank."""
    config, _ = reference
    out = tmp_path / "m.pt"
    proc = subprocess.Popen(train_cmd(config, out, "--checkpoint-interval", "3steps"), env=env(),
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    wait_for_writes(proc, last_path(out), 1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PREEMPTED, err[-2000:]
    assert "training stopped by SIGINT" in err
    state = load_checkpoint(last_path(out))["resume"]
    assert state["position"] is not None and len(state["position"]["ranks"]) == 1


@pytest.mark.slow
def test_a_requeued_slurm_training_job_resumes_to_the_same_weights(slurm, reference, tmp_path):
    """``sbatch`` a training job (``--resume auto``), ``scontrol requeue`` it once its
    first mid-epoch state is written: Slurm's SIGTERM makes it save and exit 75, the
    batch script runs again, resumes and ends with the uninterrupted weights bit for bit.
    (The private Slurm of tests/slurm_cluster.py; skipped with one line without it.)"""
    config, a = reference
    out = tmp_path / "m.pt"
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\nexec " + " ".join(
        train_cmd(config, out, "--checkpoint-interval", f"{INTERVAL}steps", "--resume", "auto")) + "\n")
    exports = f"--export=ALL,OMP_NUM_THREADS=1,PYTHONPATH={env()['PYTHONPATH']}"
    job = slurm.submit("--requeue", "--open-mode=append", "-o", "train.log", exports, script, cwd=tmp_path)
    deadline = time.monotonic() + 120
    while stamp(last_path(out)) is None:
        assert time.monotonic() < deadline, "no mid-epoch state written in 120 s"
        time.sleep(0.05)
    slurm.requeue(job)
    info = slurm.wait(job, timeout=300, min_restarts=1)
    log = (tmp_path / "train.log").read_text()
    assert info["JobState"] == "COMPLETED" and info["exit_code"] == 0 and info["Restarts"] == "1", log[-2000:]
    assert log.count("Stopped: training stopped by SIGTERM") == 1, log[-2000:]
    assert same_bytes(out, a)


def _streams(bptt=10, batch=4):
    from nbest_rescore.store_streams import make_streams

    rng = np.random.default_rng(0)
    enc = [np.asarray([0] + [int(x) for x in rng.integers(2, 200, int(rng.integers(5, 40)))] + [0], dtype=np.int64)
           for _ in range(40)]
    return make_streams(enc, batch, align=bptt)


@pytest.mark.parametrize("name,device", [("gru", "cpu"), ("amn", "cpu"), ("gru", "cuda"), ("amn", "cuda")])
def test_a_pass_paused_and_continued_from_its_position_equals_one_pass(name, device):
    """train_segments paused before update 3 (Pause.SAVE: the EpochPosition and a copy
    of the weights and optimiser), then continued in a fresh model and optimiser from
    that position: the same weights and NLL as the pass run through, bit for bit on the
    CPU (with dropout: the random state is part of the position); on CUDA (skipped
    without one) the captured graph's carried state and sums are restored too."""
    from nbest_rescore.config import OptimConfig
    from nbest_rescore.models import build_model
    from nbest_rescore.training.passes import Pause, train_segments
    from nbest_rescore.training.step import StepOptions, make_optimizer

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    streams, config = _streams(), {"embedding_dim": 12, "hidden_size": 10, "dropout_out": 0.3}
    if name == "amn":
        config.update(num_memcells=3, anneal_t0=5.0)
    torch.manual_seed(0)
    base = build_model(name, config, 200).to(device).train()
    graphs = device == "cuda"

    def fresh(state=None):
        m = copy.deepcopy(base)
        opt = make_optimizer(m, OptimConfig(lr=0.01), capturable=graphs)
        if state is not None:
            m.load_state_dict(state[0])
            opt.load_state_dict(state[1])
        return m, opt

    torch.manual_seed(1)
    m, opt = fresh()
    saved = {}

    def pause_at_3(step, tokens, sums):
        return Pause.SAVE if step == 3 else None

    def on_pause(position):
        saved["position"] = position
        saved["state"] = (copy.deepcopy(m.state_dict()), copy.deepcopy(opt.state_dict()))

    whole = train_segments(m, opt, streams, 10, StepOptions(clip=1.0), before_step=pause_at_3, on_pause=on_pause,
                           cuda_graph=graphs)
    torch.manual_seed(123)  # (the position's random state must win over this)
    m2, opt2 = fresh(saved["state"])
    rest = train_segments(m2, opt2, streams, 10, StepOptions(clip=1.0), start=saved["position"], cuda_graph=graphs)
    assert saved["position"].segments == 3 and rest.steps == whole.steps and rest.tokens == whole.tokens
    for a, b in zip(m.parameters(), m2.parameters()):
        assert torch.equal(a, b) if device == "cpu" else torch.allclose(a, b, atol=1e-6, rtol=0)
    assert rest.nll == pytest.approx(whole.nll, rel=1e-12 if device == "cpu" else 1e-6)


def test_a_bad_interval_in_the_config_is_one_line_naming_the_file(DATA, tmp_path):
    config = write_config(DATA, tmp_path / "c.yaml")
    text = yaml.safe_load(config.read_text())
    text["optim"]["checkpoint_interval"] = "often"
    config.write_text(yaml.safe_dump(text))
    r = run(train_cmd(config, tmp_path / "m.pt"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("Error:")]
    assert len(lines) == 1 and "c.yaml" in lines[0] and "optim.checkpoint_interval must be a time" in lines[0]
    assert "'often'" in lines[0] and not (tmp_path / "m.pt").exists()


def test_a_mid_epoch_state_resumes_only_with_as_many_processes():
    """A state written mid-epoch by 2 ranks under one process, and by one under 2: each
    refused by name with the command that fits; epoch-end states resume with any K."""
    from nbest_rescore.training.checkpointing import RunState
    from nbest_rescore.training.distributed import World
    from nbest_rescore.training.trainer import _check_position

    two = RunState(position={"segments": 3, "tokens": 60, "ranks": [{}, {}]})
    with pytest.raises(DataError, match=r"--resume m.last.pt: was written in the middle of an epoch by 2 "
                                        r"processes; resume with 2 \(torchrun --nproc_per_node 2\)"):
        _check_position(two, World(), "m.last.pt")
    one = RunState(position={"segments": 3, "tokens": 60, "ranks": [{}]})
    with pytest.raises(DataError, match="by one process; resume without torchrun"):
        _check_position(one, World(rank=0, size=2), "m.last.pt")
    _check_position(two, World(rank=1, size=2), "m.last.pt")
    _check_position(RunState(), World(rank=0, size=4), "m.last.pt")
