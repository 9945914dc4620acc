"""Rescoring with a backward LM on the real ci lists: each utterance is conditioned on
the 1-best of the FOLLOWING utterances of its document, hypotheses are read reversed,
and the costs equal those of a forward model with the same weights on hand-reversed
lists and histories, in every scoring mode and history policy."""
import dataclasses
from collections import Counter

import numpy as np
import pytest
import torch

from nbest_rescore.models import build_model
from nbest_rescore.rescoring.backward import reverse_nbest
from nbest_rescore.rescoring.combine import Weights
from nbest_rescore.rescoring.history import rescore
from nbest_rescore.rescoring.scorer import NnScorer
from nbest_rescore.types import NbestList, NbestSet
from nbest_rescore.vocab import Vocabulary

from tiny_models import SMALL  # noqa: E402  (tests/ is on sys.path, see conftest.py)
from test_prefix_tree import one_pass_cost  # the same independent reference

# lambda = 1 reproduces the benchmark's first-pass rank 1 (tests/rescoring/test_rescoring.py)
FIRST_PASS = Weights(acoustic_scale=1.0, lm_weight=9.5, interp=1.0, word_ins_penalty=-0.629606)
MIXED = Weights(1.0, 9.5, 0.5, -0.629606)
N_HYPS = 8


@pytest.fixture(scope="module")
def lists(ci_nbest):
    """The first two documents of ci, each list cut to its first N_HYPS hypotheses."""
    docs = ci_nbest.documents()[:2]
    keep = [ci_nbest.utterances[u] for d in docs for u in d]
    cut = tuple(NbestList(u.utt_id, u.doc_id, u.keys[:N_HYPS], u.hyps[:N_HYPS], u.ac_cost[:N_HYPS],
                          u.lm_cost[:N_HYPS], u.graph_cost[:N_HYPS]) for u in keep)
    out = NbestSet(cut, ci_nbest.doc_source)
    assert [len(d) for d in out.documents()] == [len(d) for d in docs] and min(map(len, docs)) >= 5
    return out


@pytest.fixture(scope="module")
def twins(lists):
    """(backward GRU, forward GRU with the same weights, vocabulary)."""
    counts = Counter(w for u in lists.utterances for h in u.hyps for w in h)
    vocab = Vocabulary.from_counts(counts, max_size=len(counts) // 2)  # some <unk> too
    torch.manual_seed(3)
    bwd = build_model("gru", {**SMALL, "direction": "backward"}, len(vocab)).eval()
    with torch.no_grad():  # larger random weights than the initialisation: a longer memory
        for p in bwd.parameters():
            p.uniform_(-0.8, 0.8)
    fwd = build_model("gru", SMALL, len(vocab)).eval()
    fwd.load_state_dict(bwd.state_dict())
    return bwd, fwd, vocab


def _by_key(nbest, cost):
    return dict(zip(nbest.flat().keys, cost))


def _promote_other(nbest, u, vocab):
    """The set with another hypothesis of utterance u (the best-ranked one whose word
    ids differ from rank 1's) made the first-pass winner."""
    lst = nbest.utterances[u]
    j = next(j for j, h in enumerate(lst.hyps) if vocab.encode(h) != vocab.encode(lst.hyps[0]))
    ac = lst.ac_cost.copy()
    ac[j] = ac[0] - 1000.0
    utts = list(nbest.utterances)
    utts[u] = dataclasses.replace(lst, ac_cost=ac)
    return NbestSet(tuple(utts), nbest.doc_source)


def test_history_comes_from_the_following_utterances(lists, twins, one_thread):
    bwd, fwd, vocab = twins
    doc = lists.documents()[0]
    i = doc[2]

    def costs(model, nbest):
        res = rescore(nbest, NnScorer(model, vocab), FIRST_PASS, "first-pass")
        return [res.nn_cost[res.offsets[u]:res.offsets[u + 1]] for u in range(len(nbest))]

    base = costs(bwd, lists)
    nxt = costs(bwd, _promote_other(lists, doc[3], vocab))
    prv = costs(bwd, _promote_other(lists, doc[1], vocab))
    assert np.abs(nxt[i] - base[i]).max() > 1e-3  # utterance i+1's 1-best is in i's history
    np.testing.assert_array_equal(prv[i], base[i])  # utterance i-1's is not
    for u in doc[4:]:  # the utterances after i+1 do not see it either
        np.testing.assert_array_equal(nxt[u], base[u])
    # (the forward twin does the opposite)
    f_base, f_prv = costs(fwd, lists), costs(fwd, _promote_other(lists, doc[1], vocab))
    assert np.abs(f_prv[i] - f_base[i]).max() > 1e-3


@pytest.mark.parametrize("mode", ["tree", "padded", "single"])
def test_costs_equal_forward_model_on_hand_reversed_lists(lists, twins, mode, one_thread):
    bwd, fwd, vocab = twins
    res = rescore(lists, NnScorer(bwd, vocab, mode=mode, batch_size=5), FIRST_PASS, "first-pass")
    utts = lists.utterances
    for doc in lists.documents():
        for p, u in enumerate(doc):
            # FIRST_PASS picks rank 1: the history is the following utterances' rank 1,
            # the last one first, each reversed
            history = [tuple(reversed(utts[v].hyps[0])) for v in reversed(doc[p + 1:])]
            for j in (0, 1, N_HYPS - 1):
                ref = one_pass_cost(fwd, vocab, history, tuple(reversed(utts[u].hyps[j])))
                assert res.nn_cost[res.offsets[u] + j] == pytest.approx(ref, abs=1e-4)


def _hand_reversed(nbest):
    """Each document's utterances last first, every hypothesis word-reversed (written
    out without :func:`reverse_nbest`)."""
    out = []
    for doc in nbest.documents():
        for u in doc[::-1]:
            lst = nbest.utterances[u]
            out.append(NbestList(lst.utt_id, lst.doc_id, lst.keys, tuple(tuple(reversed(h)) for h in lst.hyps),
                                 lst.ac_cost, lst.lm_cost, lst.graph_cost))
    return NbestSet(tuple(out), nbest.doc_source)


@pytest.mark.parametrize("history", ["rescored", "interpolated", "none"])
def test_every_history_policy_equals_forward_on_reversed_set(lists, twins, history, one_thread):
    bwd, fwd, vocab = twins
    flat = lists.flat()
    ngram = flat.lm_cost * 1.1 + np.arange(len(flat.keys)) * 1e-3  # replaced n-gram costs, per key
    back = rescore(lists, NnScorer(bwd, vocab), MIXED, history, ngram_cost=ngram)
    rev = _hand_reversed(lists)
    rev_ngram = np.array([dict(zip(flat.keys, ngram))[k] for k in rev.flat().keys])
    ref = rescore(rev, NnScorer(fwd, vocab), MIXED, history, ngram_cost=rev_ngram)
    ref_cost = _by_key(rev, ref.nn_cost)
    np.testing.assert_allclose(back.nn_cost, [ref_cost[k] for k in flat.keys], rtol=0, atol=1e-9)
    assert back.one_best == {u: tuple(reversed(h)) for u, h in ref.one_best.items()}
    np.testing.assert_array_equal(back.offsets, flat.offsets)
    assert [flat.hyps[b] for b in back.best] == [back.one_best[u.utt_id] for u in lists.utterances]


def test_reverse_nbest_maps_back_to_the_original(ci_nbest):
    rev = reverse_nbest(ci_nbest)
    flat, rflat = ci_nbest.flat(), rev.nbest.flat()
    assert [flat.keys[i] for i in rev.flat_index] == list(rflat.keys)
    assert [flat.hyps[i] for i in rev.flat_index] == [tuple(reversed(h)) for h in rflat.hyps]
    assert [ci_nbest.utterances[i].utt_id for i in rev.utt_index] == rev.nbest.utt_ids
    assert [len(d) for d in rev.nbest.documents()] == [len(d) for d in ci_nbest.documents()]
    twice = reverse_nbest(rev.nbest).nbest
    assert twice.utt_ids == ci_nbest.utt_ids and twice.flat().hyps == flat.hyps
    np.testing.assert_array_equal(rev.to_original(rflat.ac_cost), flat.ac_cost)
