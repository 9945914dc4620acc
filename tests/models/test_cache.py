"""The neural continuous cache (``003`` 5.2, Grave et al. 2017) against a naive
per-step reference that keeps an explicit list of (h_i, w_{i+1}) pairs; then through
the CLI (``ppl`` and ``score``) against one-pass computations with :class:`CachedLM`."""
import json
import math

import pytest
import torch
from click.testing import CliRunner

from nbest_rescore.errors import DataError
from nbest_rescore.models import MODEL_REGISTRY, build_model, save_model
from nbest_rescore.models.base import align_slots, cat_states, expand_state, reset_state, select_state
from nbest_rescore.models.cache import CachedLM, with_cache
from nbest_rescore.vocab import Vocabulary

V = 40
# wrapped models: plain GRU, a tied LSTM whose features go through a projection, AMN
WRAPPED = {
    "gru": ("gru", {"embedding_dim": 12, "hidden_size": 10}),
    "lstm-tied": ("lstm", {"embedding_dim": 8, "hidden_size": 10, "num_layers": 2, "tie_weights": True}),
    "amn": ("amn", {"embedding_dim": 12, "hidden_size": 10, "num_memcells": 3}),
}


def inner(kind="gru"):
    torch.manual_seed(0)
    name, cfg = WRAPPED[kind]
    return build_model(name, cfg, V).eval()


def cached(kind="gru", size=4, theta=0.7, lam=0.3):
    return CachedLM(inner(kind), size, theta, lam)


def tokens(b, t, seed=1, high=8):
    """Word ids from a small part of the vocabulary, so that words repeat."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, (b, t), generator=g)


@torch.no_grad()
def naive_probs(model, seq, size, theta, lam):
    """float64 [T, V] next-word probabilities of one document read step by step from
    the document start, with the cache as a python list of (h_i, w_{i+1}) pairs."""
    state = model.init_state(1)
    pairs, prev_h, rows = [], None, []
    for w in seq:
        if prev_h is not None:
            pairs.append((prev_h, w))  # (h_{t-1}, w_t) enters when w_t arrives
        out = model(torch.tensor([[w]]), state)
        state = out.state
        h = out.features[0, 0].double()
        p = torch.softmax(model.logits(out.features)[0, 0].double(), -1)
        window = pairs[-size:]
        if window:
            scores = [theta * float(h @ k) for k, _ in window]
            top = max(scores)
            z = sum(math.exp(s - top) for s in scores)
            p_cache = torch.zeros(V, dtype=torch.float64)
            for (_, wi), s in zip(window, scores):
                p_cache[wi] += math.exp(s - top) / z
            p = (1 - lam) * p + lam * p_cache
        rows.append(p)
        prev_h = h
    return torch.stack(rows)


@pytest.mark.parametrize("kind", sorted(WRAPPED))
@pytest.mark.parametrize("size", [1, 3, 50])
def test_mixture_matches_naive_reference_and_sums_to_one(kind, size):
    m = cached(kind, size, theta=0.7, lam=0.3)
    x = tokens(2, 14)
    with torch.no_grad():
        logp = m(x, m.init_state(2)).features
    assert logp.shape == (2, 14, V) and torch.isfinite(logp).all()
    assert torch.allclose(logp.exp().sum(-1), torch.ones(2, 14), atol=1e-5)
    for b in range(2):
        ref = naive_probs(m.model, x[b].tolist(), size, 0.7, 0.3)
        assert torch.allclose(logp[b].exp().double(), ref, atol=1e-5)
    # the cache changes the distribution (only the first position has no pair)
    with torch.no_grad():
        plain = torch.log_softmax(m.model.logits(m.model(x, m.model.init_state(2)).features), -1)
    assert torch.allclose(logp[:, 0], plain[:, 0], atol=1e-6)
    assert (logp[:, 1:] - plain[:, 1:]).abs().max() > 1e-3


@pytest.mark.parametrize("name", sorted(MODEL_REGISTRY))
def test_wraps_every_registered_model(name):
    from test_models import EXTRA, SMALL  # the generic model tests' tiny settings

    torch.manual_seed(0)
    m = CachedLM(build_model(name, {**SMALL, **EXTRA.get(name, {})}, V).eval(), 3, 0.7, 0.3)
    x = tokens(2, 12)
    st = m.init_state(2)
    with torch.no_grad():
        full, _ = m.log_probs(x[:, :-1], x[:, 1:], st)
        a, st1 = m.log_probs(x[:, :5], x[:, 1:6], st)
        b, _ = m.log_probs(x[:, 5:-1], x[:, 6:], st1)
    ref = naive_probs(m.model, x[1, :-1].tolist(), 3, 0.7, 0.3)
    assert torch.allclose(full[1].exp().double(), ref.gather(1, x[1, 1:, None]).squeeze(1), atol=1e-5)
    assert torch.allclose(full, torch.cat([a, b], 1), atol=1e-4)


def test_log_probs_through_logits_match_features():
    """The paths the scorer and the perplexity code take give the mixed log-probs."""
    m = cached()
    x = tokens(2, 9)
    with torch.no_grad():
        out = m(x[:, :-1], m.init_state(2))
        lp, _ = m.log_probs(x[:, :-1], x[:, 1:], m.init_state(2))
        again = torch.log_softmax(m.output.logits(out.features), -1)
    assert torch.allclose(lp, out.features.gather(-1, x[:, 1:, None]).squeeze(-1), atol=1e-6)
    assert torch.allclose(again, out.features, atol=1e-6)


@pytest.mark.parametrize("size", [4, 20])
def test_state_holds_exactly_the_last_m_pairs(size):
    m = cached(size=size)
    x = tokens(1, 10)
    with torch.no_grad():
        st = m(x, m.init_state(1)).state
        h = m.model(x, m.model.init_state(1)).features[0]
    keys, words, valid, prev, has_prev = st[-5:]
    real = [(h[i], int(x[0, i + 1])) for i in range(9)][-size:]  # (h_i, w_{i+1})
    n = len(real)
    assert int(valid.sum()) == n and bool(valid[0, -n:].all())
    assert torch.allclose(keys[0, -n:], torch.stack([k for k, _ in real]), atol=1e-6)
    assert words[0, -n:].tolist() == [w for _, w in real]
    assert torch.allclose(prev[0], h[-1], atol=1e-6) and bool(has_prev[0])


def test_lambda_zero_equals_wrapped_model():
    m = cached(lam=0.0)
    x = tokens(3, 12)
    with torch.no_grad():
        a, _ = m.log_probs(x[:, :-1], x[:, 1:], m.init_state(3))
        b, _ = m.model.log_probs(x[:, :-1], x[:, 1:], m.model.init_state(3))
    assert torch.allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("split", [1, 4, 13])
def test_carried_state_equals_one_pass(split):
    m = cached("lstm-tied", size=6)
    x = tokens(2, 21)
    st = m.init_state(2)
    with torch.no_grad():
        full, _ = m.log_probs(x[:, :-1], x[:, 1:], st)
        a, st1 = m.log_probs(x[:, :split], x[:, 1:split + 1], st)
        b, _ = m.log_probs(x[:, split:-1], x[:, split + 1:], st1)
    assert torch.allclose(full, torch.cat([a, b], 1), atol=1e-4)


def test_document_reset_empties_the_cache():
    from nbest_rescore.corpus import run_segment

    m = cached(size=5)
    x = tokens(2, 16)
    init = m.init_state(2)
    with torch.no_grad():
        st = m(x[:, :8], init).state
        r = reset_state(st, torch.tensor([True, False]), init)
        assert not bool(r[-3][0].any()) and not bool(r[-1][0]) and bool(r[-3][1].any())
        # a reset row reads the rest as a new document
        lp, _ = m.log_probs(x[:, 8:-1], x[:, 9:], r)
        fresh, _ = m.log_probs(x[:1, 8:-1], x[:1, 9:], m.init_state(1))
        assert torch.allclose(lp[0], fresh[0], atol=1e-5)
        # the training/perplexity streams reset exactly where a document starts
        reset = torch.zeros(2, 15, dtype=torch.bool)
        reset[0, 6] = True
        feats, _, _ = run_segment(m, m.init_state(2), x[:, :-1], reset)
        ref = naive_probs(m.model, x[0, 6:-1].tolist(), 5, 0.7, 0.3)
    assert torch.allclose(feats[0, 6:].exp().double(), ref, atol=1e-5)


def test_lengths_give_each_row_its_own_cache_and_padding_is_harmless():
    m = cached(size=4)
    x = tokens(3, 8, high=V)
    lengths = torch.tensor([8, 3, 5])
    st = m.init_state(3)
    nxt = tokens(3, 4, seed=2)
    with torch.no_grad():
        out = m(x, st, lengths)
        after, _ = m.log_probs(nxt[:, :-1], nxt[:, 1:], out.state)
        for b in range(3):
            n = int(lengths[b])
            alone = m(x[b:b + 1, :n], select_state(st, torch.tensor([b])))
            for s_b, s_alone in zip(out.state, alone.state):
                # the batch keeps as many slots as its longest row: the rest are empty (zeros) in front
                s_b, s_alone = align_slots((s_b[b:b + 1], s_alone))
                assert torch.allclose(s_b[0].float(), s_alone[0].float(), atol=1e-5)
            assert torch.allclose(out.features[b, :n], alone.features[0], atol=1e-5)
            # continuing from the padded row's state equals one pass without padding
            seq = torch.cat([x[b, :n], nxt[b]])[None]
            one, _ = m.log_probs(seq[:, :-1], seq[:, 1:], m.init_state(1))
            assert torch.allclose(after[b], one[0, n:], atol=1e-4)
    ex = expand_state(out.state, 2)
    assert all(torch.equal(e[3], s[1]) for e, s in zip(ex, out.state))


def test_cache_grows_to_m_slots_and_states_of_different_fill_mix_in_one_batch():
    m = cached(size=6)
    assert m.init_state(2)[-3].shape == (2, 0)  # no slot before the first input
    x = tokens(3, 12, high=V)
    with torch.no_grad():
        slots = []
        st = m.init_state(1)
        for t in range(9):
            st = m(x[:1, t:t + 1], st).state
            slots.append(st[-3].shape[1])
        assert slots == [1, 2, 3, 4, 5, 6, 6, 6, 6]
        # three rows that have read 2, 9 and 0 words, concatenated into one batch
        parts = [m(x[0:1, :2], m.init_state(1)).state, m(x[1:2, :9], m.init_state(1)).state, m.init_state(1)]
        batch = cat_states(parts)
        assert batch[-3].shape == (3, 6)
        nxt = tokens(3, 5, seed=3)
        together, _ = m.log_probs(nxt[:, :-1], nxt[:, 1:], batch)
        for b, part in enumerate(parts):
            alone, _ = m.log_probs(nxt[b:b + 1, :-1], nxt[b:b + 1, 1:], part)
            assert torch.allclose(together[b], alone[0], atol=1e-5)
        # a document reset to the (empty) initial state inside a filled batch
        r = reset_state(batch, torch.tensor([False, True, False]), m.init_state(3))
        fresh, _ = m.log_probs(nxt[1:2, :-1], nxt[1:2, 1:], m.init_state(1))
        again, _ = m.log_probs(nxt[:, :-1], nxt[:, 1:], r)
        assert torch.allclose(again[1], fresh[0], atol=1e-5)


def test_refuses_training_and_checkpoints_and_bad_settings(tmp_path):
    m = cached()
    with pytest.raises(DataError, match="cannot be trained"):
        m.train()
    vocab = Vocabulary(["</s>", "<unk>"] + [f"w{i}" for i in range(V - 2)])
    with pytest.raises(DataError, match="cannot be saved"):
        save_model(tmp_path / "c.pt", m, vocab)
    assert not (tmp_path / "c.pt").exists()
    for kw, msg in [({"size": 0}, "size"), ({"lam": 1.0}, "lambda"), ({"lam": -0.1}, "lambda"),
                    ({"theta": float("nan")}, "theta")]:
        with pytest.raises(DataError, match=msg):
            CachedLM(inner(), **kw)
    with pytest.raises(DataError, match="already"):
        CachedLM(m)
    assert m.name == "gru+cache" and not m.training
    assert m.num_parameters() == m.model.num_parameters()
    assert m.config_dict() == {"cache": {"size": 4, "theta": 0.7, "lam": 0.3}, "model": "gru",
                               "model_config": m.model.config_dict()}
    plain = inner()
    assert with_cache(plain, 0) is plain and isinstance(with_cache(plain, 3), CachedLM)


def test_max_batch_rows_counts_the_cache_state():
    m = cached(size=100)
    per_row = 100 * 10 * 4 + 100 * 8 + 100 + 10 * 4 + 1 + 1 * 10 * 4  # keys, words, valid, prev, flag, GRU h
    assert m.max_batch_rows(10 * per_row + 5) == 10
    assert m.max_batch_rows(1) == 1


# -- through the command line ---------------------------------------------------------------
def run(args):
    from nbest_rescore.cli import main

    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == 0, res.output + repr(res.exception)
    return res.output


def test_ppl_with_cache_equals_one_pass_per_document(tiny_lm, DATA):
    from nbest_rescore.io.lm_text import read_lm_text
    from nbest_rescore.models import load_model

    text = DATA / "lm" / "lm_valid.txt"
    rep = json.loads(run(["ppl", "--lm", tiny_lm, "--text", text, "--max-words", 1500, "--batch-size", 3,
                          "--cache-size", 50, "--cache-theta", 0.5, "--cache-lambda", 0.2, "--no-progress"]))
    assert rep["cache"] == {"size": 50, "theta": 0.5, "lambda": 0.2}
    model, vocab, _ = load_model(tiny_lm)
    m = CachedLM(model, 50, 0.5, 0.2)
    nll = plain_nll = 0.0
    n = 0
    for doc in read_lm_text(text, 1500):
        ids = [vocab.eos] + [i for s in doc for i in vocab.encode(s) + [vocab.eos]]
        x = torch.tensor(ids)[None]
        with torch.no_grad():
            lp, _ = m.log_probs(x[:, :-1], x[:, 1:], m.init_state(1))
            lp0, _ = model.log_probs(x[:, :-1], x[:, 1:], model.init_state(1))
        nll -= float(lp.double().sum())
        plain_nll -= float(lp0.double().sum())
        n += lp.numel()
    assert rep["tokens"] == n
    assert rep["perplexity"] == pytest.approx(math.exp(nll / n), rel=1e-4)
    assert abs(rep["perplexity"] - math.exp(plain_nll / n)) > 1e-2 * rep["perplexity"]


def test_score_with_cache_uses_first_pass_history(tiny_lm, DATA, ci_nbest, tmp_path):
    from nbest_rescore.models import load_model
    from nbest_rescore.rescoring.combine import Weights
    from nbest_rescore.api.score_job import first_pass_one_best

    out = run(["score", "--lm", tiny_lm, "--nbest", DATA / "ci", "--out", tmp_path, "--ref", DATA / "ci" / "ref.txt",
               "--cache-size", 100, "--cache-theta", 0.4, "--cache-lambda", 0.15, "--no-progress"])
    assert "neural cache: size 100, theta 0.4, lambda 0.15" in out
    assert json.loads((tmp_path / "wer.json").read_text())["cache"] == {"size": 100, "theta": 0.4, "lambda": 0.15}
    nn = dict(line.split() for line in open(tmp_path / "nn_cost"))
    model, vocab, _ = load_model(tiny_lm)
    m = CachedLM(model, 100, 0.4, 0.15)
    fp = first_pass_one_best(ci_nbest, Weights(1.0, 9.5, 0.5, -0.629606))
    utts = ci_nbest.utterances
    checked = 0
    for doc in ci_nbest.documents()[:3]:
        hist = [vocab.eos]
        for u in doc[:4]:
            hyps = utts[u].hyps[:30]
            seqs = [hist + vocab.encode(h) + [vocab.eos] for h in hyps]
            t = max(len(s) for s in seqs)
            x = torch.tensor([s + [0] * (t - len(s)) for s in seqs])
            lengths = torch.tensor([len(s) - 1 for s in seqs])
            with torch.no_grad():  # one pass over history + hypothesis, from the document start
                lp, _ = m.log_probs(x[:, :-1], x[:, 1:], m.init_state(len(seqs)), lengths)
            for i, k in enumerate(utts[u].keys[:30]):
                cost = -float(lp[i, len(hist) - 1:int(lengths[i])].double().sum())
                assert float(nn[k]) == pytest.approx(cost, abs=2e-4)
                checked += 1
            hist = hist + vocab.encode(fp[utts[u].utt_id]) + [vocab.eos]
    assert checked > 300
