"""Cross-validation of the weight search by documents (tune --folds), against a fold split
made here by the documented dealing rule, a search run on each hand-made complement and
the held-out 1-bests picked by a plain per-utterance argmax and scored by a plain edit
distance."""
from __future__ import annotations

import numpy as np
import pytest

from nbest_rescore.api import tune
from nbest_rescore.errors import DataError
from nbest_rescore.options import SearchOptions
from nbest_rescore.evaluation.folds import cross_validate, document_folds
from nbest_rescore.evaluation.tune_data import TuneData, tune_data
from nbest_rescore.evaluation.tuning import tune_grid, tune_line
from nbest_rescore.types import NbestSet

GRID = dict(interps=[0.0, 0.25, 0.5, 0.75, 1.0], lm_weights=[8.0, 10.0, 12.0], word_ins_penalties=[-0.629606])


def _noisy(nbest, seed, scale=0.9, sigma=2.0):
    rng = np.random.default_rng(seed)
    return {k: float(c * scale + e) for u in nbest.utterances
            for k, c, e in zip(u.keys, u.lm_cost, rng.normal(0.0, sigma, size=len(u)))}


def _hand_folds(nbest, k, seed):
    """document id -> fold, by the rule tune documents: documents in first-seen order,
    ``perm = default_rng(seed).permutation(D)``, document ``perm[i]`` in fold ``i % K``."""
    docs = list(dict.fromkeys(u.doc_id for u in nbest.utterances))
    perm = np.random.default_rng(seed).permutation(len(docs))
    return {docs[p]: i % k for i, p in enumerate(perm)}


def _check_against_hand_split(nbest, refs, nn, cv, k, seed, search, own_argmax, edit_distance):
    fold_of = _hand_folds(nbest, k, seed)
    errors = words = 0
    for f in range(k):
        train = NbestSet(tuple(u for u in nbest.utterances if fold_of[u.doc_id] != f))
        held = [u for u in nbest.utterances if fold_of[u.doc_id] == f]
        tuned = search(train)
        w = tuned.best_weights()
        e = sum(edit_distance(refs[u.utt_id], u.hyps[own_argmax(u, w, nn)]) for u in held)
        n = sum(len(refs[u.utt_id]) for u in held)
        got = cv.per_fold[f]
        assert (got.documents, got.utterances, got.ref_words, got.errors) == (
            sum(1 for d in fold_of.values() if d == f), len(held), n, e)
        assert got.tuned.best == tuned.best and got.to_dict()["weights"] == tuned.weights_block()
        assert got.to_dict()["wer"] == pytest.approx(e / n * 100, abs=1e-12)
        errors, words = errors + e, words + n
    assert cv.wer == pytest.approx(errors / words * 100, abs=1e-12)
    assert int(cv.utt_errors.sum()) == errors and cv.ref_words == words


def test_grid_folds_on_dev_equal_a_hand_made_split(dev, own_argmax, edit_distance):
    nbest, refs = dev
    nn = _noisy(nbest, 7)
    k, seed = 3, 11
    res = tune(nbest, refs, nn, **GRID, folds=k, fold_seed=seed, replications=0)
    cv = res.report.cross_validation
    assert (cv.folds, cv.seed, len(cv.per_fold)) == (k, seed, k)
    _check_against_hand_split(nbest, refs, nn, cv, k, seed, lambda d: tune_grid(tune_data(d, refs, nn), SearchOptions(**GRID)),
                             own_argmax,
                              edit_distance)
    d = res.to_dict()
    assert d["cross_validation"] == cv.to_dict() and d["cross_validation"]["wer"] == cv.wer
    assert d["utterance_errors"]["cross_validated"] == cv.utt_errors.tolist()
    assert res.best == tune_grid(tune_data(nbest, refs, nn), SearchOptions(**GRID)).best  # the dev-tuned search is unchanged


def test_line_search_folds_of_two_lms_equal_a_hand_made_split(ci, own_argmax, edit_distance):
    nbest, refs = ci
    nn = [_noisy(nbest, 1), _noisy(nbest, 2, 0.95, 1.5)]
    res = tune(nbest, refs, nn, search="line", restarts=1, seed=4, folds=2, fold_seed=5, replications=0)
    _check_against_hand_split(nbest, refs, nn, res.report.cross_validation, 2, 5,
                              lambda d: tune_line(tune_data(d, refs, nn), SearchOptions(restarts=1, seed=4)), own_argmax, edit_distance)


def test_dealing_rule_and_errors():
    got = document_folds(10, 3, seed=2)
    perm = np.random.default_rng(2).permutation(10)
    assert [got[p] for p in perm] == [i % 3 for i in range(10)]
    assert sorted(np.bincount(got)) == [3, 3, 4]
    with pytest.raises(DataError, match=r"--folds 9: the lists have only 8 documents.*between 2 and 8"):
        document_folds(8, 9)
    with pytest.raises(DataError, match="--folds 1"):
        document_folds(8, 1)


def test_more_folds_than_documents_is_one_data_error(ci):
    nbest, refs = ci
    data = tune_data(nbest, refs)
    n_docs = len({u.doc_id for u in nbest.utterances})
    with pytest.raises(DataError) as exc:
        cross_validate(data, lambda d: tune_grid(d, SearchOptions(interps=[1.0], lm_weights=[9.5])), n_docs + 1)
    assert "--folds" in str(exc.value) and f"{n_docs} documents" in str(exc.value) and "\n" not in str(exc.value)


def test_subset_equals_the_data_of_the_sub_lists(ci):
    nbest, refs = ci
    nn = _noisy(nbest, 3)
    data = tune_data(nbest, refs, nn)
    mask = np.arange(len(nbest)) % 3 != 1
    sub = data.subset(mask)
    want = tune_data(NbestSet(tuple(u for u, m in zip(nbest.utterances, mask) if m)), refs, nn)
    for name in ("offsets", "ac_cost", "lm_cost", "graph_cost", "num_words", "nn", "errors", "utt_ref_words"):
        a, b = getattr(sub, name), getattr(want, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert (sub.ref_words, sub.utt_ids, sub.names) == (want.ref_words, want.utt_ids, want.names)
    assert np.array_equal(sub.doc_index, data.doc_index[mask])  # the whole set's document numbers
    assert sub.ref_words == sum(len(refs[u]) for u in sub.utt_ids)
    with pytest.raises(ValueError, match="mask"):
        data.subset(np.zeros(len(nbest), dtype=bool))


def test_tune_data_documents_and_words(ci):
    nbest, refs = ci
    data = tune_data(nbest, refs)
    docs = list(dict.fromkeys(u.doc_id for u in nbest.utterances))
    assert data.doc_index.tolist() == [docs.index(u.doc_id) for u in nbest.utterances]
    assert data.utt_ref_words.tolist() == [len(refs[u.utt_id]) for u in nbest.utterances]
    assert data.utt_ids == tuple(nbest.utt_ids) and isinstance(data, TuneData)
    assert data.first_pass().tolist() == data.offsets[:-1].tolist()
