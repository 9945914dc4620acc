"""The public API (nbest_rescore.api), checked against independent computations on
the ci lists: the 1-best is the argmax of the module formula over the returned NN
costs, costs without history equal one pass of the model, tuning equals a plain loop
with jiwer, and the README's example script runs."""
import subprocess
import sys
from pathlib import Path

import jiwer
import numpy as np
import pytest
import torch

import nbest_rescore as nr
from nbest_rescore.api import ScoreJob, TuneJob

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def setup(tiny_lm, DATA):
    nbest = nr.load_nbest(DATA / "ci")
    refs = nr.load_references(DATA / "ci" / "ref.txt")
    lm = nr.load_lm(tiny_lm)
    return nbest, refs, lm


def _wer(refs, chosen):
    keys = list(chosen)
    return 100 * jiwer.wer([" ".join(refs[k]) for k in keys], [" ".join(chosen[k]) or "<empty>" for k in keys])


def test_score_picks_the_argmax_of_the_formula(setup):
    nbest, refs, lm = setup
    res = nr.score(nbest, lm, refs=refs, lm_weight=10.0, interp=0.7, word_ins_penalty=-0.5, history="first-pass")
    costs = res.nn_costs()
    assert len(costs) == nbest.num_hyps() and np.all(np.isfinite(res.nn_cost))
    for u in nbest.utterances:
        s = [-a + 10.0 * (0.7 * -l + 0.3 * -costs[k]) - 0.5 * len(h)
             for k, h, a, l in zip(u.keys, u.hyps, u.ac_cost, u.lm_cost)]
        assert res.one_best[u.utt_id] == u.hyps[int(np.argmax(s))]
    assert res.wer["rescored"].wer == pytest.approx(_wer(refs, res.one_best), abs=1e-9)
    assert res.wer["oracle"].wer <= min(res.wer["rescored"].wer, res.wer["first_pass"].wer)


def test_costs_without_history_are_one_pass_of_the_model(setup):
    nbest, _, lm = setup
    res = nr.score(nbest, lm, history="none", scoring="padded")
    vocab, model = lm.vocab, lm.model
    flat = nbest.flat()
    for j in [0, 7, 250, 4111, len(flat) - 1]:
        ids = [vocab.eos] + vocab.encode(flat.hyps[j]) + [vocab.eos]
        x = torch.tensor(ids)[None]
        with torch.no_grad():
            lp, _ = model.log_probs(x[:, :-1], x[:, 1:], model.init_state(1))
        assert res.nn_cost[j] == pytest.approx(-float(lp.double().sum()), abs=1e-4)


def test_tune_equals_a_plain_loop(setup):
    nbest, refs, lm = setup
    res = nr.score(nbest, lm, history="none")
    costs = res.nn_costs()
    grid_i, grid_l = [0.5, 1.0], [8.0, 11.0]
    tuned = nr.tune(nbest, refs, costs, interps=grid_i, lm_weights=grid_l, word_ins_penalties=[-0.629606])
    loop = {}
    for lam in grid_i:
        for lw in grid_l:
            chosen = {}
            for u in nbest.utterances:
                s = [-a + lw * (lam * -l + (1 - lam) * -costs[k]) - 0.629606 * len(h)
                     for k, h, a, l in zip(u.keys, u.hyps, u.ac_cost, u.lm_cost)]
                chosen[u.utt_id] = u.hyps[int(np.argmax(s))]
            loop[(lam, lw)] = _wer(refs, chosen)
    for p in tuned.points:
        assert p.wer == pytest.approx(loop[(p.interp, p.lm_weight)], abs=1e-9)
    assert tuned.best.wer == pytest.approx(min(loop.values()), abs=1e-9)


def test_jobs_write_one_set_and_tune_reads_it(setup, tiny_lm, DATA, tmp_path):
    nbest, refs, lm = setup
    out = tmp_path / "score"
    res = ScoreJob(lm=str(tiny_lm), nbest=str(DATA / "ci"), ref=str(DATA / "ci" / "ref.txt"), out=str(out),
                   history="none").run()
    assert sorted(p.name for p in out.iterdir()) == [".nbest-rescore-run", "nn_cost", "text", "wer.json"]
    assert res.keys == () and res.nn_costs() == {}  # the job streams its costs to out/nn_cost
    direct = nr.score(nbest, lm, refs=refs, history="none")
    assert dict(res.one_best) == dict(direct.one_best) and res.wer == direct.wer
    stored = dict(line.split() for line in (out / "nn_cost").read_text().splitlines())
    assert list(stored) == list(direct.keys)
    assert all(abs(float(stored[k]) - v) < 1e-5 for k, v in direct.nn_costs().items())
    job = TuneJob(nbest=str(DATA / "ci"), ref=str(DATA / "ci" / "ref.txt"), nn_cost=str(out / "nn_cost"),
                  interps="0.5,1", lm_weights=[9.5], out=str(tmp_path / "tune"))
    tuned = job.run()
    by_hand = nr.tune(nbest, refs, direct.nn_costs(), interps=[0.5, 1.0], lm_weights=[9.5],
                      word_ins_penalties=[0.0])  # the default penalty
    assert [p.wer for p in tuned.points] == pytest.approx([p.wer for p in by_hand.points], abs=1e-9)
    import json

    assert "gru (tiny.pt)" in json.loads((tmp_path / "tune" / "tune.json").read_text())["title"]
    assert "history none" in json.loads((tmp_path / "tune" / "tune.json").read_text())["title"]


def test_jobs_check_options_before_reading(tmp_path):
    from nbest_rescore.errors import DataError

    with pytest.raises(DataError, match="--batch-size must be an integer >= 1, got 0"):
        ScoreJob(lm="never-read.pt", nbest="never-read", batch_size=0)
    with pytest.raises(DataError, match="--interp must be a finite number in \\[0, 1\\], got 1.5"):
        ScoreJob(lm="never-read.pt", nbest="never-read", interp=1.5)
    with pytest.raises(DataError, match="stop 0 is below start 1"):
        TuneJob(nbest="never-read", ref="never-read", lm_weights="1:0:0.1")


def test_perplexity_of_documents_equals_the_cli(setup, tiny_lm, DATA):
    from click.testing import CliRunner

    from nbest_rescore.cli import main
    from nbest_rescore.io.lm_text import read_lm_text

    _, _, lm = setup
    text = DATA / "lm" / "lm_valid.txt"
    rep = nr.perplexity(lm, read_lm_text(text, 800))
    cli = CliRunner().invoke(main, ["ppl", "--lm", str(tiny_lm), "--text", str(text), "--max-words", "800"])
    import json

    assert cli.exit_code == 0 and json.loads(cli.stdout)["perplexity"] == pytest.approx(rep.perplexity, rel=1e-9)
    assert "tok (" in cli.stderr and "ETA" in cli.stderr  # the progress lines (stderr is not a terminal)


def test_readme_example_script_runs(tiny_lm, DATA, tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "examples" / "python_api.py"), str(tiny_lm), str(DATA / "ci"),
                          str(tmp_path / "o")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "rescored   WER" in out.stdout and "tuned: WER" in out.stdout and "perplexity of the references" in out.stdout
    assert (tmp_path / "o" / "text").read_text().count("\n") == 60
