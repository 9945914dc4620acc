"""WER / oracle tests on the real ci N-best data, checked against an independent DP."""
from __future__ import annotations

import os

import numpy as np
import pytest

from nbest_rescore.errors import DataError
from nbest_rescore.options import SearchOptions
from nbest_rescore.evaluation.kaldi_scoring import kaldi_wers
from nbest_rescore.evaluation.tune_data import tune_data
from nbest_rescore.evaluation.tuning import tune_grid
from nbest_rescore.evaluation.wer import (WerReport, check_references, compute_wer, hyp_errors, nbest_errors,
                                          oracle_choice)
from nbest_rescore.types import NbestList, NbestSet

def test_ci_loaded(ci):
    nbest, refs = ci
    assert len(nbest) == 60 and nbest.num_hyps() > 5000
    assert set(nbest.utt_ids) == set(refs)


def test_compute_wer_first_pass_matches_dp(ci, edit_distance):
    nbest, refs = ci
    first = {u.utt_id: u.hyps[0] for u in nbest.utterances}
    rep = compute_wer(refs, first)
    dp_errors = sum(edit_distance(refs[u], h) for u, h in first.items())
    ref_words = sum(len(refs[u]) for u in first)
    assert rep.errors == dp_errors
    assert rep.ref_words == ref_words and rep.num_utts == 60
    assert rep.substitutions + rep.deletions + rep.insertions == rep.errors
    assert rep.hits + rep.substitutions + rep.deletions == rep.ref_words
    assert rep.wer == pytest.approx(dp_errors / ref_words * 100)
    d = rep.to_dict()
    assert d["wer"] == rep.wer and d["errors"] == rep.errors
    assert 10.0 < rep.wer < 50.0


def test_empty_hypothesis_is_all_deletions(ci):
    nbest, refs = ci
    utts = nbest.utt_ids[:3]
    rep = compute_wer(refs, {utts[0]: ()})
    n0 = len(refs[utts[0]])
    assert (rep.errors, rep.deletions, rep.substitutions, rep.insertions, rep.hits) == (n0, n0, 0, 0, 0)
    assert rep.wer == pytest.approx(100.0)
    # mixed with non-empty hypotheses: the empty one adds exactly its reference length
    hyps = {utts[0]: (), utts[1]: refs[utts[1]], utts[2]: refs[utts[2]][1:]}
    rep = compute_wer(refs, hyps)
    assert rep.deletions == n0 + 1 and rep.errors == n0 + 1
    assert rep.ref_words == sum(len(refs[u]) for u in utts)
    # all empty
    rep = compute_wer(refs, {u: () for u in utts})
    assert rep.errors == rep.deletions == rep.ref_words
    assert hyp_errors(refs[utts[0]], [()])[0] == n0


def test_compute_wer_errors(ci):
    _, refs = ci
    u = next(iter(refs))
    with pytest.raises(DataError, match="no-such-utt"):
        compute_wer(refs, {u: refs[u], "no-such-utt": ("a",)})
    with pytest.raises(DataError, match="empty"):
        compute_wer({"x": ()}, {"x": ("a",)})
    with pytest.raises(ValueError):
        WerReport(errors=1, substitutions=1, deletions=0, insertions=0, hits=5,
                  ref_words=5, num_utts=1)


def test_hyp_errors_match_dp(ci, edit_distance):
    nbest, refs = ci
    for u in nbest.utterances[:4] + nbest.utterances[-1:]:
        got = hyp_errors(refs[u.utt_id], list(u.hyps))
        assert got.dtype == np.int64 and got.shape == (len(u),)
        want = [edit_distance(refs[u.utt_id], h) for h in u.hyps]
        assert got.tolist() == want


def test_hyp_errors_whole_tokens():
    # character-level distance would be 1; word-level it is one substitution per word
    assert hyp_errors(("ab", "c"), [("ab", "d"), ("abc",), ("ab", "c")]).tolist() == [1, 2, 0]


def test_nbest_errors_and_oracle(ci):
    nbest, refs = ci
    errors, offsets, ref_words = nbest_errors(nbest, refs)
    assert errors.dtype == np.int64 and offsets.dtype == np.int64
    assert offsets[0] == 0 and offsets[-1] == len(errors) == nbest.num_hyps()
    assert ref_words == sum(len(r) for r in refs.values())
    first_pass = compute_wer(refs, {u.utt_id: u.hyps[0] for u in nbest.utterances})
    choice = oracle_choice(nbest, refs)
    assert list(choice) == nbest.utt_ids
    for u in nbest.utterances:
        assert choice[u.utt_id] in u.hyps
    oracle = compute_wer(refs, choice)
    worst_errors = int(np.maximum.reduceat(errors, offsets[:-1]).sum())
    assert oracle.errors == int(np.minimum.reduceat(errors, offsets[:-1]).sum())
    assert oracle.wer <= first_pass.wer <= worst_errors / ref_words * 100
    assert oracle.wer < first_pass.wer  # 100-best lists do contain better hypotheses


def test_nbest_errors_missing_reference(ci):
    nbest, refs = ci
    partial = dict(refs)
    dropped = nbest.utt_ids[:2]
    for u in dropped:
        del partial[u]
    with pytest.raises(DataError, match=dropped[0]):
        nbest_errors(nbest, partial)


# --- empty references, scored as Kaldi's compute-wer scores them -----------------------

# Counted by hand: a: 1 insertion; b: empty reference, both words inserted (a sentence
# error, 0 reference words); c: empty hypothesis, 2 deletions; d: 1 substitution; e:
# empty reference and empty hypothesis, no error. 7 reference words, 6 errors, 4 of 5
# sentences wrong; real compute-wer prints exactly these three lines for these files.
HAND_REFS = {"a": ("x", "y", "z"), "b": (), "c": ("p", "q"), "d": ("m", "n"), "e": ()}
HAND_HYPS = {"a": ("x", "y", "z", "w"), "b": ("u", "v"), "c": (), "d": ("m", "k"), "e": ()}
HAND_LINES = ["%WER 85.71 [ 6 / 7, 3 ins, 2 del, 1 sub ]", "%SER 80.00 [ 4 / 5 ]",
              "Scored 5 sentences, 0 not present in hyp."]


def test_empty_references_counted_by_hand():
    rep = compute_wer(HAND_REFS, HAND_HYPS)
    assert (rep.insertions, rep.deletions, rep.substitutions, rep.errors) == (3, 2, 1, 6)
    assert (rep.ref_words, rep.hits, rep.num_utts) == (7, 4, 5)
    assert rep.wer == pytest.approx(600 / 7)
    [kw] = kaldi_wers(HAND_REFS, [HAND_HYPS])
    assert kw.report == rep and kw.sentence_errors == 4 and kw.lines() == HAND_LINES
    # a reference without hypothesis is "not present" (mode=present), a hypothesis
    # without reference is ignored
    partial = {**{u: HAND_HYPS[u] for u in "abcd"}, "zz": ("q",)}
    [kw] = kaldi_wers(HAND_REFS, [partial])
    assert kw.lines() == ["%WER 85.71 [ 6 / 7, 3 ins, 2 del, 1 sub ] [PARTIAL]", "%SER 100.00 [ 4 / 4 ]",
                          "Scored 4 sentences, 1 not present in hyp."]


def test_kaldi_splits_tied_alignments_as_compute_wer():
    # "a b" -> "b c": two substitutions, or delete a, keep b, insert c: 2 errors either
    # way; real compute-wer prints "1 ins, 1 del, 0 sub" (jiwer says 2 substitutions)
    rep = compute_wer({"u": ("a", "b")}, {"u": ("b", "c")})
    assert (rep.insertions, rep.deletions, rep.substitutions, rep.hits) == (1, 1, 0, 1)


def _hand_nbest():
    def lst(utt, hyps):
        n = len(hyps)
        return NbestList(utt, "d", tuple(f"{utt}-{i + 1}" for i in range(n)), tuple(hyps),
                         np.arange(n, dtype=float), np.zeros(n), np.zeros(n))

    return NbestSet((lst("a", [("x", "w"), ("x", "y", "z")]), lst("b", [("u", "v"), (), ("u",)])))


def test_empty_references_in_nbest_errors_oracle_and_tuning():
    nbest = _hand_nbest()
    refs = {"a": ("x", "y", "z"), "b": ()}
    check_references(nbest, refs)  # an empty reference is fine
    errors, offsets, ref_words = nbest_errors(nbest, refs)
    assert errors.tolist() == [2, 0, 2, 0, 1] and ref_words == 3  # empty reference: errors = words
    assert oracle_choice(nbest, refs) == {"a": ("x", "y", "z"), "b": ()}
    # the acoustic cost ranks hypothesis 1 first: 2 + 2 errors over 3 reference words
    res = tune_grid(tune_data(nbest, refs), SearchOptions(interps=[1.0], lm_weights=[0.0], word_ins_penalties=[0.0]))
    assert res.best.wer == pytest.approx(400 / 3)
    # only when every reference is empty is the WER undefined
    for call in (lambda: check_references(nbest, {"a": (), "b": ()}, "ref.txt"),
                 lambda: nbest_errors(nbest, {"a": (), "b": ()}),
                 lambda: compute_wer({"a": (), "b": ()}, {"a": ("x",), "b": ()})):
        with pytest.raises(DataError, match=r"empty \(0 reference words\).*undefined"):
            call()
