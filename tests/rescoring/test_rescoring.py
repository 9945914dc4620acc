"""Rescoring on the real ci lists with a tiny trained GRU, checked against independent
computations: one pass over concatenated documents, single-hypothesis scoring, and the
benchmark's first-pass ranking."""
import numpy as np
import pytest
import torch

from nbest_rescore.models import load_model
from nbest_rescore.rescoring.combine import Weights, combine, segment_argmax
from nbest_rescore.rescoring.history import rescore
from nbest_rescore.rescoring.scorer import NnScorer
from nbest_rescore.types import NbestSet

FIRST_PASS = Weights(acoustic_scale=1.0, lm_weight=9.5, interp=1.0, word_ins_penalty=-0.629606)


@pytest.fixture(scope="module")
def model(tiny_lm):
    return load_model(tiny_lm)


@pytest.fixture(scope="module")
def ci_small(ci_nbest):
    """The first 12 utterances of ci (two documents), to keep slow checks fast."""
    return NbestSet(ci_nbest.utterances[:12], ci_nbest.doc_source)


def one_pass_cost(model, vocab, history, hyp):
    """Independent reference: read the document's history and the hypothesis as ONE
    sequence from the initial state; return the hypothesis' cost (words + </s>)."""
    ids = [vocab.eos]
    for h in history:
        ids += vocab.encode(h) + [vocab.eos]
    start = len(ids) - 1  # position whose prediction is the hypothesis' first word
    ids += vocab.encode(hyp) + [vocab.eos]
    x = torch.tensor(ids)[None]
    with torch.no_grad():
        lp, _ = model.log_probs(x[:, :-1], x[:, 1:], model.init_state(1))
    return -float(lp[0, start:].double().sum())


def test_lambda_one_reproduces_first_pass_rank_one(ci_nbest, model):
    m, vocab, _ = model
    res = rescore(ci_nbest, NnScorer(m, vocab), FIRST_PASS, "first-pass")
    assert (res.best == res.offsets[:-1]).all()  # rank 1 of every list
    for u in ci_nbest.utterances:
        assert res.one_best[u.utt_id] == u.hyps[0]


def test_carried_state_equals_concatenation(ci_small, model):
    m, vocab, _ = model
    w = Weights(1.0, 9.5, 0.5, -0.629606)
    for history in ("first-pass", "interpolated", "rescored"):
        res = rescore(ci_small, NnScorer(m, vocab, batch_size=37), w, history)
        flat = ci_small.flat()
        doc = ci_small.documents()[0][:4]
        chosen_hist = []
        for u in doc:
            a, b = res.offsets[u], res.offsets[u + 1]
            for j in (a, a + 1, b - 1):
                ref = one_pass_cost(m, vocab, chosen_hist, flat.hyps[j])
                assert abs(res.nn_cost[j] - ref) < 1e-4, (history, u, j)
            # the history the policy must have read
            choose = {"first-pass": Weights(1.0, 9.5, 1.0, -0.629606),
                      "rescored": Weights(1.0, 9.5, 0.0, -0.629606), "interpolated": w}[history]
            s = combine(flat.ac_cost[a:b], flat.lm_cost[a:b], flat.num_words[a:b], choose, res.nn_cost[a:b])
            chosen_hist.append(flat.hyps[a + int(np.argmax(s))])


def test_no_history_scores_each_hypothesis_alone(ci_nbest, model):
    m, vocab, _ = model
    res = rescore(ci_nbest, NnScorer(m, vocab), Weights(), "none")
    flat = ci_nbest.flat()
    for j in [0, 1, 99, 150, 2000, len(flat.hyps) - 1]:
        assert abs(res.nn_cost[j] - one_pass_cost(m, vocab, [], flat.hyps[j])) < 1e-4


def test_scores_do_not_depend_on_batch_size_or_padding(ci_nbest, model):
    m, vocab, _ = model
    few = NbestSet(ci_nbest.utterances[:3], ci_nbest.doc_source)
    big = rescore(few, NnScorer(m, vocab, batch_size=512), Weights(), "first-pass").nn_cost
    small = rescore(few, NnScorer(m, vocab, batch_size=1), Weights(), "first-pass").nn_cost
    tok = rescore(few, NnScorer(m, vocab, batch_size=512, max_tokens=64), Weights(), "first-pass").nn_cost
    assert np.abs(big - small).max() < 1e-4
    assert np.abs(big - tok).max() < 1e-4


def test_final_choice_is_argmax_of_combined_score(ci_nbest, model):
    m, vocab, _ = model
    w = Weights(1.0, 9.5, 0.6, -0.629606)
    res = rescore(ci_nbest, NnScorer(m, vocab), w, "first-pass")
    for i, u in enumerate(ci_nbest.utterances):
        a, b = res.offsets[i], res.offsets[i + 1]
        s = -u.ac_cost + 9.5 * (0.6 * -u.lm_cost + 0.4 * -res.nn_cost[a:b]) - 0.629606 * u.num_words
        assert res.best[i] == a + int(np.argmax(s))
        assert res.one_best[u.utt_id] in u.hyps


def test_empty_hypothesis_scores_only_end_of_sentence(model):
    m, vocab, _ = model
    sc = NnScorer(m, vocab)
    cost = sc.costs(sc.initial_state(1), [0, 0], [(), ("the",)])
    x = torch.tensor([[vocab.eos]])
    with torch.no_grad():
        lp, _ = m.log_probs(x, x, m.init_state(1))
    assert abs(cost[0] + float(lp[0, 0])) < 1e-5 and cost[1] > 0


def test_segment_argmax_ties_keep_first():
    s = np.array([1.0, 3.0, 3.0, 0.0, -1.0, -1.0])
    assert segment_argmax(s, np.array([0, 3, 4, 6])).tolist() == [1, 3, 4]


def test_combine_formula():
    w = Weights(0.5, 2.0, 0.25, -1.0)
    got = combine(np.array([10.0]), np.array([4.0]), np.array([3]), w, np.array([8.0]), np.array([1.0]))
    assert got[0] == pytest.approx(-5.0 + 2.0 * (0.25 * -4.0 + 0.75 * -8.0 - 1.0) - 3.0)
    with pytest.raises(ValueError):
        Weights(interp=1.5)
    with pytest.raises(ValueError):
        combine(np.array([1.0]), np.array([1.0]), np.array([1]), Weights(interp=0.5))


def test_an_overflowing_combined_score_names_its_hypothesis(ci_nbest):
    """A finite cost that overflows once weighted: a DataError naming the hypothesis key
    (no numpy warning: warnings are errors here), and the same scores as before else."""
    import warnings
    from dataclasses import replace

    from nbest_rescore.errors import DataError
    from nbest_rescore.rescoring.combine import flat_scores

    flat, w = ci_nbest.flat(), Weights(lm_weight=9.5, interp=1.0)
    before = flat_scores(flat, w)
    huge = flat.lm_cost.copy()
    huge[7] = 1.7e308
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DataError, match=f"^the combined score of hypothesis {flat.keys[7]} passes float64"):
            flat_scores(replace(flat, lm_cost=huge), w)
        np.testing.assert_array_equal(flat_scores(flat, w), before)


def test_ngram_arpa_costs_match_lists_lm_cost(DATA, ci_nbest):
    """kenlm on the benchmark trigram reproduces the lists' lm_cost (natural log)."""
    from nbest_rescore.rescoring.ngram import NgramScorer

    ng = NgramScorer(DATA / "lm" / "3gram.arpa.gz")
    u = ci_nbest.utterances[0]
    got = ng.costs(u.hyps[:20])
    assert np.abs(got - u.lm_cost[:20]).max() < 2e-3
