"""Learning-rate schedule against its closed form, the time budget taking over the
progress, and the validation of the optimisation config."""
import math

import pytest

from nbest_rescore.config import DataConfig, OptimConfig, TrainConfig
from nbest_rescore.errors import DataError
from nbest_rescore.training import trainer as trainer_mod, word_family
from nbest_rescore.training.schedule import LRSchedule
from nbest_rescore.training.trainer import train


def closed_form(kind, n, planned, warmup, m, p=None):
    """Written out independently: warmup ramp times the decay at progress p."""
    w = 1.0 if warmup == 0 else min(1.0, (n + 1) / warmup)
    if p is None:
        p = min(1.0, n / planned)
    if kind == "constant":
        return w
    if kind == "cosine":
        return w * (m + (1 - m) * (1 + math.cos(math.pi * p)) / 2)
    return w * (1 - (1 - m) * p)


@pytest.mark.parametrize("kind", ["constant", "cosine", "linear"])
@pytest.mark.parametrize("warmup,m", [(0, 0.0), (10, 0.1), (25, 0.5)])
def test_schedule_matches_closed_form(kind, warmup, m):
    planned = 200
    s = LRSchedule(OptimConfig(lr_schedule=kind, warmup_steps=warmup, min_lr_ratio=m), planned)
    for n in (0, 1, 4, 9, 10, 24, 25, 50, 100, 150, 199, 200, 500):
        assert s.factor(n) == pytest.approx(closed_form(kind, n, planned, warmup, m), rel=1e-12, abs=1e-15), n


def test_schedule_landmarks():
    cos = LRSchedule(OptimConfig(lr_schedule="cosine", warmup_steps=10, min_lr_ratio=0.1), 100)
    assert cos.factor(0) == pytest.approx(0.1)  # first warmup step: 1/10 of the peak
    assert cos.factor(9) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.09)) * 0.9 + 0.1)
    assert cos.factor(50) == pytest.approx(0.55)  # half way: (1 + m) / 2
    assert cos.factor(100) == pytest.approx(0.1) and cos.factor(1000) == pytest.approx(0.1)  # floor m
    lin = LRSchedule(OptimConfig(lr_schedule="linear", min_lr_ratio=0.0), 80)
    assert [lin.factor(n) for n in (0, 20, 40, 80)] == pytest.approx([1.0, 0.75, 0.5, 0.0])
    const = LRSchedule(OptimConfig(lr_schedule="constant", warmup_steps=4), 10)
    assert [const.factor(n) for n in (0, 1, 3, 9, 100)] == pytest.approx([0.25, 0.5, 1.0, 1.0, 1.0])


@pytest.mark.parametrize("kind", ["cosine", "linear"])
def test_time_budget_takes_over_when_further(kind):
    o = OptimConfig(lr_schedule=kind, warmup_steps=0, min_lr_ratio=0.2, max_seconds=100.0)
    s = LRSchedule(o, 1000)
    # time further along than steps: the elapsed share decides
    assert s.progress(10, 50.0) == pytest.approx(0.5)
    assert s.factor(10, 50.0) == pytest.approx(closed_form(kind, 10, 1000, 0, 0.2, p=0.5))
    # steps further along than time
    assert s.progress(900, 10.0) == pytest.approx(0.9)
    assert s.factor(900, 10.0) == pytest.approx(closed_form(kind, 900, 1000, 0, 0.2, p=0.9))
    # past the budget: clamped to the end
    assert s.progress(10, 250.0) == 1.0
    assert s.factor(10, 250.0) == pytest.approx(0.2)
    # without max_seconds the elapsed time is ignored
    s2 = LRSchedule(OptimConfig(lr_schedule=kind, min_lr_ratio=0.2), 1000)
    assert s2.progress(10, 1e9) == pytest.approx(0.01)


@pytest.mark.parametrize("key,value", [
    ("batch_size", 0), ("bptt", 0), ("lr", -1), ("lr", 0), ("lr_schedule", "exponential"),
    ("dtype", "float16"), ("warmup_steps", -1), ("max_epochs", 0), ("optimizer", "rmsprop"),
    ("min_lr_ratio", 1.5), ("clip", 0.0), ("batch_size", 2.5), ("bptt", True), ("checkpoint_every", 0),
    ("shuffle", "no"), ("cuda_graph", 1), ("halve_lr_on_plateau", "false"), ("weight_decay", -0.1),
    ("momentum", "0.9"), ("log_interval", 0),
])
def test_optim_config_rejects_bad_values(key, value):
    with pytest.raises(DataError, match=rf"optim\.{key}\b") as err:
        OptimConfig(**{key: value})
    assert repr(value) in str(err.value)


def test_optim_config_accepts_good_values():
    o = OptimConfig(batch_size=1, bptt=1, lr=1e-5, lr_schedule="linear", dtype="bfloat16", warmup_steps=0,
                    min_lr_ratio=1.0, optimizer="sgd", checkpoint_every=3)
    assert (o.batch_size, o.lr_schedule, o.dtype) == (1, "linear", "bfloat16")


def test_bfloat16_training_on_cpu_names_cuda(DATA, tmp_path, monkeypatch):
    text = str(DATA / "lm" / "lm_valid.txt")
    cfg = TrainConfig(model="gru", model_config={"embedding_dim": 8, "hidden_size": 8},
                      data=DataConfig(train=text, valid=None, max_words=200),
                      optim=OptimConfig(dtype="bfloat16", max_epochs=1))
    work = []  # fails before any data is read or model built, whatever the machine's load
    monkeypatch.setattr(trainer_mod, "load_train_data", lambda *a, **k: work.append(("read", a)))
    monkeypatch.setattr(word_family, "build_model", lambda *a, **k: work.append(("build", a)))
    with pytest.raises(DataError, match="CUDA") as err:
        train(cfg, tmp_path / "m.pt", device="cpu", progress=False)
    assert "bfloat16" in str(err.value)
    assert work == []
    assert not (tmp_path / "m.pt").exists()


def test_both_families_implement_the_whole_family_interface():
    """WordFamily and HfFamily declare TrainFamily and define each of its members
    themselves (none falls back to the Protocol's empty body)."""
    from nbest_rescore.training.family import TrainFamily
    from nbest_rescore.training.hf_train import HfFamily

    members = {n for n in vars(TrainFamily) if not n.startswith("_")} | set(TrainFamily.__annotations__)
    assert members >= {"subword", "check", "load_start", "encoding", "text", "build", "save", "eval_bptt"}
    for family in (word_family.WordFamily, HfFamily):
        assert TrainFamily in family.__mro__
        assert not [n for n in members if n not in vars(family)], family
