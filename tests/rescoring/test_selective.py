"""Selective rescoring (``score --skip-confident P``, issue 37 item 3) on the ci lists
with the tiny trained GRU, against independent computations: the first-pass posterior
by a plain loop of math.exp per list, the skipped lists' 1-bests against the first
pass, the scored lists' costs against a run that scores everything, and the
threshold tune picks against a brute-force loop over every threshold."""
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from nbest_rescore.cli import main
from nbest_rescore.models import load_model
from nbest_rescore.rescoring.combine import Weights, segment_argmax, flat_scores
from nbest_rescore.rescoring.history import rescore
from nbest_rescore.rescoring.scorer import NnScorer
from nbest_rescore.rescoring.selective import first_pass_posteriors

W = Weights(acoustic_scale=1.0, lm_weight=9.5, interp=0.5, word_ins_penalty=-0.629606)


def loop_posteriors(nbest, w: Weights):
    """The posterior of each list's first-pass 1-best, one hypothesis at a time."""
    out = []
    for u in nbest.utterances:
        s = [(-a - w.lm_weight * g + w.word_ins_penalty * len(h)) / w.lm_weight
             for a, g, h in zip(u.ac_cost, u.lm_cost, u.hyps)]
        out.append(1.0 / sum(math.exp(x - max(s)) for x in s))
    return np.array(out)


def test_posteriors_equal_a_plain_loop(ci_nbest):
    p = first_pass_posteriors(ci_nbest.flat(), W)
    assert p == pytest.approx(loop_posteriors(ci_nbest, W), rel=1e-9)
    assert ((p > 0) & (p <= 1)).all() and 0.05 < np.median(p) < 0.9  # lists neither all sure nor all flat


@pytest.mark.parametrize("history", ["first-pass", "rescored"])
def test_skipped_lists_keep_the_first_pass_and_scored_costs_do_not_change(ci_nbest, tiny_lm, history):
    model, vocab, _ = load_model(tiny_lm)
    scorer = NnScorer(model, vocab)
    full = rescore(ci_nbest, scorer, W, history)
    p = loop_posteriors(ci_nbest, W)
    threshold = float(np.median(p))
    part = rescore(ci_nbest, scorer, W, history, skip_confident=threshold)
    flat = ci_nbest.flat()
    skipped = p >= threshold
    assert (part.scored == ~skipped).all() and 0 < skipped.sum() < len(p)
    first = segment_argmax(flat_scores(flat, Weights(lm_weight=9.5, interp=1.0, word_ins_penalty=-0.629606)),
                           flat.offsets)
    for u, utt in enumerate(ci_nbest.utterances):
        a, b = flat.offsets[u], flat.offsets[u + 1]
        if skipped[u]:
            assert part.best[u] == first[u]
            assert (part.nn_cost[a:b] == flat.lm_cost[a:b]).all()  # the n-gram costs, as documented
        elif history == "first-pass":  # the same histories: the same costs, whatever was skipped
            assert part.nn_cost[a:b] == pytest.approx(full.nn_cost[a:b], abs=1e-4)
            assert part.best[u] == full.best[u]


def test_score_and_tune_on_the_command_line(DATA, tiny_lm, tmp_path):
    """score writes every list's costs and says how many it scored; tune --skip-budget
    picks the threshold that a brute-force loop over every posterior picks."""
    ci, ref = str(DATA / "ci"), str(DATA / "ci" / "ref.txt")
    run = CliRunner().invoke
    res = run(main, ["score", "--lm", str(tiny_lm), "--nbest", ci, "--ref", ref, "--out", str(tmp_path / "all"),
                     "--interp", "0.5", "--word-ins-penalty", "-0.629606", "--no-progress"])
    assert res.exit_code == 0, res.output
    tune = run(main, ["tune", "--nbest", ci, "--ref", ref, "--nn-cost", str(tmp_path / "all" / "nn_cost"),
                      "--interps", "0.5", "--lm-weights", "9.5", "--word-ins-penalty", "-0.629606", "--folds", "2",
                      "--skip-budget", "0.5", "--replications", "0", "--out", str(tmp_path / "tune")])
    assert tune.exit_code == 0, tune.output
    block = json.loads((tmp_path / "tune" / "tune.json").read_text())["selective"]
    assert "selective rescoring (WER budget 0.5)" in tune.output
    # brute force: every threshold, the 1-bests and errors by hand
    from nbest_rescore.api.inputs import load_references
    from nbest_rescore.evaluation.wer import nbest_errors
    from nbest_rescore.io.kaldi_nbest import read_kaldi_nbest_dir

    nbest = read_kaldi_nbest_dir(DATA / "ci")
    flat = nbest.flat()
    errors, offsets, words = nbest_errors(nbest, load_references(ref), flat)
    nn = np.array([float(line.split()[1]) for line in (tmp_path / "all" / "nn_cost").read_text().splitlines()])
    p = loop_posteriors(nbest, W)
    rescored = segment_argmax(flat_scores(flat, W, nn), offsets)
    first = segment_argmax(flat_scores(flat, Weights(lm_weight=9.5, interp=1.0, word_ins_penalty=-0.629606)),
                           offsets)
    sizes = np.diff(offsets)
    points = []
    for t in [math.inf] + sorted(set(p), reverse=True):
        chosen = np.where(p >= t, first, rescored)
        points.append((int(sizes[p < t].sum()), int(errors[chosen].sum()), t))
    ok = [q for q in points if q[1] * 100.0 <= points[0][1] * 100.0 + 0.5 * words + 1e-9]
    scored, errs, t = min(ok, key=lambda q: (q[0], q[1]))
    assert block["skip_confident"] == (None if math.isinf(t) else pytest.approx(t, rel=1e-9))
    assert block["fraction_scored"] == pytest.approx(scored / len(flat.hyps))
    assert block["wer"] == pytest.approx(100.0 * errs / words)
    assert len(block["cross_validation"]["per_fold_skip_confident"]) == 2
    assert block["skip_confident"] is not None  # (a budget of 0.5 skips some lists of ci)
    if True:  # score with that P: the tuned WER, fewer lists scored
        res = run(main, ["score", "--lm", str(tiny_lm), "--nbest", ci, "--ref", ref, "--out", str(tmp_path / "sel"),
                         "--interp", "0.5", "--word-ins-penalty", "-0.629606", "--skip-confident",
                         repr(block["skip_confident"]), "--no-progress"])
        assert res.exit_code == 0, res.output
        wer = json.loads((tmp_path / "sel" / "wer.json").read_text())
        assert wer["selective"]["hypotheses_scored"] == scored
        assert wer["wer"]["rescored"]["wer"] == pytest.approx(100.0 * errs / words)


def test_skip_budget_without_folds_is_one_line(DATA, tmp_path):
    ci = str(DATA / "ci")
    res = CliRunner().invoke(main, ["tune", "--nbest", ci, "--ref", f"{ci}/ref.txt", "--skip-budget", "0.1"])
    assert res.exit_code != 0 and "--skip-budget 0.1 needs --nn-cost" in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("value, expected", [("0", "--skip-confident"), ("1.5", "--skip-confident"),
                                             ("abc", "--skip-confident")])
def test_a_bad_threshold_is_one_line(DATA, tiny_lm, tmp_path, value, expected):
    res = CliRunner().invoke(main, ["score", "--lm", str(tiny_lm), "--nbest", str(DATA / "ci"), "--out",
                                    str(tmp_path / "o"), "--skip-confident", value])
    assert res.exit_code != 0 and expected in res.output and "Traceback" not in res.output
    assert not (tmp_path / "o").exists()


def test_a_negative_budget_is_one_line(DATA, tmp_path):
    ci = str(DATA / "ci")
    res = CliRunner().invoke(main, ["tune", "--nbest", ci, "--ref", f"{ci}/ref.txt", "--skip-budget", "-1",
                                    "--folds", "2"])
    assert res.exit_code != 0 and "--skip-budget" in res.output and "Traceback" not in res.output
