"""The cpu-ensemble recipe (recipes/abc-nbest/conf/cpu-ensemble, run.sh stage 7): the
forward and backward GRU configs differ only in the direction; stage 7 tunes every
subset of the models and its table's 1-bests are the ones an independent argmax gives."""
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

from nbest_rescore.config import load_train_config

REPO = Path(__file__).resolve().parents[2]


def test_forward_and_backward_configs_differ_only_in_direction(repo_data, monkeypatch):
    monkeypatch.chdir(REPO)
    conf = REPO / "recipes" / "abc-nbest" / "conf" / "cpu-ensemble"
    fwd = asdict(load_train_config(conf / "gru-fwd.yaml"))
    bwd = asdict(load_train_config(conf / "gru-bwd.yaml"))
    assert bwd["model_config"].pop("direction") == "backward" and "direction" not in fwd["model_config"]
    assert fwd == bwd
    amn = load_train_config(conf / "amn.yaml")
    for c in (fwd, asdict(amn)):  # the budget in words (epochs), seconds as a cap, one thread
        assert c["optim"]["max_epochs"] == 2 and c["optim"]["max_seconds"] == 1800 and c["optim"]["threads"] == 1
        assert c["model_config"]["output"] == "adaptive"


def test_stage_7_tunes_every_subset(DATA, tmp_path):
    exp, data = tmp_path / "exp", tmp_path / "data"
    data.mkdir()
    (data / "dev").symlink_to(DATA / "ci")
    rng = np.random.default_rng(0)
    lines = [line.split() for line in open(DATA / "ci" / "lm_cost")]
    for m, noise in (("fwd", 1.0), ("bwd", 2.0)):
        out = exp / f"score_{m}_first-pass"
        out.mkdir(parents=True)
        (out / "nn_cost").write_text("".join(f"{k} {0.9 * float(v) + noise * rng.normal():.4f}\n" for k, v in lines))
    env_path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    res = subprocess.run(["bash", "recipes/abc-nbest/run.sh", "--exp", str(exp), "--data", str(data), "--models",
                          "fwd bwd", "--stage", "7"], cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={"PATH": env_path, "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr[-3000:]
    ens = exp / "ensemble_first-pass"
    for subset in ("fwd", "bwd", "fwd+bwd"):
        for search in ("grid", "line"):
            assert (ens / subset / search / "tune.json").is_file()
    table = (exp / "ensemble_table.md").read_text()
    assert "| fwd + bwd | grid |" in table and "| fwd + bwd | line |" in table and "fwd vs bwd:" in table
