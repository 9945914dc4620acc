"""Scoring with several NN LMs (issue 20): each LM's costs are those of that LM scored
alone, the 1-best is the K-LM formula, outputs per LM, weight errors, merge."""
import json
import os
from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner

import nbest_rescore as nr
from nbest_rescore.api import ScoreJob
from nbest_rescore.api.inputs import read_weights_file
from nbest_rescore.api.lm_loading import lm_names
from nbest_rescore.api.shards import merge_scores
from nbest_rescore.cli import main
from nbest_rescore.errors import DataError
from nbest_rescore.io.output_checks import RUN_MARKER

AC, DELTA, W0, WIP = 1.0, 9.5, 0.4, -0.629606
NN = (0.35, 0.25)
WEIGHTS = {"acoustic_scale": AC, "lm_weight": DELTA, "interp": W0, "word_ins_penalty": WIP}


def run(args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _checkpoint(nbest, path, family, seed):
    """A random model of tests/tiny_models.py's size over the 300 most frequent list words."""
    import torch
    from tiny_models import EXTRA, SMALL

    from nbest_rescore.models import build_model, save_model
    from nbest_rescore.vocab import Vocabulary

    counts = Counter(w for u in nbest.utterances for h in u.hyps for w in h)
    vocab = Vocabulary(["</s>", "<unk>"] + sorted(w for w, _ in counts.most_common(300)))
    torch.manual_seed(seed)
    model = build_model(family, {**SMALL, **EXTRA.get(family, {})}, len(vocab)).eval()
    save_model(path, model, vocab, {"note": "random, for tests"})
    return path


@pytest.fixture(scope="module")
def lms(ci_nbest, tmp_path_factory):
    d = tmp_path_factory.mktemp("lms")
    return _checkpoint(ci_nbest, d / "gru.pt", "gru", 0), _checkpoint(ci_nbest, d / "lstm.pt", "lstm", 1)


@pytest.fixture(scope="module")
def scored(lms, DATA):
    """The two LMs scored together (LM 1 with the rescored history) and each alone."""
    import torch

    torch.set_num_threads(1)
    nbest, refs = nr.load_nbest(DATA / "ci"), nr.load_references(DATA / "ci" / "ref.txt")
    a, b = nr.load_lm(lms[0]), nr.load_lm(lms[1])
    multi = nr.score(nbest, [a, b], refs=refs, nn_weights=NN, history=("rescored", "first-pass"), **WEIGHTS)
    alone = (nr.score(nbest, a, history="rescored", **WEIGHTS), nr.score(nbest, b, refs=refs, **WEIGHTS))
    return nbest, multi, alone


def test_each_lm_costs_as_alone_and_the_1best_is_the_k_lm_formula(scored):
    nbest, multi, alone = scored
    assert multi.names == ("gru", "lstm") and multi.history == "rescored,first-pass"
    assert alone[1].names == ("lstm",) and list(alone[1].nn_costs_by_lm) == ["lstm"]
    for name, one in zip(multi.names, alone):
        assert np.allclose(multi.nn_costs_by_lm[name], one.nn_cost, atol=1e-5, rtol=0)
    ca, cb = (multi.nn_costs_by_lm[n] for n in multi.names)
    off, expected = 0, {}
    for u in nbest.utterances:  # the formula, by hand
        n = len(u.hyps)
        words = np.array([len(h) for h in u.hyps], dtype=np.float64)
        s = (-AC * u.ac_cost + DELTA * (W0 * -u.lm_cost + NN[0] * -ca[off:off + n] + NN[1] * -cb[off:off + n]
                                        - u.graph_cost) + WIP * words)
        expected[u.utt_id] = u.hyps[int(np.argmax(s))]
        off += n
    assert dict(multi.one_best) == expected
    assert any(multi.one_best[u] != one.one_best[u] for one in alone for u in expected)  # the mix matters
    assert np.allclose(multi.nn_cost, (NN[0] * ca + NN[1] * cb) / sum(NN))
    assert multi.wer["rescored"] == nr.compute_wer(nr.load_references(nbest.source + "/ref.txt"), expected)


def test_outputs_per_lm_and_one_lm_outputs_unchanged(scored, tmp_path):
    _, multi, alone = scored
    out = tmp_path / "multi"
    nr.write_score_outputs(multi, out)
    assert sorted(os.listdir(out)) == sorted([RUN_MARKER, "text", "nn_cost.gru", "nn_cost.lstm", "wer.json"])
    costs = [float(line.split()[1]) for line in open(out / "nn_cost.lstm")]
    assert np.allclose(costs, multi.nn_costs_by_lm["lstm"], atol=1e-6)
    marker = json.loads((out / RUN_MARKER).read_text())["settings"]
    assert [(m["name"], os.path.basename(m["lm"]), m["model"], m["history"], m["weight"]) for m in marker["lms"]] \
        == [("gru", "gru.pt", "gru", "rescored", 0.35), ("lstm", "lstm.pt", "lstm", "first-pass", 0.25)]
    assert marker["weights"]["interp"] == W0 and marker["weights"]["nn_weights"] == list(NN)
    assert "nn_cost.lstm" in multi.report(out) and "lstm: N-best words outside" in multi.report(out)
    one = tmp_path / "one"
    nr.write_score_outputs(alone[1], one)
    assert sorted(os.listdir(one)) == sorted([RUN_MARKER, "text", "nn_cost", "wer.json"])
    summary = json.loads((one / "wer.json").read_text())
    assert "lms" not in summary and "nn_weights" not in summary["weights"] and summary["history"] == "first-pass"
    assert summary["lm"].endswith("lstm.pt") and summary["model"] == "lstm"


def test_lm_names_and_the_weights_file(tmp_path):
    assert lm_names(["a/gru.pt", "b/gru.pt", "c/amn.pt", "gru.x.pt", "d/gru"]) == \
        ("gru", "gru_2", "amn", "gru.x", "gru_3")
    f = tmp_path / "tune.json"
    f.write_text(json.dumps({"best": {}, "weights": {"acoustic_scale": 1, "lm_weight": 10, "word_ins_penalty": -1,
                                                     "ngram": 0.5, "nn": {"lstm": 0.2, "gru": 0.3}}}))
    w, names = read_weights_file(f)
    assert names == ("lstm", "gru") and w.nn_weights == (0.2, 0.3) and (w.interp, w.lm_weight) == (0.5, 10)
    for bad, msg in (({"weights": {"ngram": 0.5}}, "missing acoustic_scale, lm_weight, word_ins_penalty, nn"),
                     ({"acoustic_scale": 1, "lm_weight": 10, "word_ins_penalty": 0, "ngram": 0.5,
                       "nn": {"gru": 0.6}}, "must sum to 1, they sum to 1.1"),
                     ({"acoustic_scale": 1, "lm_weight": "x", "word_ins_penalty": 0, "ngram": 0.5,
                       "nn": {"gru": 0.5}}, "'lm_weight' must be a finite number")):
        f.write_text(json.dumps(bad))
        with pytest.raises(DataError, match=f"--weights {f}: .*{msg}"):
            read_weights_file(f)


def test_weight_and_history_errors_come_before_any_lm_is_read(lms, DATA, tmp_path):
    broken = tmp_path / "broken.pt"
    broken.write_text("not a checkpoint")
    base = ["score", "--lm", lms[0], "--lm", broken, "--nbest", DATA / "ci", "--out", tmp_path / "o"]
    for extra, msg in ((["--nn-weights", "0.3,0.3"], "--interp 0.5 (the n-gram weight) and --nn-weights 0.3,0.3 "
                                                     "must sum to 1, they sum to 1.1; e.g. --nn-weights 0.25,0.25"),
                       (["--nn-weights", "0.5"], "--nn-weights 0.5: 1 weights for 2 --lm checkpoints"),
                       (["--nn-weights", "0.3,x"], "expected the weights of the --lm models, comma-separated"),
                       (["--nn-weights", "1.2,-0.7"], "--nn-weights must be a finite number in [0, 1], got 1.2"),
                       (["--history", "none"] * 3, "--history is given 3 times for 2 --lm checkpoints")):
        res = run(base + extra)
        assert res.exit_code == 2 and msg in res.output and "Traceback" not in res.output, res.output
    # a weights file naming other LMs: one error listing both sets of names
    f = tmp_path / "tune.json"
    f.write_text(json.dumps({"weights": {"acoustic_scale": 1, "lm_weight": 10, "word_ins_penalty": -1,
                                         "ngram": 0.5, "nn": {"gru": 0.3, "amn": 0.2}}}))
    res = run(base + ["--weights", f])
    assert res.exit_code == 1 and "has weights for the NN LMs gru, amn, but the --lm checkpoints are named " \
        "gru, broken" in res.output, res.output
    assert not (tmp_path / "o").exists()
    # the file's weights go to the --lm order, whatever the file's order
    f.write_text(json.dumps({"weights": {"acoustic_scale": 1, "lm_weight": 10, "word_ins_penalty": -1,
                                         "ngram": 0.5, "nn": {"broken": 0.2, "gru": 0.3}}}))
    job = ScoreJob(lm=(str(lms[0]), str(broken)), nbest=str(DATA / "ci"), weights_file=str(f), interp=0.9)
    assert job.weights().nn_weights == (0.3, 0.2) and job.weights().interp == 0.5
    with pytest.raises(DataError, match="--nn-weights 0.5: 1 weights for 2"):
        nr.score(nr.load_nbest(DATA / "ci"), [nr.load_lm(lms[0])] * 2, nn_weights=(0.5,))


def test_cli_on_shards_then_merge_per_lm_equals_one_run(scored, lms, DATA, tmp_path):
    _, multi, _ = scored
    shards = tmp_path / "split"
    assert run(["split", "--nj", 2, DATA / "ci", shards]).exit_code == 0
    jobs = []
    for i in (1, 2):
        jobs.append(tmp_path / f"job{i}")
        res = run(["score", "--lm", lms[0], "--lm", lms[1], "--nbest", shards / str(i), "--ref",
                   shards / str(i) / "ref.txt", "--out", jobs[-1], "--interp", W0, "--nn-weights", "0.35,0.25",
                   "--history", "rescored", "--history", "first-pass", "--word-ins-penalty", WIP, "--threads", 1,
                   "--no-progress"])
        assert res.exit_code == 0, res.output
        assert f"{jobs[-1]}/nn_cost.gru, {jobs[-1]}/nn_cost.lstm" in res.output
    merged = tmp_path / "merged"
    res = run(["merge", "--out", merged, "--ref", DATA / "ci" / "ref.txt", *jobs])
    assert res.exit_code == 0, res.output
    assert sorted(os.listdir(merged)) == sorted([RUN_MARKER, "text", "nn_cost.gru", "nn_cost.lstm", "wer.json"])
    for name in multi.names:
        nn = [line.split() for line in open(merged / f"nn_cost.{name}")]
        assert [k for k, _ in nn] == list(multi.keys)
        assert np.allclose([float(v) for _, v in nn], multi.nn_costs_by_lm[name], atol=1e-5, rtol=0)
    assert (merged / "text").read_text() == "".join(" ".join((u, *w)) + "\n" for u, w in multi.one_best.items())
    assert json.loads((merged / "wer.json").read_text())["wer"]["rescored"] == multi.wer["rescored"].to_dict()
    # a one-LM job is not merged with jobs of two LMs
    ScoreJob(lm=str(lms[0]), nbest=str(shards / "2"), out=str(tmp_path / "one"), threads=1).run()
    with pytest.raises(DataError, match=r"job1 has nn_cost.gru, nn_cost.lstm but .*one has nn_cost: the jobs were "
                                        r"scored with different --lm"):
        merge_scores([jobs[0], tmp_path / "one"], tmp_path / "m2")
    assert not (tmp_path / "m2").exists()


def test_one_lm_tune_then_score_at_the_tuned_weights(lms, DATA, tmp_path):
    """The most common path: score with one LM, tune on its nn_cost (tune names it 'nn'),
    then score again with --weights tune.json: the same checkpoint is accepted and its
    WER is the one tune found at its best point (independently: the tune's own search)."""
    first, tuned, again = tmp_path / "first", tmp_path / "tune", tmp_path / "again"
    ci = DATA / "ci"
    assert run(["score", "--lm", lms[0], "--nbest", ci, "--out", first]).exit_code == 0
    res = run(["tune", "--nbest", ci, "--ref", ci / "ref.txt", "--nn-cost", first / "nn_cost", "--out", tuned])
    assert res.exit_code == 0, res.output
    weights = json.loads((tuned / "tune.json").read_text())
    assert list(weights["weights"]["nn"]) == ["nn"]  # the lone cost file's name
    res = run(["score", "--lm", lms[0], "--nbest", ci, "--ref", ci / "ref.txt", "--weights", tuned / "tune.json",
               "--out", again])
    assert res.exit_code == 0, res.output
    wer = json.loads((again / "wer.json").read_text())["wer"]["rescored"]["wer"]
    assert wer == pytest.approx(weights["best"]["wer"], abs=1e-9)
