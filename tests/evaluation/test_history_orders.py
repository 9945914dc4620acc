"""``tune --order-cost K=PATH --order-budget B`` (the order of ``score --max-ngram-order``
chosen by folds) on the ci lists with the tiny trained GRU: the orders chosen and the
held-out WER against a brute-force loop over the folds, and ``score --weights tune.json``
scoring at the order tune.json records; the refusals in one line."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from nbest_rescore.cli import main
from nbest_rescore.evaluation.folds import document_folds
from nbest_rescore.rescoring.combine import Weights, flat_scores, segment_argmax

W = Weights(acoustic_scale=1.0, lm_weight=9.5, interp=0.5, word_ins_penalty=-0.629606)
FIXED = ["--interp", "0.5", "--word-ins-penalty", "-0.629606"]
ORDERS = (2, 3)


def costs_of(path):
    return np.array([float(line.split()[1]) for line in path.read_text().splitlines()])


@pytest.fixture(scope="module")
def scored(DATA, tiny_lm, tmp_path_factory):
    """The ci lists scored exactly and at each of ORDERS: (folder, {order or None: costs})."""
    tmp = tmp_path_factory.mktemp("orders")
    ci, ref = str(DATA / "ci"), str(DATA / "ci" / "ref.txt")
    costs = {}
    for order in (None, *ORDERS):
        out = tmp / f"k{order}"
        extra = [] if order is None else ["--max-ngram-order", str(order)]
        res = CliRunner().invoke(main, ["score", "--lm", str(tiny_lm), "--nbest", ci, "--ref", ref, "--out", str(out),
                                        *FIXED, "--no-progress", *extra])
        assert res.exit_code == 0, res.output
        costs[order] = costs_of(out / "nn_cost")
        positions = json.loads((out / "wer.json").read_text())["nn_lm_positions"]
        costs.setdefault("positions", []).append(positions)
    return tmp, costs


def tune(DATA, tmp, budget, out):
    ci, ref = str(DATA / "ci"), str(DATA / "ci" / "ref.txt")
    res = CliRunner().invoke(main, ["tune", "--nbest", ci, "--ref", ref, "--nn-cost", str(tmp / "kNone" / "nn_cost"),
                                    *[f"--order-cost={k}={tmp / f'k{k}' / 'nn_cost'}" for k in ORDERS],
                                    "--order-budget", str(budget), "--folds", "2", "--interps", "0.5",
                                    "--lm-weights", "9.5", "--word-ins-penalty", "-0.629606", "--replications", "0",
                                    "--out", str(out)])
    assert res.exit_code == 0, res.output
    return res.output, json.loads((out / "tune.json").read_text())["history_merging"]


@pytest.mark.parametrize("budget", [0.0, 0.5])
def test_tune_picks_the_order_a_brute_force_loop_picks(DATA, ci_nbest, scored, tmp_path, budget):
    tmp, costs = scored
    assert costs["positions"][1] < costs["positions"][2] < costs["positions"][0]  # K = 2, 3, exact
    output, block = tune(DATA, tmp, budget, tmp_path / "tune")
    from nbest_rescore.api.inputs import load_references
    from nbest_rescore.evaluation.wer import nbest_errors

    flat = ci_nbest.flat()
    errors, offsets, _ = nbest_errors(ci_nbest, load_references(DATA / "ci" / "ref.txt"), flat)
    utt_words = np.array([len(load_references(DATA / "ci" / "ref.txt")[u.utt_id]) for u in ci_nbest.utterances])
    utt_err = {k: errors[segment_argmax(flat_scores(flat, W, costs[k]), offsets)] for k in (None, *ORDERS)}
    docs = list(dict.fromkeys(u.doc_id for u in ci_nbest.utterances))
    fold = document_folds(len(docs), 2, 0)[[docs.index(u.doc_id) for u in ci_nbest.utterances]]
    held_errors, per_fold = 0, []
    for f in range(2):
        train, held = fold != f, fold == f
        limit = utt_err[None][train].sum() * 100.0 + budget * utt_words[train].sum() + 1e-9
        ok = [k for k in ORDERS if utt_err[k][train].sum() * 100.0 <= limit]
        k = ok[0] if ok else None
        per_fold.append(k)
        held_errors += utt_err[k][held].sum()
    assert block["cross_validation"]["per_fold_max_ngram_order"] == per_fold
    assert block["cross_validation"]["wer"] == pytest.approx(100.0 * held_errors / utt_words.sum())
    whole = [k for k in ORDERS if utt_err[k].sum() * 100.0 <= utt_err[None].sum() * 100.0 + budget * utt_words.sum()]
    assert block["max_ngram_order"] == (whole[0] if whole else None)
    for k in ORDERS:
        assert block["per_order"][str(k)]["wer"] == pytest.approx(100.0 * utt_err[k].sum() / utt_words.sum())
    assert block["wer_exact"] == pytest.approx(100.0 * utt_err[None].sum() / utt_words.sum())
    assert f"history merging (WER budget {budget:g})" in output
    if budget > 0:  # (ci: this budget merges in some fold, so the loop above is not trivial)
        assert any(k is not None for k in per_fold)


def test_score_weights_tune_json_scores_at_the_tuned_order(DATA, tiny_lm, scored, tmp_path):
    """A budget every order meets: tune.json records the smallest; score --weights
    tune.json scores with it (the costs of score --max-ngram-order 2, byte for byte),
    unless --max-ngram-order 0 asks for exact scoring; a bad order in the file is one line."""
    tmp, _ = scored
    _, block = tune(DATA, tmp, 100.0, tmp_path / "tune")
    assert block["max_ngram_order"] == 2 and block["cross_validation"]["per_fold_max_ngram_order"] == [2, 2]
    ci, ref = str(DATA / "ci"), str(DATA / "ci" / "ref.txt")
    res = CliRunner().invoke(main, ["score", "--lm", str(tiny_lm), "--nbest", ci, "--ref", ref, "--out",
                                    str(tmp_path / "s"), "--weights", str(tmp_path / "tune" / "tune.json"),
                                    "--no-progress"])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "s" / "wer.json").read_text())["scoring"]["max_ngram_order"] == 2
    assert (tmp_path / "s" / "nn_cost").read_bytes() == (tmp / "k2" / "nn_cost").read_bytes()
    # --max-ngram-order 0 (Kaldi's "no limit") overrides it: the exact costs
    res = CliRunner().invoke(main, ["score", "--lm", str(tiny_lm), "--nbest", ci, "--out", str(tmp_path / "e"),
                                    "--weights", str(tmp_path / "tune" / "tune.json"), "--max-ngram-order", "0",
                                    "--no-progress"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "e" / "nn_cost").read_bytes() == (tmp / "kNone" / "nn_cost").read_bytes()
    # a tune.json whose order is not an integer >= 2: one line naming the file and key, nothing written
    bad = json.loads((tmp_path / "tune" / "tune.json").read_text())
    bad["history_merging"]["max_ngram_order"] = 1
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    res = CliRunner().invoke(main, ["score", "--lm", str(tiny_lm), "--nbest", ci, "--out", str(tmp_path / "b"),
                                    "--weights", str(tmp_path / "bad.json"), "--no-progress"])
    assert res.exit_code != 0 and "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1
    assert f"--weights {tmp_path / 'bad.json'}: 'history_merging.max_ngram_order' must be an integer >= 2" in res.output
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("args,message", [
    (["--order-budget", "0.1"], "--order-budget 0.1 needs --order-cost K=PATH"),
    (["--order-cost", "x"], "--order-cost x: expected K=PATH"),
    (["--order-cost", "1=nn_cost"], "--order-cost 1=nn_cost: expected K=PATH"),
    (["--order-cost", "3=missing"], "--order-cost 3=missing: no such file"),
    (["--order-cost", "3=COST"], "--order-cost is read for --order-budget B"),
    (["--order-cost", "3=COST", "--order-budget", "0.1"], "needs --folds K >= 2"),
    (["--order-cost", "3=COST", "--order-cost", "3=COST", "--order-budget", "0.1"], "the order 3 is given twice"),
])
def test_bad_order_options_are_one_line(DATA, scored, args, message):
    tmp, _ = scored
    ci = str(DATA / "ci")
    cost = str(tmp / "kNone" / "nn_cost")
    args = [a.replace("COST", str(tmp / "k3" / "nn_cost")) for a in args]
    res = CliRunner().invoke(main, ["tune", "--nbest", ci, "--ref", f"{ci}/ref.txt", "--nn-cost", cost, *args])
    assert res.exit_code != 0 and message in res.output and "Traceback" not in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1
