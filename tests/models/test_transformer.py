"""Transformer specifics: windowed attention against a naive reference over the
explicit token history, carried window across chunks and document starts, the
distance bias, no NaN on empty windows, config errors."""
import math

import pytest
import torch

from nbest_rescore.errors import DataError
from nbest_rescore.models import build_model
from nbest_rescore.models.transformer import alibi_bias
from nbest_rescore.corpus import run_segment

V = 30
CFG = {"embedding_dim": 8, "hidden_size": 12, "num_layers": 2, "num_heads": 3, "ff_dim": 20,
       "window": 4, "dropout": 0.0}


def make(seed=1, **kw):
    torch.manual_seed(seed)
    m = build_model("transformer", {**CFG, **kw}, V).eval()
    if m.config.position_bias == "learned":
        with torch.no_grad():
            m.distance_bias.add_(torch.randn_like(m.distance_bias))
    return m


def reference_transformer(m, tokens):
    """Features float [T, D] of one document's token history ``tokens`` int64 [T]:
    every layer recomputed over the whole history, position i attending, head by head,
    to the positions max(0, i - W + 1) .. i listed explicitly."""
    c = m.config
    d, nh, win = c.hidden_size, c.num_heads, c.window
    dh = d // nh

    def bias(head, dist):
        if c.position_bias == "learned":
            return m.distance_bias[head, dist]
        return -(2.0 ** (-8.0 * (head + 1) / nh)) * dist

    h = m.inp(m.embedding(tokens))
    t_len = tokens.shape[0]
    for blk in m.blocks:
        q, k, v = blk.qkv(blk.ln_att(h)).split(d, -1)
        att = torch.zeros(t_len, d)
        for i in range(t_len):
            js = list(range(max(0, i - win + 1), i + 1))
            for head in range(nh):
                sl = slice(head * dh, (head + 1) * dh)
                scores = torch.stack([q[i, sl] @ k[j, sl] / math.sqrt(dh) + bias(head, i - j) for j in js])
                p = torch.softmax(scores, 0)
                att[i, sl] = sum(p[a] * v[j, sl] for a, j in enumerate(js))
        h = h + blk.proj(att)
        h = h + blk.ff(blk.ln_ff(h))
    return m.ln_out(h)


@pytest.mark.parametrize("kw", [{}, {"position_bias": "learned"}, {"window": 1}, {"window": 64},
                                {"hidden_size": 8, "num_heads": 2, "num_layers": 1}])
def test_chunks_with_carried_window_equal_reference(kw):
    m = make(**kw)
    x = torch.randint(0, V, (2, 13))
    ref = torch.stack([reference_transformer(m, x[b]) for b in range(2)])
    with torch.no_grad():
        one = m(x, m.init_state(2)).features
        st, parts = m.init_state(2), []
        for a, b in ((0, 5), (5, 6), (6, 13)):  # a chunk shorter than the window, one of length 1
            out = m(x[:, a:b], st)
            parts.append(out.features)
            st = out.state
    assert torch.allclose(one, ref, atol=1e-5)
    assert torch.allclose(torch.cat(parts, 1), ref, atol=1e-5)


def test_document_start_empties_the_window():
    m = make()
    x = torch.randint(0, V, (2, 12))
    resets = torch.zeros(2, 12, dtype=torch.bool)
    resets[:, 0] = True
    resets[0, 3] = True
    resets[1, 8] = True
    with torch.no_grad():
        st = m.init_state(2)
        f1, st, _ = run_segment(m, st, x[:, :6], resets[:, :6])
        f2, st, _ = run_segment(m, st, x[:, 6:], resets[:, 6:])
    feats = torch.cat([f1, f2], 1)
    for b, start in ((0, 3), (1, 8)):
        assert torch.allclose(feats[b, :start], reference_transformer(m, x[b, :start]), atol=1e-5)
        assert torch.allclose(feats[b, start:], reference_transformer(m, x[b, start:]), atol=1e-5)


def test_window_bounds_what_a_position_sees():
    """One layer, W = 4: position i depends on tokens i-3 .. i only."""
    m = make(num_layers=1)
    x = torch.randint(0, V, (1, 10))
    base = m(x, m.init_state(1)).features[0, 9]
    far, near = x.clone(), x.clone()
    far[0, 5] = (x[0, 5] + 1) % V
    near[0, 6] = (x[0, 6] + 1) % V
    assert torch.allclose(m(far, m.init_state(1)).features[0, 9], base, atol=1e-6)
    assert not torch.allclose(m(near, m.init_state(1)).features[0, 9], base, atol=1e-4)


def test_state_is_the_last_positions_and_padding_never_enters_it():
    m = make()
    x = torch.randint(0, V, (3, 6))
    lengths = torch.tensor([6, 2, 4])
    state = m(x, m.init_state(3), lengths).state
    assert len(state) == 2 * 2 + 1  # keys and values of 2 layers, valid
    keys, valid = state[0], state[-1]
    assert all(s.shape == (3, 3, 12) for s in state[:-1]) and valid.shape == (3, 3)
    assert valid.tolist() == [[True] * 3, [False, True, True], [True] * 3]
    assert all(torch.equal(s[1, 0], torch.zeros(12)) for s in state[:-1])
    # the keys of layer 0 are those of the last inputs read
    d = m.config.hidden_size
    k0 = m.blocks[0].qkv(m.blocks[0].ln_att(m.inp(m.embedding(x))))[..., d:2 * d]
    assert torch.allclose(keys[2], k0[2, 1:4], atol=1e-6)
    assert torch.allclose(keys[1, 1:], k0[1, 0:2], atol=1e-6)


def test_empty_window_and_dropout_give_no_nan():
    m = make(dropout=0.5).train()
    x = torch.randint(0, V, (4, 1))
    out = m(x, m.init_state(4), torch.ones(4, dtype=torch.long))
    assert torch.isfinite(out.features).all() and all(torch.isfinite(s.float()).all() for s in out.state)


def test_alibi_slopes():
    assert torch.allclose(alibi_bias(8, 3)[:, 1], -torch.tensor([2.0 ** -k for k in range(1, 9)]))
    assert torch.allclose(alibi_bias(2, 3)[1], torch.tensor([0.0, -1 / 256, -2 / 256]))


@pytest.mark.parametrize("bad,match", [({"num_heads": 5}, "multiple of num_heads"),
                                       ({"window": 0}, "window"), ({"position_bias": "rope"}, "position_bias"),
                                       ({"dropout": 1.0}, "dropout")])
def test_bad_config_raises_data_error(bad, match):
    with pytest.raises(DataError, match=match):
        build_model("transformer", {**CFG, **bad}, V)
