"""run.sh stage 1 after a preemption: SIGTERM to the recipe's process group (as Slurm
sends it to a job) while a model trains leaves <exp>/<m>.last.pt; running the recipe
again resumes from it (``--resume auto``) and ends with the weights of one
uninterrupted ``train``, bit for bit; a finished model is then skipped."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from nbest_rescore.io.checkpoint import load_checkpoint

REPO = Path(__file__).resolve().parents[2]


def recipe(exp: Path, conf: Path, data: Path, tmp_path: Path) -> subprocess.Popen:
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO)}
    return subprocess.Popen(["bash", "recipes/abc-nbest/run.sh", "--exp", str(exp), "--data", str(data), "--conf",
                             str(conf), "--models", "tiny", "--stage", "1", "--stop-stage", "1"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.mark.slow
def test_the_recipe_resumes_a_preempted_training(DATA, tmp_path):
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "tiny.yaml").write_text(yaml.safe_dump({
        "model": "gru", "model_config": {"embedding_dim": 16, "hidden_size": 16, "dropout_emb": 0.2},
        "data": {"train": str(DATA / "lm" / "lm_train.txt"), "valid": str(DATA / "lm" / "lm_valid.txt"),
                 "max_words": 6000, "max_valid_words": 500},
        "vocab": {"max_size": 2000},
        "optim": {"batch_size": 8, "bptt": 10, "lr": 0.01, "max_epochs": 3, "seed": 1, "threads": 1,
                  "checkpoint_interval": "5steps", "log_interval": 5}}))
    exp = tmp_path / "exp"
    first = recipe(exp, conf, DATA, tmp_path)
    deadline = time.monotonic() + 120
    while not (exp / "tiny.last.pt").exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(first.pid, signal.SIGTERM)  # the shell and the trainer, as a scheduler does
    first.communicate(timeout=120)
    assert first.returncode != 0 and not (exp / "train_tiny.json").exists()
    assert load_checkpoint(exp / "tiny.last.pt")["resume"]["position"] is not None
    assert "training stopped by SIGTERM" in (exp / "train_tiny.log").read_text()

    again = recipe(exp, conf, DATA, tmp_path)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-3000:]
    assert "resuming the interrupted training of tiny" in out + err
    ref = subprocess.run([sys.executable, "-m", "nbest_rescore", "train", "--config", str(conf / "tiny.yaml"),
                          "--out", str(tmp_path / "ref.pt"), "--no-progress"], capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)
    assert ref.returncode == 0, ref.stderr[-2000:]
    a, b = (load_checkpoint(p)["state_dict"] for p in (exp / "tiny.pt", tmp_path / "ref.pt"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    done = recipe(exp, conf, DATA, tmp_path)
    out, err = done.communicate(timeout=120)
    assert done.returncode == 0 and "tiny.pt exists, skipping" in out + err
