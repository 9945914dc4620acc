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
from nbest_rescore.rescoring.selective import Selection, first_pass_posteriors, outside_beam
from nbest_rescore.evaluation.selective import BEAM_MASSES

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
    # the run that scores everything: only the first-pass histories' costs are compared with it
    full = rescore(ci_nbest, scorer, W, history) if history == "first-pass" else None
    p = loop_posteriors(ci_nbest, W)
    threshold = float(np.median(p))
    part = rescore(ci_nbest, scorer, W, history, selection=Selection(skip_confident=threshold))
    flat = ci_nbest.flat()
    skipped = p >= threshold
    assert (part.scored == np.repeat(~skipped, [len(u) for u in ci_nbest.utterances])).all()
    assert 0 < skipped.sum() < len(p)
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


@pytest.fixture(scope="module")
def tuned(DATA, tiny_lm, tmp_path_factory):
    """score on ci (every hypothesis), then tune --skip-budget 0.5 --folds 2 on its costs:
    (folder, tune's output, tune.json's selective block, the lists, per-hypothesis
    errors, offsets, reference words, the NN costs read back)."""
    from nbest_rescore.api.inputs import load_references
    from nbest_rescore.evaluation.wer import nbest_errors
    from nbest_rescore.io.kaldi_nbest import read_kaldi_nbest_dir

    tmp_path = tmp_path_factory.mktemp("selective")
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
    nbest = read_kaldi_nbest_dir(DATA / "ci")
    errors, offsets, words = nbest_errors(nbest, load_references(ref), nbest.flat())
    nn = np.array([float(line.split()[1]) for line in (tmp_path / "all" / "nn_cost").read_text().splitlines()])
    return tmp_path, tune.output, block, nbest, errors, offsets, words, nn


def test_score_and_tune_on_the_command_line(DATA, tiny_lm, tuned):
    """score writes every list's costs and says how many it scored; tune --skip-budget
    picks the threshold that a brute-force loop over every posterior picks."""
    tmp_path, output, block, nbest, errors, offsets, words, nn = tuned
    ci, ref, run = str(DATA / "ci"), str(DATA / "ci" / "ref.txt"), CliRunner().invoke
    block = block["skip_confident"]
    assert "selective rescoring (WER budget 0.5)" in output
    flat = nbest.flat()
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
    # score with that P: the tuned WER, fewer lists scored
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


@pytest.mark.parametrize("option, value", [("--skip-confident", "0"), ("--skip-confident", "1.5"),
                                           ("--skip-confident", "abc"), ("--prune-mass", "1"), ("--prune-mass", "0")])
def test_a_bad_threshold_is_one_line(DATA, tiny_lm, tmp_path, option, value):
    expected = option
    res = CliRunner().invoke(main, ["score", "--lm", str(tiny_lm), "--nbest", str(DATA / "ci"), "--out",
                                    str(tmp_path / "o"), option, value])
    assert res.exit_code != 0 and expected in res.output and "Traceback" not in res.output
    assert not (tmp_path / "o").exists()


def test_a_negative_budget_is_one_line(DATA, tmp_path):
    ci = str(DATA / "ci")
    res = CliRunner().invoke(main, ["tune", "--nbest", ci, "--ref", f"{ci}/ref.txt", "--skip-budget", "-1",
                                    "--folds", "2"])
    assert res.exit_code != 0 and "--skip-budget" in res.output and "Traceback" not in res.output


def loop_beam(nbest, w: Weights, mass: float):
    """bool [H]: hypotheses outside each list's posterior beam, one list at a time
    (sorted() is stable: ties keep list order)."""
    out = []
    for u in nbest.utterances:
        s = [(-a - w.lm_weight * g + w.word_ins_penalty * len(h)) / w.lm_weight
             for a, g, h in zip(u.ac_cost, u.lm_cost, u.hyps)]
        z = sum(math.exp(x - max(s)) for x in s)
        post = [math.exp(x - max(s)) / z for x in s]
        inside, before = [False] * len(s), 0.0
        for i in sorted(range(len(s)), key=lambda i: -post[i]):
            inside[i] = before < 1.0 - mass
            before += post[i]
        out += [not x for x in inside]
    return np.array(out)


@pytest.mark.parametrize("mass", [0.01, 0.1])
def test_the_beam_equals_a_plain_loop(ci_nbest, mass):
    got = outside_beam(ci_nbest.flat(), W, mass)
    assert (got == loop_beam(ci_nbest, W, mass)).all()
    assert 0 < got.mean() < 0.95


def test_pruned_hypotheses_get_the_shifted_ngram_cost(ci_nbest, tiny_lm):
    """--prune-mass: the beam's costs are those of a run that scores everything (same
    first-pass histories); each pruned hypothesis gets its n-gram cost plus the mean
    (NN - n-gram) difference of its list's scored hypotheses, computed here by hand."""
    model, vocab, _ = load_model(tiny_lm)
    scorer = NnScorer(model, vocab)
    full = rescore(ci_nbest, scorer, W)
    part = rescore(ci_nbest, scorer, W, selection=Selection(prune_mass=0.05))
    flat = ci_nbest.flat()
    pruned = loop_beam(ci_nbest, W, 0.05)
    assert (part.scored == ~pruned).all() and 0.2 < pruned.mean() < 0.95
    for u in range(len(ci_nbest)):
        a, b = flat.offsets[u], flat.offsets[u + 1]
        kept = [i for i in range(a, b) if not pruned[i]]
        shift = sum(full.nn_cost[i] - flat.lm_cost[i] for i in kept) / len(kept)
        for i in range(a, b):
            want = full.nn_cost[i] if not pruned[i] else flat.lm_cost[i] + shift
            assert part.nn_cost[i] == pytest.approx(want, abs=1e-3)


def test_tune_picks_the_beam_a_brute_force_loop_picks(DATA, tiny_lm, tuned):
    tmp_path, output, block, nbest, errors, offsets, words, nn = tuned
    ci, ref, run = str(DATA / "ci"), str(DATA / "ci" / "ref.txt"), CliRunner().invoke
    block = block["prune_mass"]
    flat = nbest.flat()
    points = []
    for m in (0.0, *BEAM_MASSES):
        pruned = loop_beam(nbest, W, m) if m > 0 else np.zeros(len(nn), dtype=bool)
        filled = nn.copy()
        for u in range(len(nbest)):
            a, b = offsets[u], offsets[u + 1]
            kept = [i for i in range(a, b) if not pruned[i]]
            shift = sum(nn[i] - flat.lm_cost[i] for i in kept) / len(kept)
            filled[a:b] = np.where(pruned[a:b], flat.lm_cost[a:b] + shift, nn[a:b])
        chosen = segment_argmax(flat_scores(flat, W, filled), offsets)
        points.append((int((~pruned).sum()), int(errors[chosen].sum()), m))
    ok = [q for q in points if q[1] * 100.0 <= points[0][1] * 100.0 + 0.5 * words + 1e-9]
    scored, errs, m = min(ok, key=lambda q: (q[0], q[1]))
    assert block["prune_mass"] == (None if m == 0 else pytest.approx(m))
    assert block["fraction_scored"] == pytest.approx(scored / len(flat.hyps))
    assert block["wer"] == pytest.approx(100.0 * errs / words)
    assert "--prune-mass" in output and block["prune_mass"] is not None
    res = run(main, ["score", "--lm", str(tiny_lm), "--nbest", ci, "--ref", ref, "--out", str(tmp_path / "beam"),
                     "--interp", "0.5", "--word-ins-penalty", "-0.629606", "--prune-mass", repr(block["prune_mass"]),
                     "--no-progress"])
    assert res.exit_code == 0, res.output
    wer = json.loads((tmp_path / "beam" / "wer.json").read_text())
    assert wer["selective"]["hypotheses_scored"] == scored and wer["selective"]["prune_mass"] == block["prune_mass"]
    assert wer["wer"]["rescored"]["wer"] == pytest.approx(100.0 * errs / words)
