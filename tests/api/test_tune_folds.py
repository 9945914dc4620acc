"""tune --folds / --fold-seed / --replications through the CLI and TuneJob: tune.json's
cross_validation, bootstrap and utterance_errors blocks (recomputed here from the
per-utterance errors), the printed lines, and one-line errors."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from nbest_rescore.api import TuneJob
from nbest_rescore.cli import main
from nbest_rescore.errors import DataError
from nbest_rescore.evaluation.bootstrap import bootstrap_wer, improvement_probability


@pytest.fixture(scope="module")
def cost_file(DATA, tmp_path_factory):
    lines = [line.split() for line in open(DATA / "ci" / "lm_cost")]
    rng = np.random.default_rng(3)
    p = tmp_path_factory.mktemp("costs") / "nn_cost.gru"
    p.write_text("".join(f"{k} {float(v) * 0.9 + rng.normal(0, 2.0)!r}\n" for k, v in lines))
    return p


def _tune(DATA, *args):
    return CliRunner().invoke(main, [str(a) for a in ["--seed", "2", "tune", "--nbest", DATA / "ci", "--ref",
                                                      DATA / "ci" / "ref.txt", *args]])


def test_tune_json_blocks(DATA, cost_file, ci_nbest, tmp_path):
    res = _tune(DATA, "--nn-cost", cost_file, "--interps", "0:1:0.25", "--lm-weights", "8:12:1", "--folds", "3",
                "--fold-seed", "4", "--replications", "2000", "--out", tmp_path)
    assert res.exit_code == 0, res.output
    d = json.loads((tmp_path / "tune.json").read_text())
    cv, boot, ue = d["cross_validation"], d["bootstrap"], d["utterance_errors"]
    assert (cv["folds"], cv["seed"], len(cv["per_fold"])) == (3, 4, 3)
    assert set(cv["per_fold"][0]) >= {"documents", "utterances", "ref_words", "wer", "weights"}
    assert list(cv["per_fold"][0]["weights"]["nn"]) == ["gru"]
    words = np.array(ue["ref_words"])
    assert ue["ids"] == [u.utt_id for u in ci_nbest.utterances]
    assert words.tolist() == [int(x) for x in words] and sum(f["ref_words"] for f in cv["per_fold"]) == words.sum()
    assert sum(ue["dev_tuned"]) / words.sum() * 100 == pytest.approx(d["best"]["wer"], abs=1e-12)
    assert sum(ue["cross_validated"]) / words.sum() * 100 == pytest.approx(cv["wer"], abs=1e-12)
    assert sum(f["errors"] for f in cv["per_fold"]) == sum(ue["cross_validated"])
    assert sum(f["documents"] for f in cv["per_fold"]) == len({u.doc_id for u in ci_nbest.utterances})
    assert (boot["replications"], boot["seed"]) == (2000, 2)
    for name in ("dev_tuned", "first_pass", "cross_validated"):
        assert boot[name] == bootstrap_wer(ue[name], words, 2000, 2).to_dict()
    for name in ("dev_tuned", "cross_validated"):
        p = improvement_probability(ue["first_pass"], ue[name], 2000, 2)
        assert boot["p_better_than_first_pass"][name] == p
        assert f"P({'dev-tuned best' if name == 'dev_tuned' else 'cross-validated'} better than first pass) = " \
               f"{p:.4f}" in res.output
    assert f"cross-validated WER {cv['wer']:.2f}% (3 folds" in res.output
    assert res.output.splitlines()[-2].startswith("best: WER")  # the lines scripts tail stay last


def test_replications_zero_and_no_folds(DATA, tmp_path):
    res = _tune(DATA, "--lm-weights", "9,10", "--replications", "0", "--out", tmp_path)
    assert res.exit_code == 0, res.output
    d = json.loads((tmp_path / "tune.json").read_text())
    assert "bootstrap" not in d and "cross_validation" not in d and "cross_validated" not in d["utterance_errors"]
    assert "bootstrap" not in res.output and "cross-validated" not in res.output


@pytest.mark.parametrize("args, code, text", [
    (["--folds", "9"], 1, "--folds 9: the lists have only 8 documents"),
    (["--folds", "-1"], 2, "--folds"),
    (["--replications", "-5"], 2, "--replications"),
    (["--fold-seed", "x"], 2, "--fold-seed"),
])
def test_bad_options_are_one_line(DATA, args, code, text):
    res = _tune(DATA, "--lm-weights", "9.5", *args)
    assert res.exit_code == code and text in res.output, res.output
    if code == 1:
        assert res.output.count("\n") == 1 and "Traceback" not in res.output


def test_job_checks_options_before_reading(tmp_path):
    ref = tmp_path / "ref.txt"
    ref.write_text("a x\n")
    for kw, opt in ((dict(folds=-1), "--folds"), (dict(fold_seed=-2), "--fold-seed"),
                    (dict(replications=-1), "--replications"), (dict(seed=-1), "--seed")):
        with pytest.raises(DataError, match=opt):
            TuneJob(nbest=str(tmp_path), ref=str(ref), **kw)
    TuneJob(nbest=str(tmp_path), ref=str(ref), seed=-1, replications=0)  # an unused seed is not checked
