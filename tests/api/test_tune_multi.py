"""tune with several NN cost files: LM names, tune.json's weights block read back by
read_weights_file (round trip and malformed files), and the CLI."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import nbest_rescore.api as nr
from nbest_rescore.api.tune_job import cost_file_names
from nbest_rescore.cli import main
from nbest_rescore.errors import DataError


@pytest.fixture(scope="module")
def cost_files(DATA, tmp_path_factory):
    """Two plausible NN cost files for ci: the n-gram costs plus noise of two seeds."""
    d = tmp_path_factory.mktemp("costs")
    lines = [line.split() for line in open(DATA / "ci" / "lm_cost")]
    paths = []
    for seed, name in ((1, "nn_cost.fwd"), (2, "nn_cost")):
        rng = np.random.default_rng(seed)
        p = d / name
        p.write_text("".join(f"{k} {float(v) * 0.9 + rng.normal(0, 2.0)!r}\n" for k, v in lines))
        paths.append(p)
    return paths


def test_lm_names():
    assert cost_file_names(["a/nn_cost", "b/nn_cost.gru", "c/nn_cost", "d/nn_cost.gru", "e/costs"]) == (
        "nn", "gru", "nn_2", "gru_2", "nn_3")
    assert cost_file_names(["x/nn_cost."]) == ("nn",)


def test_cli_two_cost_files(cost_files, DATA, tmp_path):
    args = ["--seed", "3", "tune", "--nbest", DATA / "ci", "--ref", DATA / "ci" / "ref.txt",
            "--nn-cost", cost_files[0], "--nn-cost", cost_files[1], "--lm-weights", "8:11:1", "--interps", "0:1:0.25"]
    res = CliRunner().invoke(main, [str(a) for a in args + ["--search", "line", "--restarts", "1",
                                                               "--out", tmp_path / "line"]])
    assert res.exit_code == 0, res.output
    assert "best: WER" in res.output and "ngram" in res.output and "fwd" in res.output and "nn " in res.output
    doc = json.loads((tmp_path / "line" / "tune.json").read_text())
    assert doc["search"] == "line" and doc["seed"] == 3 and doc["evaluations"] > 0 and doc["seconds"] >= 0
    assert list(doc["weights"]["nn"]) == ["fwd", "nn"] and not (tmp_path / "line" / "tune_wer.png").exists()
    w, names = nr.read_weights_file(tmp_path / "line" / "tune.json")
    assert names == ("fwd", "nn") and w.nn_weights == tuple(doc["weights"]["nn"].values())
    assert f"{doc['best']['wer']:.2f}%" in res.output
    grid = CliRunner().invoke(main, [str(a) for a in args + ["--out", tmp_path / "grid"]])
    assert grid.exit_code == 0, grid.output
    gdoc = json.loads((tmp_path / "grid" / "tune.json").read_text())
    assert gdoc["search"] == "grid" and len(gdoc["points"]) == 15 * 4 and "seed" not in gdoc


def test_read_weights_file_round_trip(tmp_path):
    pts = (nr.TunePoint(0.2, 10.0, -0.5, 30.0, nn_weights=(0.5, 0.3)),)
    res = nr.TuneResult(points=pts, best=pts[0], acoustic_scale=1.0, names=("a", "b"), search="line", seed=0)
    p = tmp_path / "tune.json"
    p.write_text(json.dumps(res.to_dict()))
    w, names = nr.read_weights_file(p)
    assert names == ("a", "b") and w == res.best_weights() == nr.Weights(1.0, 10.0, 0.2, -0.5, (0.5, 0.3))
    one = nr.TuneResult(points=(nr.TunePoint(0.7, 9.0, 0.0, 1.0),), best=nr.TunePoint(0.7, 9.0, 0.0, 1.0),
                        acoustic_scale=1.0)
    p.write_text(json.dumps(one.to_dict()))
    w, names = nr.read_weights_file(p)
    assert names == ("nn",) and w.interp == 0.7 and w.nn_weights == pytest.approx((0.3,))


@pytest.mark.parametrize("text,words", [
    ("{", "cannot read it as JSON"),
    ('{"best": {}}', "expected a 'weights' object"),
    ('{"weights": {"acoustic_scale": 1, "lm_weight": 9, "word_ins_penalty": 0}}', "missing ngram, nn"),
    ('{"weights": {"acoustic_scale": 1, "lm_weight": 9, "word_ins_penalty": 0, "ngram": 0.5, "nn": [0.5]}}',
     "'nn' must map"),
    ('{"weights": {"acoustic_scale": 1, "lm_weight": 9, "word_ins_penalty": 0, "ngram": 0.5, "nn": {"a": 0.2}}}',
     "sum to 1"),
])
def test_read_weights_file_malformed(tmp_path, text, words):
    p = tmp_path / "tune.json"
    p.write_text(text)
    with pytest.raises(DataError, match=words) as exc:
        nr.read_weights_file(p)
    assert str(p) in str(exc.value)
    with pytest.raises(DataError, match="cannot read"):
        nr.read_weights_file(tmp_path / "missing.json")
