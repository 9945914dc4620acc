"""Epoch checkpoints: ``--resume`` continues exactly like an uninterrupted run,
``--init-from`` starts from trained weights, an unwritable ``--out`` fails before any
data is read, and the group's ``--seed`` seeds training."""
import dataclasses
import logging
import re

import pytest
import torch
import yaml
from click.testing import CliRunner

from nbest_rescore.cli import main
from nbest_rescore.config import DataConfig, OptimConfig, TrainConfig, VocabConfig, with_overrides
from nbest_rescore.errors import DataError
from nbest_rescore.io.checkpoint import load_checkpoint
from nbest_rescore.training import trainer as trainer_mod, word_family
from nbest_rescore.training.checkpointing import RESUME_KEYS, VOCAB_KEYS, check_resume_config, last_path
from nbest_rescore.training.trainer import train


@pytest.fixture(autouse=True)
def clean_seed_env(monkeypatch):
    """The CLI group stores its seed in the environment (os.environ.setdefault, so a
    value left by an earlier invocation would stick): start without it, undo after."""
    monkeypatch.setenv("NBEST_RESCORE_SEED", "0")
    monkeypatch.delenv("NBEST_RESCORE_SEED")


@pytest.fixture(autouse=True)
def restore_threads():
    """The configs below train on one torch thread (the machine is shared); the
    process-wide thread count is restored afterwards."""
    old = torch.get_num_threads()
    yield
    torch.set_num_threads(old)


def tiny_cfg(DATA, **optim) -> TrainConfig:
    """A tiny GRU with dropout (so the random state matters), cosine schedule with
    warmup and per-epoch shuffling, on a prefix of lm_valid."""
    text = str(DATA / "lm" / "lm_valid.txt")
    o = dict(batch_size=8, bptt=10, lr=0.01, max_epochs=3, lr_schedule="cosine", warmup_steps=5,
             min_lr_ratio=0.1, shuffle=True, seed=1, threads=1, patience=5)
    o.update(optim)
    return TrainConfig(model="gru",
                       model_config={"embedding_dim": 16, "hidden_size": 16, "dropout_emb": 0.2, "dropout_out": 0.2},
                       data=DataConfig(train=text, valid=text, max_words=3000, max_valid_words=1000),
                       vocab=VocabConfig(max_size=2000), optim=OptimConfig(**o))


def weights(path, key="state_dict"):
    return load_checkpoint(path)[key]


def assert_same_weights(a: dict, b: dict, atol=1e-6):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k].float(), b[k].float(), atol=atol, rtol=0), k


@pytest.fixture(scope="module")
def uninterrupted(DATA, tmp_path_factory):
    """The reference: three epochs in one run."""
    old = torch.get_num_threads()
    out = tmp_path_factory.mktemp("full") / "a.pt"
    res = train(tiny_cfg(DATA), out, progress=False)
    torch.set_num_threads(old)
    return out, res


def test_resume_equals_an_uninterrupted_run(DATA, tmp_path, uninterrupted):
    a, res_a = uninterrupted
    cfg = tiny_cfg(DATA)
    b = tmp_path / "b.pt"
    first = train(cfg, b, progress=False, stop_after_epochs=1)
    assert first.epochs == 1 and len(first.history) == 1
    after_one = weights(last_path(b))
    assert load_checkpoint(last_path(b))["resume"]["epoch"] == 1
    res_b = train(cfg, b, progress=False, resume=last_path(b))
    assert res_b.epochs == res_a.epochs == 3
    # the interrupted run really stopped after one epoch and then trained on
    with pytest.raises(AssertionError):
        assert_same_weights(after_one, weights(last_path(b)))
    assert_same_weights(weights(last_path(a)), weights(last_path(b)))
    assert_same_weights(weights(a), weights(b))  # best weights
    assert [h["epoch"] for h in res_b.history] == [1, 2, 3]
    for ha, hb in zip(res_a.history, res_b.history):
        assert hb["valid_ppl"] == pytest.approx(ha["valid_ppl"], rel=1e-6)
        assert hb["train_ppl"] == pytest.approx(ha["train_ppl"], rel=1e-6)
        assert hb["lr"] == pytest.approx(ha["lr"], rel=1e-9)
        assert hb["steps"] == ha["steps"] and hb["tokens"] == ha["tokens"]
    assert res_b.best_valid_ppl == pytest.approx(res_a.best_valid_ppl, rel=1e-6)
    # the cosine schedule decayed over the whole planned run, in both
    assert res_a.history[-1]["lr"] < 0.5 * res_a.history[0]["lr"]


def test_resume_needs_a_last_checkpoint_and_excludes_init_from(DATA, tmp_path, uninterrupted):
    a, _ = uninterrupted
    cfg = tiny_cfg(DATA)
    with pytest.raises(DataError, match="training state"):
        train(cfg, tmp_path / "c.pt", progress=False, resume=str(a))  # best weights only
    with pytest.raises(DataError, match="--resume and --init-from"):
        train(cfg, tmp_path / "c.pt", progress=False, resume=last_path(a), init_from=str(a))


def test_init_from_starts_from_the_given_weights(DATA, tmp_path, uninterrupted):
    a, res_a = uninterrupted
    # another prefix: the vocabulary must still be the checkpoint's
    cfg = with_overrides(tiny_cfg(DATA, max_epochs=1), {("data", "max_words"): 2000})
    res = train(cfg, tmp_path / "ft.pt", progress=False, init_from=str(a))
    scratch_first = res_a.history[0]["train_ppl"]
    assert res.history[0]["train_ppl"] < 0.6 * scratch_first, (res.history[0], scratch_first)
    assert load_checkpoint(tmp_path / "ft.pt")["vocab"] == load_checkpoint(a)["vocab"]
    # another model type
    other = dataclasses.replace(tiny_cfg(DATA), model="lstm")
    with pytest.raises(DataError, match="'gru' model"):
        train(other, tmp_path / "x.pt", progress=False, init_from=str(a))
    # the same type with other shapes
    cfg = tiny_cfg(DATA)
    bigger = dataclasses.replace(cfg, model_config={**cfg.model_config, "hidden_size": 24})
    with pytest.raises(DataError, match="do not fit"):
        train(bigger, tmp_path / "y.pt", progress=False, init_from=str(a))


# -- an unwritable --out --------------------------------------------------------------


@pytest.fixture
def no_reading(monkeypatch):
    """Fails the test if the trainer reads any training text."""
    calls = []

    def refuse(path, *a, **k):
        calls.append(path)
        raise RuntimeError(f"read {path} before checking --out")

    monkeypatch.setattr(trainer_mod, "load_train_data", refuse)
    return calls


def test_out_below_a_file_fails_before_reading_data(DATA, tmp_path, no_reading, monkeypatch):
    (tmp_path / "file.txt").write_text("not a folder\n")
    out = tmp_path / "file.txt" / "m.pt"
    cfg = with_overrides(tiny_cfg(DATA), {("data", "train"): str(tmp_path / "no_such_train.txt")})
    built = []
    monkeypatch.setattr(word_family, "build_model", lambda *a, **k: built.append(a))
    with pytest.raises(DataError) as err:
        train(cfg, out, progress=False)
    assert built == []  # failed before any work (no model built), whatever the machine's load
    assert "--out" in str(err.value) and str(out) in str(err.value)
    assert "no_such_train" not in str(err.value)
    assert no_reading == []
    assert (tmp_path / "file.txt").read_text() == "not a folder\n"
    # a folder as --out
    with pytest.raises(DataError, match="is a folder"):
        train(cfg, tmp_path, progress=False)
    assert no_reading == []


def write_config(path, DATA, seed=None, max_words=800):
    text = str(DATA / "lm" / "lm_valid.txt")
    optim = {"batch_size": 4, "bptt": 8, "lr": 0.01, "max_epochs": 1, "threads": 1}
    if seed is not None:
        optim["seed"] = seed
    path.write_text(yaml.safe_dump({
        "model": "gru", "model_config": {"embedding_dim": 8, "hidden_size": 8, "dropout_out": 0.3},
        "data": {"train": text, "valid": None, "max_words": max_words}, "vocab": {"max_size": 500},
        "optim": optim}))
    return path


def test_cli_out_below_a_file_exits_1_before_reading_data(DATA, tmp_path, no_reading):
    (tmp_path / "file.txt").write_text("x\n")
    out = tmp_path / "file.txt" / "m.pt"
    cfg = write_config(tmp_path / "c.yaml", DATA)
    res = CliRunner().invoke(main, ["train", "--config", str(cfg), "--out", str(out), "--no-progress"])
    assert res.exit_code == 1, res.output
    assert isinstance(res.exception, SystemExit)
    assert str(out) in res.output and "--out" in res.output
    assert "Traceback" not in res.output
    assert no_reading == []


# -- the group's --seed -----------------------------------------------------------------


def cli_train(args, cfg, out):
    res = CliRunner().invoke(main, [*args, "train", "--config", str(cfg), "--out", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    return weights(out)


def differ(a, b):
    return any(not torch.equal(a[k], b[k]) for k in a)


def test_group_seed_seeds_training(DATA, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", DATA, seed=5)
    s3 = cli_train(["--seed", "3"], cfg, tmp_path / "s3.pt")
    s3b = cli_train(["--seed", "3"], cfg, tmp_path / "s3b.pt")
    s4 = cli_train(["--seed", "4"], cfg, tmp_path / "s4.pt")
    assert not differ(s3, s3b)
    assert differ(s3, s4)
    assert load_checkpoint(tmp_path / "s3.pt")["info"]["train_config"]["optim"]["seed"] == 3
    # without --seed: the config's optim.seed (5), the same as an explicit --seed 5
    c5 = cli_train([], cfg, tmp_path / "c5.pt")
    c5b = cli_train([], cfg, tmp_path / "c5b.pt")
    s5 = cli_train(["--seed", "5"], cfg, tmp_path / "s5.pt")
    assert not differ(c5, c5b)
    assert not differ(c5, s5)
    assert differ(c5, s3)
    assert load_checkpoint(tmp_path / "c5.pt")["info"]["train_config"]["optim"]["seed"] == 5


@pytest.mark.parametrize("args,expect,status", [
    (["--dtype", "float16"], "--dtype", 2),
    (["--stop-after-epochs", "0"], "--stop-after-epochs", 2),
    (["--resume", "no/such/run.last.pt"], "--resume no/such/run.last.pt: no such file", 1),  # (--resume auto is no file)
    (["--init-from", "no/such/model.pt"], "--init-from", 2),
    (["--checkpoint-interval", "10"], "--checkpoint-interval must be a time (e.g. 5m", 1),
    (["--checkpoint-interval", "5 parsecs"], "--checkpoint-interval", 1),
])
def test_cli_train_rejects_bad_new_options(DATA, tmp_path, no_reading, args, expect, status):
    """Each new train option with a wrong value: a usage error (exit 2, or 1 from the
    job's own check) naming the option, no traceback, nothing read or written."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model: gru\nmodel_config: {{embedding_dim: 8, hidden_size: 8}}\n"
                   f"data: {{train: {DATA / 'lm' / 'lm_valid.txt'}}}\n")
    out = tmp_path / "m.pt"
    res = CliRunner().invoke(main, ["train", "--config", str(cfg), "--out", str(out), *args])
    assert res.exit_code == status, res.output
    assert expect in res.output and "Traceback" not in res.output
    assert not out.exists()


@pytest.mark.parametrize("yaml_line,key", [
    ("optim: {shuffle: maybe}", "optim.shuffle"),
    ("optim: {lr_schedule: step}", "optim.lr_schedule"),
    ("model_config: {output: hierarchical}", "model_config.output"),
    ("model_config: {output: adaptive, adaptive_cutoffs: [50, 10]}", "adaptive_cutoffs"),
])
def test_cli_train_bad_config_values_exit_1_with_the_key(DATA, tmp_path, yaml_line, key):
    """A config value of the wrong kind or range: exit 1, one message naming the key."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model: gru\n{yaml_line}\ndata: {{train: {DATA / 'lm' / 'lm_valid.txt'}, valid: null, "
                   f"max_words: 300}}\n")
    res = CliRunner().invoke(main, ["train", "--config", str(cfg), "--out", str(tmp_path / "m.pt"), "--no-progress"])
    assert res.exit_code == 1, res.output
    assert key in res.output and "Traceback" not in res.output


# -- progress where nobody watches a terminal ---------------------------------------


def test_training_logs_progress_before_its_first_epoch_ends(DATA, tmp_path, caplog, monkeypatch):
    """Where stderr is no terminal (a recipe's log), progress lines with the running
    perplexity come before the end of the first epoch."""
    from nbest_rescore import progress as progress_mod

    pkg = logging.getLogger("nbest_rescore")
    monkeypatch.setattr(pkg, "handlers", [caplog.handler])  # (a CLI test may have stopped propagation)
    monkeypatch.setattr(pkg, "propagate", False)
    caplog.set_level(logging.INFO, logger="nbest_rescore")

    monkeypatch.setattr(progress_mod, "INTERVAL_S", 0.0)
    train(tiny_cfg(DATA, max_epochs=1, log_interval=10), tmp_path / "m.pt", progress=True)
    messages = [(r.name, r.getMessage()) for r in caplog.records]
    end = next(i for i, (_, m) in enumerate(messages) if m.startswith("epoch 1: train ppl"))
    lines = [m for name, m in messages[:end] if name == "nbest_rescore.progress"]
    preparing = [m for m in lines if not m.startswith("epoch")]  # (the text prepared into its store first)
    assert preparing and all(re.match(r"(count|encode) \w+: \d+/\d+ MB .*MB/s", m) for m in preparing)
    lines = [m for m in lines if m.startswith("epoch")]
    assert lines and all(re.match(r"epoch 1: \d+/\d+ tok \(\d+\.\d%\), (\d+|\?) tok/s, .*ETA", m) for m in lines)
    assert any(", ppl " in m for m in lines)  # the running training perplexity


# -- the resumed config against the run's ---------------------------------------------


def test_resume_with_another_config_names_every_key_that_differs(DATA, tmp_path, uninterrupted, monkeypatch):
    a, _ = uninterrupted
    read = []
    monkeypatch.setattr(trainer_mod, "load_train_data", lambda *args, **kw: read.append(args) or [])
    cfg = with_overrides(tiny_cfg(DATA, batch_size=4), {("vocab", "max_size"): 1000})
    with pytest.raises(DataError) as err:
        train(cfg, tmp_path / "c.pt", progress=False, resume=last_path(a))
    assert str(err.value) == (f"--resume {last_path(a)}: the config differs from the run's: optim.batch_size 8 (the "
                              f"run's) against 4 (the config's); vocab.max_size 2000 (the run's) against 1000 (the "
                              f"config's); resume with the run's own values, or train a new run without --resume")
    assert read == []  # refused before any text was read or state restored
    # what may change on resume: the length of the run, the learning rate, the threads
    more = tiny_cfg(DATA, max_epochs=4, lr=0.005, patience=9)
    check_resume_config(last_path(a), load_checkpoint(last_path(a)), more, ("model_config", *RESUME_KEYS, *VOCAB_KEYS))


def test_resume_auto_with_init_from_restarts_from_its_own_state(DATA, tmp_path, uninterrupted):
    """--init-from M --resume auto: the first start begins from M, a restart resumes its
    .last.pt (once refused: --resume and --init-from exclude each other)."""
    a, _ = uninterrupted
    text = str(DATA / "lm" / "lm_valid.txt")
    cfg = tmp_path / "ft.yaml"
    c = tiny_cfg(DATA, max_epochs=2)
    cfg.write_text(yaml.safe_dump({"model": "gru", "model_config": c.model_config,
                                   "data": {"train": text, "valid": text, "max_words": 3000, "max_valid_words": 1000},
                                   "vocab": {"max_size": 2000}, "optim": {k: getattr(c.optim, k) for k in (
                                       "batch_size", "bptt", "lr", "max_epochs", "seed", "threads", "patience")}}))
    out = tmp_path / "ft.pt"
    args = ["train", "--config", str(cfg), "--out", str(out), "--init-from", str(a), "--resume", "auto",
            "--no-progress"]
    first = CliRunner().invoke(main, [*args, "--stop-after-epochs", "1"])
    assert first.exit_code == 0, first.output
    after_one = weights(last_path(out))
    second = CliRunner().invoke(main, args)
    assert second.exit_code == 0, second.output
    import json

    ends = [p["epoch"] for p in json.loads(second.output)["curve"]]
    assert ends == [1, 2] and json.loads(second.output)["epochs"] == 2  # epoch 1 kept, not redone
    assert differ(after_one, weights(last_path(out)))
