"""Data-parallel training (``torchrun``, DistributedDataParallel over gloo on the CPU):
two ranks with the global batch B train like one process with batch B, ``--resume``
works with two ranks, and a batch that does not divide among the ranks is one clear
error."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from nbest_rescore.config import load_train_config
from nbest_rescore.io.checkpoint import load_checkpoint
from nbest_rescore.training.checkpointing import last_path
from nbest_rescore.training.trainer import train

REPO = Path(__file__).resolve().parents[2]


def write_config(DATA, path: Path, **optim) -> str:
    """A tiny GRU without dropout on the first 3000 words of lm_train (25 documents):
    with B = 8 streams and BPTT 140 the first epoch is 4 updates (streams dealt widest document first)."""
    o = dict(batch_size=8, bptt=140, lr=0.003, max_epochs=2, patience=5, seed=1, threads=1,
             lr_schedule="cosine", warmup_steps=2, min_lr_ratio=0.1)
    o.update(optim)
    cfg = {"model": "gru", "model_config": {"embedding_dim": 16, "hidden_size": 16},
           "data": {"train": str(DATA / "lm" / "lm_train.txt"), "valid": str(DATA / "lm" / "lm_valid.txt"),
                    "max_words": 3000, "max_valid_words": 1000},
           "vocab": {"max_size": 2000}, "optim": o}
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _env(**extra) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env.update(extra)
    return env


def torchrun(cwd: Path, *args: str) -> dict:
    """``torchrun --standalone --nproc_per_node 2 -m nbest_rescore train ARGS``: its
    printed result (only rank 0 prints one)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "nbest_rescore", "train", *args, "--no-progress"]
    r = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count('"checkpoint"') == 1, r.stdout  # one result: rank 0's
    return json.loads(r.stdout)


def weights(path) -> dict:
    return load_checkpoint(path)["state_dict"]


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


@pytest.fixture(scope="module")
def first_epoch(DATA, tmp_path_factory):
    """Two ranks and one process, each stopped after the first epoch (4 updates) of
    the same 2-epoch config."""
    tmp = tmp_path_factory.mktemp("ddp")
    cfg = write_config(DATA, tmp / "cfg.yaml")
    two = torchrun(tmp, "--config", cfg, "--out", str(tmp / "two.pt"), "--stop-after-epochs", "1")
    old = torch.get_num_threads()
    try:
        one = train(load_train_config(cfg), tmp / "one.pt", progress=False, stop_after_epochs=1)
    finally:
        torch.set_num_threads(old)
    return tmp, cfg, two, one


def test_two_ranks_train_like_one_process_with_the_global_batch(first_epoch):
    tmp, _, two, one = first_epoch
    hist_two = load_checkpoint(last_path(tmp / "two.pt"))["resume"]["history"]
    assert [h["steps"] for h in hist_two] == [h["steps"] for h in one.history] == [4]
    assert hist_two[0]["tokens"] == one.history[0]["tokens"]  # every rank's tokens counted once
    # training loss (mean NLL per token over the 4 updates, summed over the ranks)
    assert abs(torch.tensor(two["train_ppl"]).log() - torch.tensor(one.train_ppl).log()) < 1e-5
    assert abs(two["best_valid_ppl"] - one.best_valid_ppl) < 1e-5 * one.best_valid_ppl
    assert max_diff(weights(last_path(tmp / "two.pt")), weights(last_path(tmp / "one.pt"))) < 1e-5


def test_two_rank_resume_equals_an_uninterrupted_two_rank_run(first_epoch):
    tmp, cfg, _, _ = first_epoch
    resumed = torchrun(tmp, "--config", cfg, "--out", str(tmp / "two.pt"), "--resume", str(last_path(tmp / "two.pt")))
    full = torchrun(tmp, "--config", cfg, "--out", str(tmp / "full.pt"))
    assert resumed["epochs"] == full["epochs"] == 2
    a, b = (load_checkpoint(last_path(tmp / n))["resume"]["history"] for n in ("two.pt", "full.pt"))
    assert [h["steps"] for h in a] == [h["steps"] for h in b]
    for x, y in zip(a, b):
        assert x["train_ppl"] == pytest.approx(y["train_ppl"], rel=1e-9)
        assert x["valid_ppl"] == pytest.approx(y["valid_ppl"], rel=1e-9)
    assert max_diff(weights(last_path(tmp / "two.pt")), weights(last_path(tmp / "full.pt"))) < 1e-6
    assert max_diff(weights(tmp / "two.pt"), weights(tmp / "full.pt")) < 1e-6


def test_a_batch_that_does_not_divide_among_the_ranks_is_one_clear_error(DATA, tmp_path):
    """What each torchrun worker does (rank 0 of 2 shown): exit 1 with the reason and
    the fix, no traceback, before connecting to the others."""
    cfg = write_config(DATA, tmp_path / "cfg.yaml", batch_size=7)
    r = subprocess.run([sys.executable, "-m", "nbest_rescore", "train", "--config", cfg, "--out",
                        str(tmp_path / "m.pt"), "--no-progress"], cwd=tmp_path, capture_output=True, text=True,
                       env=_env(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                                MASTER_PORT="1"), timeout=300)
    assert r.returncode == 1
    assert "optim.batch_size 7" in r.stderr and "2 processes" in r.stderr and "multiple of 2" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "m.pt").exists()


@pytest.mark.parametrize("env,words", [
    ({"WORLD_SIZE": "two", "RANK": "0"}, ["WORLD_SIZE='two'", "expected integers"]),
    ({"WORLD_SIZE": "2", "RANK": "5", "LOCAL_RANK": "0"}, ["RANK 5", "outside WORLD_SIZE 2"]),
])
def test_malformed_launch_variables_are_clear_errors(env, words, monkeypatch):
    from nbest_rescore.errors import DataError
    from nbest_rescore.training import distributed

    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(DataError) as err:
        distributed.launched()
    assert all(w in str(err.value) for w in words)


def test_launch_without_a_rendezvous_address_is_a_clear_error(monkeypatch):
    from nbest_rescore.errors import DataError
    from nbest_rescore.training import distributed

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(DataError, match="MASTER_ADDR is not set: start the processes with torchrun"):
        with distributed.session("cpu", 8):
            pass
    assert distributed.launched() == (1, 2, 1)


@pytest.mark.slow
def test_two_ranks_stopped_mid_epoch_by_sigterm_resume_on_the_same_curve(DATA, tmp_path):
    """SIGTERM to torchrun once the first mid-epoch state is written: it passes the
    signal to both workers, which agree (at the next clock sync, every
    ``optim.log_interval`` steps) on the step to stop before, write one state holding
    both ranks' carried states and random states, and exit 75; ``--resume auto`` under
    torchrun ends on the loss curve and weights of an uninterrupted two-rank run."""
    import signal
    import time

    cfg = write_config(DATA, tmp_path / "cfg.yaml", max_epochs=2, log_interval=1)  # the stop is in epoch 1
    text = yaml.safe_load(open(cfg))
    text["data"]["max_words"] = 30000  # 26 updates an epoch: time for the signal to arrive mid-run
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(text))
    full = torchrun(tmp_path, "--config", cfg, "--out", str(tmp_path / "full.pt"), "--checkpoint-interval", "off")
    out = tmp_path / "two.pt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
           "nbest_rescore", "train", "--config", cfg, "--out", str(out), "--no-progress", "--checkpoint-interval",
           "3steps"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not os.path.exists(last_path(out)) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode != 0 and err.count("Stopped: training stopped by SIGTERM") == 2, err[-3000:]
    state = load_checkpoint(last_path(out))["resume"]
    assert state["position"] is not None and len(state["position"]["ranks"]) == 2
    resumed = torchrun(tmp_path, "--config", cfg, "--out", str(out), "--resume", "auto")
    assert resumed["epochs"] == full["epochs"] == 2
    a, b = (load_checkpoint(last_path(tmp_path / n))["resume"]["history"] for n in ("two.pt", "full.pt"))
    assert [h["steps"] for h in a] == [h["steps"] for h in b]
    for x, y in zip(a, b):
        assert x["train_ppl"] == pytest.approx(y["train_ppl"], rel=1e-6)
        assert x["valid_ppl"] == pytest.approx(y["valid_ppl"], rel=1e-6)
    assert max_diff(weights(out), weights(tmp_path / "full.pt")) < 1e-5
