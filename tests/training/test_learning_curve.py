"""Learning curves and early stopping within epochs (issue 35): ``optim.valid_every``
validation points, their figures checked against an independent perplexity of the
saved weights, early stopping after ``patience`` points without improvement, the curve
kept across a resume, and the AMN's auxiliary loss and memcell health per point."""
import copy
import dataclasses
import json

import pytest
import torch

from nbest_rescore.config import TrainConfig, _build, validate_train_config
from nbest_rescore.errors import DataError
from nbest_rescore.evaluation.perplexity import corpus_perplexity
from nbest_rescore.io.lm_text import read_lm_text
from nbest_rescore.models import load_model
from nbest_rescore.training import epoch
from nbest_rescore.training.trainer import train

EVERY = 1500  # training words between validation points


def config(DATA, **optim) -> TrainConfig:
    """A tiny GRU on 6000 words of lm_train (about 3 points per epoch), 400 words of lm_valid."""
    raw = {"model": "gru", "model_config": {"embedding_dim": 16, "hidden_size": 16},
           "data": {"train": str(DATA / "lm" / "lm_train.txt"), "valid": str(DATA / "lm" / "lm_valid.txt"),
                    "max_words": 6000, "max_valid_words": 400},
           "vocab": {"max_size": 1500},
           "optim": {"batch_size": 6, "bptt": 10, "lr": 0.01, "max_epochs": 2, "patience": 100, "seed": 3,
                     "threads": 1, "valid_every": f"{EVERY}words", "halve_lr_on_plateau": False,
                     "checkpoint_interval": "off", **optim}}
    cfg = _build(TrainConfig, raw)
    validate_train_config(cfg)
    return cfg


@pytest.fixture(scope="module")
def curve_run(DATA, tmp_path_factory):
    d = tmp_path_factory.mktemp("curve")
    cfg = config(DATA)
    res = train(cfg, d / "m.pt", progress=False)
    return cfg, res, d / "m.pt"


def test_points_every_interval_and_at_epoch_ends(curve_run):
    cfg, res, _ = curve_run
    curve = res.curve
    ends = {h["steps"] for h in res.history}
    assert ends <= {p["steps"] for p in curve}  # every epoch end is a point
    within = [p for p in curve if p["steps"] not in ends]
    assert len(within) >= 4  # 2 epochs of about 6000 words, a point every 1500
    seg = cfg.optim.batch_size * cfg.optim.bptt  # the most words one update adds
    last = 0
    for p in curve:  # due at the first update after EVERY more words than the last point
        if p["steps"] not in ends:
            assert EVERY <= p["words"] - last < EVERY + seg
        last = p["words"]
    assert [p["words"] for p in curve] == sorted(p["words"] for p in curve)
    assert all(p["cpu_seconds"] > 0 and p["seconds"] > 0 and p["valid_ppl"] > 1 for p in curve)
    assert res.history[-1]["words"] == curve[-1]["words"] == res.history[-1]["tokens"]  # word ids: 1 per word
    assert "aux_loss" not in curve[0]  # a GRU has no auxiliary loss


def test_each_point_is_the_validation_perplexity_and_the_best_weights_are_kept(curve_run, DATA):
    cfg, res, out = curve_run
    model, vocab, info = load_model(out)
    valid = read_lm_text(DATA / "lm" / "lm_valid.txt", cfg.data.max_valid_words)
    independent = corpus_perplexity(model, vocab, valid, batch_size=5).perplexity
    best = min(p["valid_ppl"] for p in res.curve)
    assert independent == pytest.approx(best, rel=1e-5)
    assert res.best_valid_ppl == pytest.approx(best, rel=1e-12)
    assert info["curve"] == res.curve  # the checkpoint records the curve too


def test_early_stopping_within_an_epoch_after_patience_bad_points(DATA, tmp_path, monkeypatch):
    """Validation NLLs that only grow after the second point: the run stops at the
    point that makes ``patience`` bad ones, inside the first epoch, best weights kept."""
    calls = []
    real = epoch.nll_of_streams

    def rising(model, streams, bptt, device, progress=None):
        real(model, streams, bptt, device, progress)
        calls.append(copy.deepcopy(model.state_dict()))
        return 1000.0 + (0.0 if len(calls) == 2 else 10.0 * len(calls))  # the 2nd point is the best

    monkeypatch.setattr(epoch, "nll_of_streams", rising)
    res = train(config(DATA, patience=2, valid_every="500words"), tmp_path / "m.pt", progress=False)
    assert len(res.curve) == 4 and res.epochs == 1  # best at point 2, bad at 3 and 4: stop
    assert res.curve[-1]["words"] < 6000  # inside the first epoch (about 6000 words)
    assert res.curve[1]["valid_ppl"] == res.best_valid_ppl < res.curve[2]["valid_ppl"]
    model, _, _ = load_model(tmp_path / "m.pt")
    kept = model.state_dict()
    assert all(torch.equal(kept[k], calls[1][k].cpu()) for k in kept)  # the weights of point 2


def test_a_resumed_run_continues_the_same_curve(curve_run, DATA, tmp_path):
    cfg, res, _ = curve_run
    train(cfg, tmp_path / "m.pt", progress=False, stop_after_epochs=1)
    again = train(cfg, tmp_path / "m.pt", progress=False, resume=str(tmp_path / "m.last.pt"))
    strip = lambda c: [{k: v for k, v in p.items() if "seconds" not in k} for p in c]
    assert strip(again.curve) == strip(res.curve)  # (CPU, one thread: bit for bit)
    assert again.curve[-1]["cpu_seconds"] >= again.curve[0]["cpu_seconds"]


def test_amn_points_log_the_auxiliary_loss_and_memcell_health(DATA, tmp_path):
    cfg = dataclasses.replace(config(DATA, max_epochs=1), model="amn", model_config={
        "embedding_dim": 12, "hidden_size": 12, "num_memcells": 3, "itl_weight": 2.0, "itl_reduction": "mean-token",
        "anneal_t0": 250.0, "anneal_gamma": 0.15})
    res = train(cfg, tmp_path / "amn.pt", progress=False)
    for p in res.curve:
        assert p["aux_loss"] > 0
        h = p["memcells"]
        assert len(h["mean_attention"]) == 3 and sum(h["mean_attention"]) == pytest.approx(1, abs=1e-3)
        assert h["attention_entropy_bits"] == pytest.approx(1.585, abs=0.01)  # T = 250: uniform over 3
    # the ITL's size: lambda * mean over units of (o - m_i)^2, a mild term next to the cross-entropy (about 7 nats)
    assert res.curve[-1]["aux_loss"] < 0.5


def test_valid_every_is_checked_where_the_config_is_read(DATA):
    with pytest.raises(DataError, match="optim.valid_every must be a time .*300kwords.*got 'often'"):
        config(DATA, valid_every="often")


def test_curves_plots_every_point_of_each_run(curve_run, tmp_path):
    from click.testing import CliRunner

    from nbest_rescore.cli import main
    from nbest_rescore.evaluation.plots import learning_curves_figure

    _, res, out = curve_run
    summary = tmp_path / "gru.json"
    summary.write_text(json.dumps({"checkpoint": str(out), "curve": res.curve}))
    fig = learning_curves_figure([("json", res.curve), ("pt", res.curve)])
    by_words, by_cpu = fig.axes
    line = by_words.get_lines()[0]  # (the run's line; the next one circles its best point)
    assert list(line.get_xdata()) == [p["words"] / 1e6 for p in res.curve]
    assert list(line.get_ydata()) == [p["valid_ppl"] for p in res.curve]
    assert list(by_cpu.get_lines()[0].get_xdata()) == [p["cpu_seconds"] / 60 for p in res.curve]
    assert by_words.get_lines()[1].get_ydata()[0] == min(p["valid_ppl"] for p in res.curve)
    r = CliRunner().invoke(main, ["curves", str(summary), str(out), "--label", "a", "--label", "b",
                                  "--out", str(tmp_path / "c.png")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for args, message in (([str(summary), "--label", "a", "--label", "b"], "--label: give one per run"),
                          ([str(tmp_path / "c.png")], "not the JSON summary of nbest-rescore train"),
                          ([str(summary), "--out", str(tmp_path / "c.txt")], "the plot is a PNG")):
        if "--out" not in args:
            args = [*args, "--out", str(tmp_path / "d.png")]
        r = CliRunner().invoke(main, ["curves", *args])
        assert r.exit_code != 0 and message in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "d.png").exists()
    (tmp_path / "old.json").write_text(json.dumps({"checkpoint": "x.pt", "epochs": 1}))
    r = CliRunner().invoke(main, ["curves", str(tmp_path / "old.json"), "--out", str(tmp_path / "d.png")])
    assert r.exit_code != 0 and 'no learning curve ("curve")' in r.output
