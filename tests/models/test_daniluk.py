"""Daniluk et al. (seed 001 section 2) models against a naive per-step reference: an
LSTMCell, an explicit Python list of previous outputs and a loop over the window."""
import pytest
import torch

from nbest_rescore.errors import DataError
from nbest_rescore.models import build_model
from nbest_rescore.models.base import reset_state, select_state

V, K = 30, 5
# (key, value, predict) piece of h_t for the attention models (001 eq. 1-4, 8-12, 16-17)
ROLES = {"attention": (0, 0, 0), "key-value": (0, 1, 1), "key-value-predict": (0, 1, 2)}
CASES = [("attention", {"window": 3}), ("key-value", {"window": 3}),
         ("key-value-predict", {"window": 4}), ("ngram-rnn", {"order": 4}),
         ("ngram-rnn", {"order": 2}), ("ngram-rnn", {"order": 5})]
IDS = [f"{n}-{list(c.values())[0]}" for n, c in CASES]


def make(name, cfg, seed=0):
    torch.manual_seed(seed)
    return build_model(name, {"embedding_dim": 6, "hidden_size": K, **cfg}, V).eval()


def pieces(h):
    return [h[i * K:(i + 1) * K] for i in range(h.shape[0] // K)]


@torch.no_grad()
def reference(m, name, tokens):
    """One stream from its start: tokens int64 [T] -> (features [T, K], attention
    weights [T, L] with index L-1 = h_{t-1}, list of all LSTM outputs)."""
    cell = torch.nn.LSTMCell(m.lstm.input_size, m.lstm.hidden_size)
    cell.weight_ih.copy_(m.lstm.weight_ih_l0)
    cell.weight_hh.copy_(m.lstm.weight_hh_l0)
    cell.bias_ih.copy_(m.lstm.bias_ih_l0)
    cell.bias_hh.copy_(m.lstm.bias_hh_l0)
    h = c = torch.zeros(1, m.lstm.hidden_size)
    history, feats, alphas = [], [], []
    for word in tokens:
        h, c = cell(m.embedding(word.view(1)), (h, c))
        p = pieces(h[0])
        if name == "ngram-rnn":
            # piece i (0-based) of h_{t-i}; zeros before the stream start
            parts = [p[0]] + [pieces(history[-i])[i] if i <= len(history) else torch.zeros(K)
                              for i in range(1, m.config.order - 1)]
            feats.append(torch.tanh(m.w_n.weight @ torch.cat(parts)))
        else:
            key, val, pred = ROLES[name]
            window = history[-m.config.window:]
            alpha = torch.zeros(m.config.window)
            r = torch.zeros(K)
            if window:
                scores = torch.stack([
                    m.w_score.weight[0] @ torch.tanh(m.w_y.weight @ pieces(y)[key] + m.w_h.weight @ p[key])
                    for y in window])
                a = torch.softmax(scores, 0)
                r = sum(a[j] * pieces(y)[val] for j, y in enumerate(window))
                alpha[m.config.window - len(window):] = a
            alphas.append(alpha)
            feats.append(torch.tanh(m.w_r.weight @ r + m.w_x.weight @ p[pred]))
        history.append(h[0])
    return torch.stack(feats), (torch.stack(alphas) if alphas else None), history


@pytest.mark.parametrize("name,cfg", CASES, ids=IDS)
def test_two_chunks_equal_reference_from_stream_start(name, cfg):
    m = make(name, cfg)
    m.record_attention = name != "ngram-rnn"
    x = torch.randint(0, V, (2, 11))
    with torch.no_grad():
        a = m(x[:, :4], m.init_state(2))
        b = m(x[:, 4:], a.state)
    feats = torch.cat([a.features, b.features], 1)
    for row in range(2):
        ref, ref_alpha, _ = reference(m, name, x[row])
        assert torch.allclose(feats[row], ref, atol=1e-5)
        if ref_alpha is not None:
            rec = torch.cat(m.recorded_attention, 1)[row]
            assert torch.allclose(rec, ref_alpha, atol=1e-5)
    if name == "ngram-rnn":
        assert m.recorded_attention == []


@pytest.mark.parametrize("name,cfg", CASES[:4], ids=IDS[:4])
def test_reset_starts_a_new_stream(name, cfg):
    """Row 0 starts a new document (init state) between the chunks, row 1 carries on."""
    m = make(name, cfg, seed=1)
    x = torch.randint(0, V, (2, 12))
    with torch.no_grad():
        st = m(x[:, :6], m.init_state(2)).state
        st = reset_state(st, torch.tensor([True, False]), m.init_state(2))
        out = m(x[:, 6:], st)
    assert torch.allclose(out.features[0], reference(m, name, x[0, 6:])[0], atol=1e-5)
    assert torch.allclose(out.features[1], reference(m, name, x[1])[0][6:], atol=1e-5)


@pytest.mark.parametrize("name,cfg", CASES, ids=IDS)
def test_padded_rows_keep_the_window_at_their_own_length(name, cfg):
    m = make(name, cfg, seed=2)
    x = torch.randint(0, V, (3, 7))
    lengths = torch.tensor([7, 2, 4])
    with torch.no_grad():
        _, _, memory, valid = m(x, m.init_state(3), lengths).state
    window, first = m.window, m.memory_parts.start * K
    for row in range(3):
        n = int(lengths[row])
        history = reference(m, name, x[row, :n])[2]
        expect_valid = torch.tensor([False] * max(window - n, 0) + [True] * min(window, n))
        assert torch.equal(valid[row], expect_valid)
        for j, y in enumerate(history[max(n - window, 0):]):
            pos = window - min(window, n) + j
            assert torch.allclose(memory[row, pos], y[first:first + m.memory_dim], atol=1e-5)
        assert torch.all(memory[row, :window - min(window, n)] == 0)


@pytest.mark.parametrize("name", ["attention", "key-value", "key-value-predict"])
def test_recorded_attention_sums_to_one_on_valid_positions(name):
    m = make(name, {"window": 4})
    assert m.record_attention is False
    x = torch.randint(0, V, (3, 9))
    with torch.no_grad():
        m(x, m.init_state(3))
        assert m.recorded_attention == []
        m.record_attention = True
        out = m(x, m.init_state(3))
    (alpha,) = m.recorded_attention
    assert alpha.shape == (3, 9, 4) and alpha.dtype == torch.float32
    assert torch.isfinite(out.features).all()
    assert torch.all(alpha[:, 0] == 0)  # no previous output at the stream start: r = 0
    for t in range(1, 9):
        n_valid = min(t, 4)
        assert torch.all(alpha[:, t, :4 - n_valid] == 0)
        assert torch.allclose(alpha[:, t].sum(-1), torch.ones(3), atol=1e-6)


@pytest.mark.parametrize("name,parts,window,mem_parts", [
    ("attention", 1, 10, 1), ("key-value", 2, 10, 2), ("key-value-predict", 3, 5, 2),
    ("ngram-rnn", 3, 2, 2)])
def test_split_sizes_and_defaults(name, parts, window, mem_parts):
    m = build_model(name, {"embedding_dim": 6, "hidden_size": 7}, V)
    assert m.lstm.hidden_size == parts * 7 and m.window == window
    h, c, memory, valid = m.init_state(2)
    assert h.shape == c.shape == (2, 1, parts * 7)
    assert memory.shape == (2, window, mem_parts * 7) and not valid.any()
    assert m(torch.randint(0, V, (2, 3)), m.init_state(2)).features.shape == (2, 3, 7)
    forget = m.lstm.bias_ih_l0[parts * 7:2 * parts * 7] + m.lstm.bias_hh_l0[parts * 7:2 * parts * 7]
    assert torch.all(forget == 1.0)


def test_gradients_finite_from_an_empty_window():
    for name, cfg in CASES[:4]:
        m = make(name, cfg).train()
        x = torch.randint(0, V, (2, 5))
        lp, _ = m.log_probs(x[:, :-1], x[:, 1:], m.init_state(2))
        lp.sum().backward()
        assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None), name


def test_select_state_rows_score_alone():
    m = make("key-value-predict", {"window": 3})
    x = torch.randint(0, V, (3, 6))
    with torch.no_grad():
        st = m(x, m.init_state(3)).state
        y = torch.randint(0, V, (3, 4))
        both = m(y, st).features
        alone = m(y[2:], select_state(st, torch.tensor([2]))).features
    assert torch.allclose(both[2:], alone, atol=1e-6)


@pytest.mark.parametrize("name,bad,match", [
    ("attention", {"window": 0}, "window"), ("key-value", {"hidden_size": 0}, "hidden_size"),
    ("ngram-rnn", {"order": 1}, "order"), ("ngram-rnn", {"window": 3}, "order")])
def test_bad_config_raises(name, bad, match):
    with pytest.raises(DataError, match=match):
        build_model(name, {"embedding_dim": 6, "hidden_size": 4, **bad}, V)


@pytest.mark.parametrize("name,cfg", CASES, ids=IDS)
def test_invalid_window_positions_are_ignored_whatever_they_hold(name, cfg):
    m = make(name, cfg, seed=3)
    x = torch.randint(0, V, (2, 5))
    h, c, memory, valid = m.init_state(2)
    noisy = (h, c, torch.randn_like(memory) * 5, valid)
    with torch.no_grad():
        assert torch.allclose(m(x, noisy).features, m(x, m.init_state(2)).features, atol=1e-6)
