"""Property tests (hypothesis) of the rescoring decision on the real ci lists:

a. whatever the weights and NN costs, the WER of the chosen 1-best is at least the
   oracle WER (and at least 0);
b. the chosen hypothesis is one of its utterance's, and ``segment_argmax`` picks in
   every segment the first index of its maximum;
c. a hypothesis costs the same scored alone and in a batch (``tree`` and ``padded``,
   any batch_size / max_tokens / max_segment).

Kept fast (a few dozen examples each, one torch thread); no example database is
written (``database=None``).
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nbest_rescore.evaluation.wer import compute_wer, nbest_errors, oracle_choice  # noqa: E402
from nbest_rescore.rescoring.combine import Weights, combine, segment_argmax  # noqa: E402

FAST = settings(max_examples=30, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
TOL = 1e-4  # nats

weights_st = st.builds(
    Weights, acoustic_scale=st.just(1.0),
    lm_weight=st.floats(0.0, 20.0, allow_nan=False, allow_infinity=False),
    interp=st.floats(0.0, 1.0, allow_nan=False, allow_infinity=False),
    word_ins_penalty=st.floats(-3.0, 3.0, allow_nan=False, allow_infinity=False))
seed_st = st.integers(0, 2**32 - 1)


@pytest.fixture(scope="module")
def refs(DATA):
    from nbest_rescore.io.references import read_references

    return read_references(DATA / "ci" / "ref.txt")


@pytest.fixture(scope="module")
def flat(ci_nbest):
    return ci_nbest.flat()


@pytest.fixture(scope="module")
def oracle(ci_nbest, refs, flat):
    """(oracle WER report, per-hypothesis errors [H])."""
    errors, offsets, _ = nbest_errors(ci_nbest, refs, flat)
    assert np.array_equal(offsets, flat.offsets)
    return compute_wer(refs, oracle_choice(ci_nbest, refs)), errors


def random_nn_cost(flat, seed: int) -> np.ndarray:
    """NN costs [H] from a seed: the n-gram costs rescaled and perturbed (sometimes
    much), so that the ranking really changes."""
    rng = np.random.default_rng(seed)
    scale = rng.uniform(0.3, 2.0)
    noise = rng.normal(0.0, rng.choice([0.1, 2.0, 20.0]), size=len(flat))
    return flat.lm_cost * scale + noise


def choose(flat, weights, nn):
    scores = combine(flat.ac_cost, flat.lm_cost, flat.num_words, weights, nn_cost=nn,
                     graph_cost=flat.graph_cost)
    return scores, segment_argmax(scores, flat.offsets)


def first_max(scores, offsets):
    """Independent per-segment argmax (loop), ties to the earliest index."""
    out = []
    for a, b in zip(offsets[:-1], offsets[1:]):
        seg = [float(x) for x in scores[a:b]]
        m = max(seg)
        out.append(int(a) + seg.index(m))
    return np.array(out, dtype=np.int64)


# -- a. oracle WER <= WER of any choice ------------------------------------------------

@FAST
@given(weights=weights_st, seed=seed_st)
def test_wer_of_any_choice_is_at_least_the_oracle(ci_nbest, refs, flat, oracle, weights, seed):
    oracle_rep, errors = oracle
    _, best = choose(flat, weights, random_nn_cost(flat, seed))
    chosen = {u.utt_id: flat.hyps[b] for u, b in zip(ci_nbest.utterances, best)}
    rep = compute_wer(refs, chosen)
    assert rep.wer >= 0.0 and rep.errors >= 0
    assert rep.ref_words == oracle_rep.ref_words
    assert rep.wer >= oracle_rep.wer
    # per utterance too: no list has a hypothesis better than its oracle
    oracle_err = np.minimum.reduceat(errors, flat.offsets[:-1])
    assert (errors[best] >= oracle_err).all()
    assert rep.errors == errors[best].sum()  # jiwer and the per-hypothesis counts agree


# -- b. the choice lies in its list and maximises the score -----------------------------

@FAST
@given(weights=weights_st, seed=seed_st)
def test_choice_is_in_its_list_and_maximises_the_score(ci_nbest, flat, weights, seed):
    scores, best = choose(flat, weights, random_nn_cost(flat, seed))
    off = flat.offsets
    assert best.shape == (len(ci_nbest),) and best.dtype == np.int64
    assert ((off[:-1] <= best) & (best < off[1:])).all()
    for u, b in zip(ci_nbest.utterances, best):
        assert flat.hyps[b] in u.hyps and flat.keys[b] in u.keys
    assert np.array_equal(best, first_max(scores, off))


@FAST
@given(seed=seed_st, levels=st.integers(1, 4))
def test_segment_argmax_ties_go_to_the_earliest_on_ci_offsets(flat, seed, levels):
    """Few distinct score values: most segments have tied maxima."""
    scores = np.random.default_rng(seed).integers(0, levels, size=len(flat)).astype(np.float64)
    assert np.array_equal(segment_argmax(scores, flat.offsets), first_max(scores, flat.offsets))


@FAST
@given(segs=st.lists(st.lists(st.integers(-2, 2), min_size=1, max_size=8), min_size=1, max_size=12))
def test_segment_argmax_on_drawn_segments(segs):
    """No data needed: any segmentation, small integer scores (ties)."""
    scores = np.array([x for s in segs for x in s], dtype=np.float64)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in segs])]).astype(np.int64)
    got = segment_argmax(scores, offsets)
    assert np.array_equal(got, first_max(scores, offsets))
    for (a, b), g in zip(zip(offsets[:-1], offsets[1:]), got):
        assert a <= g < b and scores[g] == scores[a:b].max() and (scores[a:g] < scores[g]).all()


# -- c. alone == in a batch ---------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_scoring(ci_nbest, flat):
    """A random small GRU (tests/tiny_models.py sizes) over the 300 most frequent ci
    words (the rest <unk>) and 3 start states that differ (each read another history)."""
    import torch
    from collections import Counter

    from tiny_models import SMALL

    from nbest_rescore.models import build_model
    from nbest_rescore.rescoring.scorer import NnScorer
    from nbest_rescore.vocab import Vocabulary

    counts = Counter(w for h in flat.hyps for w in h)
    vocab = Vocabulary(["</s>", "<unk>"] + sorted(w for w, _ in counts.most_common(300)))
    torch.manual_seed(0)
    model = build_model("gru", SMALL, len(vocab)).eval()
    states = NnScorer(model, vocab).advance(model.init_state(3),
                                            [u.hyps[0] for u in ci_nbest.utterances[:3]])
    return model, vocab, states


@FAST
@given(seed=seed_st, mode=st.sampled_from(["tree", "padded"]), batch_size=st.integers(1, 64),
       max_tokens=st.integers(1, 400), max_segment=st.integers(1, 4), n=st.integers(1, 40))
def test_costs_alone_equal_costs_in_a_batch(flat, tiny_scoring, one_thread, seed, mode, batch_size,
                                            max_tokens, max_segment, n):
    from nbest_rescore.rescoring.scorer import NnScorer

    model, vocab, states = tiny_scoring
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(flat), size=n)  # repeats allowed
    hyps = [flat.hyps[i] for i in idx]
    if rng.random() < 0.3:
        hyps[int(rng.integers(n))] = ()  # an empty hypothesis: only </s>
    rows = [int(r) for r in rng.integers(0, 3, size=n)]
    together = NnScorer(model, vocab, mode=mode, batch_size=batch_size, max_tokens=max_tokens,
                        max_segment=max_segment).costs(states, rows, hyps)
    alone_scorer = NnScorer(model, vocab, mode=mode)
    alone = np.array([alone_scorer.costs(states, [r], [h])[0] for r, h in zip(rows, hyps)])
    assert together.shape == (n,) and np.isfinite(together).all() and (together > 0).all()
    np.testing.assert_allclose(together, alone, rtol=0, atol=TOL)
