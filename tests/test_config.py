"""Training configs: every bad value is a DataError naming the file, the field, the value
found and a valid example, raised at load time (before any data is read or model
built), and the CLI turns it into exit status 1 without a traceback."""
import copy
import dataclasses
import inspect
import math
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import nbest_rescore.cli
from nbest_rescore.config import (DataConfig, OptimConfig, TrainConfig, VocabConfig, load_train_config,
                                  validate_train_config, with_overrides)
from nbest_rescore.errors import DataError
from nbest_rescore.models import MODEL_REGISTRY, build_model
from nbest_rescore.models.base import ModelConfig
from nbest_rescore.vocab import Vocabulary

from tiny_models import EXTRA, SMALL  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TINY = yaml.safe_load((REPO / "examples" / "tiny.yaml").read_text())
SHARED = ("embedding_dim", "dropout_emb", "dropout_out", "tie_weights", "output", "adaptive_cutoffs",
          "adaptive_div_value")


@pytest.fixture
def write(tmp_path, DATA):
    """``write(section=..., key=value)`` -> path of examples/tiny.yaml with the data at
    DATA and ``raw[section][key] = value`` (section None: a top-level key)."""

    def make(section=None, **changes):
        raw = copy.deepcopy(TINY)
        raw["data"].update(train=str(DATA / "lm" / "lm_train.txt"), valid=str(DATA / "lm" / "lm_valid.txt"))
        (raw if section is None else raw.setdefault(section, {})).update(changes)
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        return path

    return make


def load_error(path) -> str:
    with pytest.raises(DataError) as err:
        load_train_config(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: "), msg
    return msg


def test_tiny_config_loads(write, DATA):
    cfg = load_train_config(write())
    assert cfg.model == "gru" and cfg.model_config == {"embedding_dim": 64, "hidden_size": 64}
    assert cfg.optim.lr == 0.003 and cfg.vocab.max_size == 5000
    assert Path(cfg.data.train) == DATA / "lm" / "lm_train.txt"


def test_string_hidden_size(write):
    msg = load_error(write("model_config", hidden_size="512"))
    assert "model_config.hidden_size must be an integer >= 1" in msg
    assert "'512'" in msg and "e.g. hidden_size:" in msg


def test_negative_lr(write):
    msg = load_error(write("optim", lr=-0.1))
    assert "optim.lr must be a finite number > 0, got -0.1; e.g. lr: 0.001" in msg


def test_zero_bptt(write):
    msg = load_error(write("optim", bptt=0))
    assert "optim.bptt must be an integer >= 1, got 0; e.g. bptt: 20" in msg


def test_string_epoch_count(write):
    msg = load_error(write("optim", max_epochs="10"))
    assert "optim.max_epochs must be an integer" in msg and "'10'" in msg and "e.g. max_epochs: 10" in msg


def test_batch_size_zero(write):
    msg = load_error(write("optim", batch_size=0))
    assert "optim.batch_size must be an integer >= 1, got 0" in msg and "e.g. batch_size: 32" in msg


def test_two_word_vocabulary(write):
    msg = load_error(write("vocab", max_size=2))
    assert "vocab.max_size must be an integer >= 3" in msg and "got 2" in msg and "e.g. max_size:" in msg
    # the same limit where a vocabulary is built
    from collections import Counter

    with pytest.raises(DataError, match="max_size"):
        Vocabulary.from_counts(Counter({"a": 3, "b": 1}), max_size=2)
    with pytest.raises(DataError, match="min_count"):
        Vocabulary.from_counts(Counter({"a": 3, "b": 1}), min_count=5)


def test_unknown_model(write):
    msg = load_error(write(model="grux"))
    assert "unknown model 'grux'" in msg and "did you mean 'gru'" in msg
    assert all(name in msg for name in MODEL_REGISTRY)


def test_unknown_key(write):
    msg = load_error(write("optim", learning_rate=0.1))
    assert "optim: unknown key(s) ['learning_rate']" in msg and "valid:" in msg and "'lr'" in msg
    msg = load_error(write("model_config", hiden_size=64))
    assert "model_config: unknown option(s) ['hiden_size']" in msg and "did you mean 'hidden_size'" in msg


def test_bool_as_int(write):
    msg = load_error(write("model_config", num_layers=True))
    assert "model_config.num_layers must be an integer >= 1, got True (a boolean); e.g. num_layers: 1" in msg


def test_dropout_out_of_range(write):
    msg = load_error(write("model_config", dropout=1.5))
    assert "model_config.dropout must be a finite number in [0, 1), got 1.5; e.g. dropout: 0.0" in msg


def test_nan_lr_written_as_yaml_nan(write):
    path = write("optim", lr=float("nan"))
    assert "lr: .nan" in path.read_text()
    msg = load_error(path)
    assert "optim.lr must be a finite number > 0, got nan" in msg


def test_overrides_after_loading_are_checked(write):
    path = write()
    with pytest.raises(DataError, match=rf"^{path}: optim\.max_epochs must be an integer >= 1, got 0"):
        load_train_config(path, {("optim", "max_epochs"): 0})  # e.g. a CLI override
    cfg = load_train_config(path)
    with pytest.raises(DataError, match=r"^optim\.max_epochs must be an integer >= 1, got 0"):
        with_overrides(cfg, {("optim", "max_epochs"): 0})
    bad = dataclasses.replace(cfg, model_config={**cfg.model_config, "embedding_dim": 2.5})
    with pytest.raises(DataError, match=r"model_config\.embedding_dim .* got 2\.5"):
        validate_train_config(bad)


def test_a_config_is_frozen_and_a_train_job_reads_and_checks_it_once(write, tmp_path, monkeypatch):
    from nbest_rescore import config as config_mod
    from nbest_rescore.api import lm_jobs

    path = write()
    cfg = load_train_config(path)
    for obj, key in ((cfg, "model"), (cfg.data, "train"), (cfg.vocab, "max_size"), (cfg.optim, "lr")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, key, getattr(obj, key))
    loads, checks = [], []
    monkeypatch.setattr(lm_jobs, "load_train_config", lambda *a: loads.append(a) or load_train_config(*a))
    monkeypatch.setattr(config_mod, "validate_train_config",
                        lambda *a: checks.append(a) or validate_train_config(*a))
    job = lm_jobs.TrainJob(config=str(path), out=str(tmp_path / "m.pt"), max_seconds=30.0, threads=2, seed=5,
                           max_epochs=3, checkpoint_interval="off")
    o = job.train_config().optim
    assert (o.max_seconds, o.threads, o.seed, o.max_epochs, o.checkpoint_interval) == (30.0, 2, 5, 3, "off")
    assert job.train_config() is job.train_config() and job.train_config().data == cfg.data
    assert len(loads) == 1 and len(checks) == 1
    # run() trains that same object, not checked again (the trainer checks only a config built in Python)
    ran = []
    monkeypatch.setattr(lm_jobs, "set_threads", lambda n: None)  # (not this process's threads)
    monkeypatch.setattr(lm_jobs, "seed_everything", lambda seed: None)
    monkeypatch.setattr(lm_jobs, "run_training", lambda c, *a, **k: ran.append((c, k["checked"])))
    job.run(progress=False)
    assert ran == [(job.train_config(), True)] and len(loads) == 1 and len(checks) == 1


def test_no_module_sets_attributes_of_a_config():
    import ast

    for path in (REPO / "nbest_rescore").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr":
                target = ast.unparse(node.args[0])
                assert not any(w in target for w in ("cfg", "config", "optim", "section")), (path, target)


@pytest.mark.parametrize("section,key,value,field", [
    (None, "model_config", [64], "model_config"),
    ("data", "max_words", 0, "data.max_words"),
    ("data", "train", "", "data.train"),
    ("vocab", "min_count", 0, "vocab.min_count"),
    ("optim", "max_seconds", float("inf"), "optim.max_seconds"),
    ("optim", "patience", "2", "optim.patience"),
    ("optim", "seed", -1, "optim.seed"),
    ("model_config", "output", "hierarchical", "model_config.output"),
])
def test_other_bad_values(write, section, key, value, field):
    assert field in load_error(write(section, **{key: value}))


def test_cli_train_reports_bad_config_without_traceback(write, tmp_path):
    for section, key, value, field in [("model_config", "hidden_size", "512", "model_config.hidden_size"),
                                       ("optim", "lr", float("nan"), "optim.lr")]:
        bad = write(section, **{key: value})
        out = tmp_path / "m.pt"
        res = CliRunner().invoke(nbest_rescore.cli.main, ["train", "--config", str(bad), "--out", str(out)])
        assert res.exit_code == 1, res.output
        assert "Traceback" not in res.output and field in res.output and bad.name in res.output
        assert not out.exists() and list(tmp_path.iterdir()) == [bad]


# -- model configs: one base, generic checks for every family -----------------------------------
@pytest.mark.parametrize("name", sorted(MODEL_REGISTRY))
def test_every_family_shares_the_base_fields_and_checks_types(name):
    cls = MODEL_REGISTRY[name].Config
    assert issubclass(cls, ModelConfig) and dataclasses.is_dataclass(cls)
    own = [f for f in cls.__dataclass_fields__ if f in SHARED and f in inspect.get_annotations(cls)]
    assert own == [], f"{cls.__name__} re-declares {own}"
    good = {**SMALL, **EXTRA.get(name, {})}
    build_model(name, good, 20)
    for key, bad in [("embedding_dim", "12"), ("embedding_dim", 0), ("embedding_dim", 12.0), ("hidden_size", True),
                     ("dropout_out", 1.0), ("dropout_emb", math.nan), ("tie_weights", "yes"),
                     ("adaptive_div_value", "4")]:
        with pytest.raises(DataError, match=rf"model_config\.{key} must be .*got {bad!r}.*; e\.g\. {key}: "):
            build_model(name, {**good, key: bad}, 20)


def test_section_dataclasses_check_their_fields():
    with pytest.raises(DataError, match=r"data\.max_valid_words must be an integer >= 1 or null"):
        DataConfig(max_valid_words=-5)
    with pytest.raises(DataError, match=r"vocab\.max_size .* got 2\.5"):
        VocabConfig(max_size=2.5)
    with pytest.raises(DataError, match=r"optim\.threads .* got 0"):
        OptimConfig(threads=0)
    with pytest.raises(DataError, match=r"^model must be a non-empty string"):
        TrainConfig(model=None)
    assert DataConfig(train=Path("a.txt")).train == "a.txt"  # Path objects become strings


def test_the_training_text_is_required_and_validation_optional(tmp_path):
    # no default path to the benchmark: a config without data.train is one line naming the key
    cfg = tmp_path / "nodata.yaml"
    cfg.write_text("model: gru\nmodel_config: {embedding_dim: 8, hidden_size: 8}\n")
    out = tmp_path / "m.pt"
    res = CliRunner().invoke(nbest_rescore.cli.main, ["train", "--config", str(cfg), "--out", str(out)])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert res.output.strip().splitlines() == [f"Error: {cfg}: data.train: required, the training text (one sentence "
                                               "per line, a blank line between documents); e.g. data: {train: "
                                               "data/lm_train.txt, valid: data/lm_valid.txt}"]
    assert not out.exists()
    assert DataConfig().train is None and DataConfig().valid is None
    # the same check for a config built in Python
    from nbest_rescore.training.trainer import train

    with pytest.raises(DataError, match=r"^data\.train: required"):
        train(TrainConfig(model="gru", model_config={"embedding_dim": 8, "hidden_size": 8}), tmp_path / "p.pt")
    assert not (tmp_path / "p.pt").exists()
