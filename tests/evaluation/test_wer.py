"""WER / oracle tests on the real ci N-best data, checked against an independent DP."""
from __future__ import annotations

import os

import numpy as np
import pytest

from nbest_rescore.errors import DataError
from nbest_rescore.evaluation.wer import (WerReport, compute_wer, hyp_errors, nbest_errors,
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
