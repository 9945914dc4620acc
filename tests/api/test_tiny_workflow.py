"""score -> tune -> score --weights on the project's own tiny set with a random GRU (no
benchmark data needed), each output checked against a computation of its own: NN costs
by one plain forward per hypothesis, the 1-best and WER by hand, the tuned point by an
exhaustive loop over the same grid."""
import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from nbest_rescore.api.inputs import load_nbest
from nbest_rescore.cli import main
from nbest_rescore.models import load_model
from tiny_data import _errors
from tiny_models import random_checkpoint


def _run(*args):
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res


@pytest.fixture(scope="module")
def scored(tiny_set, tmp_path_factory):
    """The tiny lists, a random GRU over their words, and ``score --history none``."""
    folder, refs = tiny_set
    work = tmp_path_factory.mktemp("tiny-score")
    nbest = load_nbest(folder)
    lm = random_checkpoint(nbest, work / "gru.pt")
    _run("score", "--lm", lm, "--nbest", folder, "--ref", folder / "ref.txt", "--history", "none",
         "--lm-weight", "9.5", "--interp", "0.5", "--threads", "1", "--no-progress", "--out", work / "s")
    return nbest, refs, lm, work


def _cost(model, vocab, hyp):
    """-log P(hyp </s> | </s>), natural log, by one forward of the whole sentence."""
    ids = [vocab.eos] + vocab.encode(hyp) + [vocab.eos]
    x = torch.tensor(ids)[None]
    with torch.no_grad():
        lp, _ = model.log_probs(x[:, :-1], x[:, 1:], model.init_state(1))
    return -float(lp[0].double().sum())


def _read(path):
    return dict(line.split(" ", 1) for line in path.read_text().splitlines())


def _one_best(nbest, nn, lm_weight, interp, wip=0.0):
    return {u.utt_id: u.hyps[int(np.argmax([-a + lm_weight * -(interp * g + (1 - interp) * nn[k]) + wip * len(h)
                                            for k, h, a, g in zip(u.keys, u.hyps, u.ac_cost, u.lm_cost)]))]
            for u in nbest.utterances}


def _wer(one_best, refs):
    return 100.0 * sum(_errors(refs[u], h) for u, h in one_best.items()) / sum(len(r) for r in refs.values())


def test_score_costs_1best_and_wer(scored):
    nbest, refs, lm, work = scored
    model, vocab, _ = load_model(lm)
    nn = {k: float(v) for k, v in _read(work / "s" / "nn_cost").items()}
    for u in nbest.utterances:
        for k, h in zip(u.keys, u.hyps):
            assert nn[k] == pytest.approx(_cost(model, vocab, h), abs=2e-6)
    best = _one_best(nbest, nn, 9.5, 0.5)
    assert {u: tuple(w.split()) for u, w in _read(work / "s" / "text").items()} == best
    wer = json.loads((work / "s" / "wer.json").read_text())["wer"]["rescored"]["wer"]
    assert wer == pytest.approx(_wer(best, refs), abs=1e-9)


def test_tune_then_score_with_the_tuned_weights(scored, tiny_set):
    nbest, refs, lm, work = scored
    folder, _ = tiny_set
    _run("tune", "--nbest", folder, "--ref", folder / "ref.txt", "--nn-cost", work / "s" / "nn_cost",
         "--interps", "0:1:0.25", "--lm-weights", "6:12:2", "--replications", "0", "--out", work / "t")
    nn = {k: float(v) for k, v in _read(work / "s" / "nn_cost").items()}
    grid = [(_wer(_one_best(nbest, nn, d, i), refs), i, d) for i in (0, 0.25, 0.5, 0.75, 1) for d in (6, 8, 10, 12)]
    assert max(grid)[0] > min(grid)[0] + 1  # the tiny set tells the weights apart
    tuned = json.loads((work / "t" / "tune.json").read_text())
    assert tuned["best"]["wer"] == pytest.approx(min(grid)[0], abs=1e-9)
    best = tuned["best"]
    assert _wer(_one_best(nbest, nn, best["lm_weight"], best["interp"]), refs) == pytest.approx(best["wer"])
    # the one-LM path: the tuned weights apply to the same checkpoint on another run
    _run("score", "--lm", lm, "--nbest", folder, "--ref", folder / "ref.txt", "--history", "none",
         "--weights", work / "t" / "tune.json", "--threads", "1", "--no-progress", "--out", work / "s2")
    assert json.loads((work / "s2" / "wer.json").read_text())["wer"]["rescored"]["wer"] == \
        pytest.approx(best["wer"], abs=1e-9)
