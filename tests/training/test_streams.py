"""Document streams: streams aligned to the BPTT length (every segment one model call)
give the same corpus loss as the per-piece computation and as scoring every document
alone; resets, masks, the seeded shuffle and document splitting checked directly."""
from collections import Counter

import numpy as np
import pytest
import torch

from nbest_rescore.io.references import read_references
from nbest_rescore.models import build_model
from nbest_rescore.corpus import encode_document, run_segment, segments, split_document
from nbest_rescore.vocab import Vocabulary
from stream_columns import make_streams  # noqa: E402  (tests/ is on sys.path, see conftest.py)

BPTT = 7


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ci_docs(DATA):
    """The ci references as documents of 10 sentences (the last one shorter when the
    count does not divide), encoded with a vocabulary of 200 words (others -> <unk>)."""
    refs = list(read_references(DATA / "ci" / "ref.txt").values())
    vocab = Vocabulary(["</s>", "<unk>"] + sorted({w for s in refs for w in s})[:200])
    docs = [refs[i:i + 10] for i in range(0, len(refs), 10)]
    return [encode_document(d, vocab) for d in docs], len(vocab)


def tiny(name, nv):
    torch.manual_seed(0)
    extra = {"amn": {"num_memcells": 3, "anneal_t0": 5.0}}.get(name, {})
    return build_model(name, {"embedding_dim": 12, "hidden_size": 10, **extra}, nv).eval()


def streams_logp(model, st, bptt, aligned):
    """(summed masked NLL, log-probs [B, L]) over the segments of ``st``, state carried
    between segments."""
    state = model.init_state(st.inputs.shape[0])
    total = torch.zeros((), dtype=torch.float64)
    parts = []
    for inp, tgt, mask, reset in segments(st, bptt):
        feats, state, _ = run_segment(model, state, inp, reset, aligned=aligned)
        lp = model.target_log_probs(feats, tgt)
        total -= (lp.double() * mask).sum()
        parts.append(lp)
    return float(total), torch.cat(parts, 1)


def docs_logp(model, enc):
    """Independent: every document alone from the initial state, one call each ->
    (summed NLL, {document tokens: log-probs})."""
    total, per_doc = 0.0, {}
    for d in enc:
        x = torch.from_numpy(d)
        lp, _ = model.log_probs(x[None, :-1], x[None, 1:], model.init_state(1))
        total -= float(lp.double().sum())
        per_doc[tuple(d.tolist())] = lp[0]
    return total, per_doc


def max_token_diff(st, logp, per_doc):
    """Largest |log-prob difference| between the streams' positions and the documents
    scored alone (each document found by its reset position and tokens)."""
    worst = 0.0
    for b in range(st.inputs.shape[0]):
        for p in torch.nonzero(st.reset[b]).flatten().tolist():
            for doc, ref in per_doc.items():
                n = len(doc) - 1
                if st.inputs[b, p:p + n].tolist() == list(doc[:-1]):
                    worst = max(worst, float((logp[b, p:p + n] - ref).abs().max()))
                    break
            else:
                raise AssertionError(f"no document at stream {b} column {p}")
    return worst


def documents_in(st):
    """The encoded documents read back from the streams: each starts at a reset and
    runs over the contiguous real positions from there."""
    out = []
    for b in range(st.inputs.shape[0]):
        for p in torch.nonzero(st.reset[b]).flatten().tolist():
            q = p
            while q < st.mask.shape[1] and st.mask[b, q] and (q == p or not st.reset[b, q]):
                q += 1
            out.append(tuple(st.inputs[b, p:q].tolist()) + (int(st.targets[b, q - 1]),))
    return out


@pytest.mark.parametrize("name", ["gru", "amn"])
def test_aligned_streams_give_the_per_piece_and_per_document_loss(ci_docs, name):
    enc, nv = ci_docs
    model = tiny(name, nv)
    aligned = make_streams(enc, 3, align=BPTT)
    packed = make_streams(enc, 3, align=1)
    assert aligned.align == BPTT and packed.align == 1
    with torch.no_grad():
        a, lp_a = streams_logp(model, aligned, BPTT, aligned=True)
        p, lp_p = streams_logp(model, packed, BPTT, aligned=False)
        alone, per_doc = docs_logp(model, enc)
        # the tightly packed streams have resets inside segments: reading them as one
        # call per segment carries the state across documents (what the checks catch)
        wrong, lp_w = streams_logp(model, packed, BPTT, aligned=True)
    assert a == pytest.approx(p, rel=1e-4)
    assert a == pytest.approx(alone, rel=1e-4)
    # position by position too (far tighter than the corpus sum)
    assert max_token_diff(aligned, lp_a, per_doc) < 1e-4
    assert max_token_diff(packed, lp_p, per_doc) < 1e-4
    assert max_token_diff(packed, lp_w, per_doc) > 1e-3
    assert wrong != pytest.approx(alone, rel=1e-6)


def test_documents_start_on_multiples_of_align_and_masks_count_tokens(ci_docs):
    enc, _ = ci_docs
    for align in (1, 5, BPTT, 64):
        st = make_streams(enc, 4, align=align)
        cols = torch.nonzero(st.reset)[:, 1]
        assert (cols % align == 0).all(), align
        assert int(st.reset.sum()) == len(enc)
        assert st.num_tokens == int(st.mask.sum()) == sum(len(e) - 1 for e in enc)
        assert st.inputs.shape[1] % align == 0 or align == 1
        assert sorted(documents_in(st)) == sorted(tuple(e.tolist()) for e in enc)
        # no reset on padding, and no real token without a document begun before it
        assert not (st.reset & ~st.mask).any()
        first_real = st.mask.float().argmax(1)
        assert all(bool(st.reset[b, first_real[b]]) for b in range(st.inputs.shape[0]))
    # the per-document token count equals the mask count of its positions
    st = make_streams(enc, 2, align=BPTT)
    per_doc = sorted(len(d) - 1 for d in documents_in(st))
    assert per_doc == sorted(len(e) - 1 for e in enc)


def pairs(st):
    return Counter(zip(st.inputs[st.mask].tolist(), st.targets[st.mask].tolist()))


def test_seeded_shuffle_is_deterministic_and_keeps_every_target_once(ci_docs):
    enc, _ = ci_docs
    plain = make_streams(enc, 3, align=BPTT)
    s5 = make_streams(enc, 3, align=BPTT, seed=5)
    again = make_streams(enc, 3, align=BPTT, seed=5)
    for x, y in zip((s5.inputs, s5.targets, s5.mask, s5.reset), (again.inputs, again.targets, again.mask, again.reset)):
        assert torch.equal(x, y)
    orders = {tuple(documents_in(make_streams(enc, 3, align=BPTT, seed=s))) for s in range(6)}
    assert len(orders) > 1, "every seed dealt the documents in the same order"
    for seed in (5, 6, 11):
        st = make_streams(enc, 3, align=BPTT, seed=seed)
        assert pairs(st) == pairs(plain)
        assert st.num_tokens == plain.num_tokens
        assert sorted(documents_in(st)) == sorted(tuple(e.tolist()) for e in enc)


def test_split_document_cuts_after_eos_and_keeps_every_target(ci_docs):
    enc, _ = ci_docs
    doc = np.concatenate([enc[0]] + [e[1:] for e in enc[1:]])  # one long document
    eos = int(doc[0])
    longest_sentence = max(np.diff(np.flatnonzero(doc == eos)))
    for max_tokens in (longest_sentence, 50, 120, len(doc) - 1):
        pieces = split_document(doc, max_tokens)
        assert np.array_equal(np.concatenate([p[1:] for p in pieces]), doc[1:])
        for i, p in enumerate(pieces):
            assert len(p) - 1 <= max_tokens
            assert p[0] == eos and p[-1] == eos  # a sentence boundary exists within every window
            if i + 1 < len(pieces):
                # the next sentence would not have fitted (the cut is the last possible one)
                nxt = pieces[i + 1]
                first_sentence = int(np.flatnonzero(nxt[1:] == eos)[0]) + 1
                assert len(p) - 1 + first_sentence > max_tokens
    assert len(split_document(doc, len(doc) - 1)) == 1
    # shorter than a sentence: cut inside sentences, still every target once, each piece small
    pieces = split_document(doc, 5)
    assert all(1 <= len(p) - 1 <= 5 for p in pieces)
    assert np.array_equal(np.concatenate([p[1:] for p in pieces]), doc[1:])


def test_make_streams_with_max_piece_keeps_all_targets(ci_docs):
    enc, _ = ci_docs
    plain = make_streams(enc, 3, align=BPTT)
    for max_piece in (30, 100):
        st = make_streams(enc, 3, align=BPTT, max_piece=max_piece)
        assert pairs(st) == pairs(plain)
        assert st.num_tokens == plain.num_tokens
        expected_pieces = sum(len(split_document(e, max_piece)) for e in enc)
        assert int(st.reset.sum()) == expected_pieces > len(enc)
        assert all(len(d) - 1 <= max_piece for d in documents_in(st))


def test_epoch_streams_are_balanced_on_the_training_text(DATA):
    """0.9M words of lm_train in 30 streams of BPTT 20 (the thesis's PTB regime): dealt in
    shuffled order to the shortest stream, one late long document left a single stream
    running alone for 1,289 of 2,837 updates (seed 1); widest first, no epoch ends with
    such a tail."""
    from nbest_rescore.io.lm_text import read_lm_text
    from nbest_rescore.training.passes import epoch_streams

    docs = read_lm_text(DATA / "lm" / "lm_train.txt", 900000)
    vocab = Vocabulary(["</s>", "<unk>"] + sorted({w for d in docs for s in d for w in s}))
    enc = [encode_document(d, vocab) for d in docs]
    total = sum(len(e) - 1 for e in enc)
    for seed in (1, 2, 3):
        st = epoch_streams(enc, 30, 20, seed)
        seg = st.segment_tokens(20)
        assert sum(seg) == total  # every target once
        thin = sum(1 for n in seg if n < 30 * 20 / 2)
        assert thin <= 0.01 * len(seg), (seed, thin, len(seg))
        assert len(seg) * 20 * 30 <= 1.06 * total  # at most 6% padding and tail


def test_balanced_dealing_keeps_the_shuffled_order_within_each_stream():
    from nbest_rescore.corpus import _deal_balanced

    widths = np.array([40, 20, 20, 60, 20, 40, 20, 20])
    order = [5, 2, 7, 0, 3, 1, 6, 4]
    rank = np.empty(8, dtype=np.int64)
    rank[order] = np.arange(8)
    lane = _deal_balanced(widths, 3, rank)
    assert np.bincount(lane, widths, minlength=3).tolist() == [80, 80, 80]
    # widest first, each to the currently shortest stream (the first of equal ones)
    assert lane.tolist() == [2, 0, 1, 0, 2, 1, 1, 2]
