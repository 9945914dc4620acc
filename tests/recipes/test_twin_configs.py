"""The cpu-twins recipe configs (recipes/abc-nbest/conf/cpu-twins): two valid training
configs that differ only in the output layer, so their WER difference is the adaptive
softmax's."""
from dataclasses import asdict
from pathlib import Path

from nbest_rescore.config import load_train_config

REPO = Path(__file__).resolve().parents[2]


def test_twin_configs_differ_only_in_the_output_layer(repo_data, monkeypatch):
    monkeypatch.chdir(REPO)
    conf = REPO / "recipes" / "abc-nbest" / "conf" / "cpu-twins"
    adaptive = asdict(load_train_config(conf / "gru-adaptive.yaml"))
    softmax = asdict(load_train_config(conf / "gru-softmax.yaml"))
    assert adaptive["model_config"].pop("output") == "adaptive"
    assert softmax["model_config"].pop("output") == "softmax"
    assert adaptive == softmax
    assert adaptive["model"] == "gru" and adaptive["optim"]["threads"] == 1
    assert "cpu-twins" in (REPO / "recipes" / "abc-nbest" / "run.sh").read_text()
