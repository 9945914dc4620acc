"""HORNN specifics (thesis 002 chapter 5): each pooling against a naive per-step
reference, document starts, carried state, FOFE weights, gates, config errors."""
import pytest
import torch

from nbest_rescore.errors import DataError
from nbest_rescore.models import build_model
from nbest_rescore.corpus import run_segment

V = 30
CFG = {"embedding_dim": 8, "hidden_size": 6, "order": 3}


def make(pooling, seed=1, **kw):
    torch.manual_seed(seed)
    return build_model("hornn", {**CFG, "pooling": pooling, **kw}, V).eval()


def reference_hornn(m, tokens, resets=None):
    """Straightforward HORNN, one row and one step at a time, a Python loop over the
    delays n = 1..N and a Python list of past hidden states (002 eq. 5.3-5.7).

    Returns (h float [B, T, H], last N states float [B, N, H], most recent first)."""
    c = m.config
    hdim, order = c.hidden_size, c.order
    w, bias = m.w_in.weight, m.w_in.bias
    emb = m.embedding(tokens)
    rows, finals = [], []
    for b in range(tokens.shape[0]):
        past = [torch.zeros(hdim) for _ in range(order)]  # past[n - 1] = h_{t-n}
        out = []
        for t in range(tokens.shape[1]):
            if resets is not None and resets[b, t]:
                past = [torch.zeros(hdim) for _ in range(order)]
            x = emb[b, t]
            paths = [past[n - 1] @ m.w_rec[n - 1, :, :hdim] for n in range(1, order + 1)]  # W_n h_{t-n}
            if c.pooling == "none":
                fb = sum(paths)
            elif c.pooling == "max":
                fb = paths[0]
                for p in paths[1:]:
                    fb = torch.maximum(fb, p)
            elif c.pooling == "fofe":
                fb = sum(c.fofe_alpha ** n * paths[n - 1] for n in range(1, order + 1))
            else:
                fb = 0
                for n in range(1, order + 1):
                    rows_g = slice(n * hdim, (n + 1) * hdim)  # W^g_n in the joint projection
                    r = torch.sigmoid(w[rows_g] @ x + bias[rows_g] + past[n - 1] @ m.w_rec[n - 1, :, hdim:])
                    fb = fb + r * paths[n - 1]
            h = torch.tanh(w[:hdim] @ x + bias[:hdim] + fb)
            past = [h] + past[:-1]
            out.append(h)
        rows.append(torch.stack(out))
        finals.append(torch.stack(past))
    return torch.stack(rows), torch.stack(finals)


@pytest.mark.parametrize("pooling", ["none", "max", "fofe", "gated"])
def test_pooling_matches_reference_across_document_start_and_chunks(pooling):
    m = make(pooling)
    x = torch.randint(0, V, (2, 12))
    resets = torch.zeros(2, 12, dtype=torch.bool)
    resets[:, 0] = True
    resets[0, 4] = True  # row 0 starts a new document inside the first chunk
    resets[1, 9] = True  # row 1 inside the second chunk
    ref, ref_final = reference_hornn(m, x, resets)
    with torch.no_grad():
        st = m.init_state(2)
        f1, st, _ = run_segment(m, st, x[:, :7], resets[:, :7])
        f2, st, _ = run_segment(m, st, x[:, 7:], resets[:, 7:])
    assert torch.allclose(torch.cat([f1, f2], 1), ref, atol=1e-5)
    assert torch.allclose(st[0], ref_final, atol=1e-5)
    # without the resets the history carries on, so the outputs differ after them
    no_reset, _ = reference_hornn(m, x)
    assert not torch.allclose(no_reset[0, 4:], ref[0, 4:], atol=1e-3)


def test_fofe_weights_are_alpha_powers():
    """FOFE pooling = plain sum with W_n scaled by alpha^n (002 eq. 5.5)."""
    fofe = make("fofe", fofe_alpha=0.3)
    assert torch.allclose(fofe.fofe_weights, torch.tensor([0.3, 0.09, 0.027]))
    plain = make("none")
    plain.load_state_dict(fofe.state_dict())
    with torch.no_grad():
        plain.w_rec.mul_(torch.tensor([0.3, 0.09, 0.027]).view(3, 1, 1))
    x = torch.randint(0, V, (2, 9))
    a = fofe(x, fofe.init_state(2)).features
    b = plain(x, plain.init_state(2)).features
    assert torch.allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("gate_bias,equals", [(60.0, "none"), (-60.0, "feedforward")])
def test_saturated_gates_open_or_close_the_feedback_paths(gate_bias, equals):
    gated = make("gated")
    with torch.no_grad():
        gated.w_in.bias[CFG["hidden_size"]:] = gate_bias  # gate biases b^g_n
    x = torch.randint(0, V, (2, 8))
    out = gated(x, gated.init_state(2)).features
    if equals == "none":  # r_n = 1: the plain HORNN with the same W_in, W_n
        plain = make("none")
        with torch.no_grad():
            plain.embedding.weight.copy_(gated.embedding.weight)
            plain.w_in.weight.copy_(gated.w_in.weight[:CFG["hidden_size"]])
            plain.w_in.bias.copy_(gated.w_in.bias[:CFG["hidden_size"]])
            plain.w_rec.copy_(gated.w_rec[..., :CFG["hidden_size"]])
        expected = plain(x, plain.init_state(2)).features
    else:  # r_n = 0: no recurrence at all
        hdim = CFG["hidden_size"]
        expected = torch.tanh(gated.embedding(x) @ gated.w_in.weight[:hdim].T + gated.w_in.bias[:hdim])
    assert torch.allclose(out, expected, atol=1e-5)


def test_first_order_plain_hornn_is_an_elman_rnn():
    m = make("none", order=1)
    rnn = torch.nn.RNN(CFG["embedding_dim"], CFG["hidden_size"], batch_first=True)
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(m.w_in.weight)
        rnn.bias_ih_l0.copy_(m.w_in.bias)
        rnn.weight_hh_l0.copy_(m.w_rec[0].T)
        rnn.bias_hh_l0.zero_()
    x = torch.randint(0, V, (3, 7))
    y, _ = rnn(m.embedding(x))
    assert torch.allclose(m(x, m.init_state(3)).features, y, atol=1e-6)


def test_state_holds_last_n_hidden_states_most_recent_first():
    m = make("max")
    x = torch.randint(0, V, (2, 6))
    out = m(x, m.init_state(2))
    assert out.state[0].shape == (2, 3, CFG["hidden_size"])
    assert torch.equal(out.state[0], out.features[:, [5, 4, 3]])
    short = m(x[:, :2], m.init_state(2)).state[0]
    assert torch.equal(short[:, 2], torch.zeros(2, CFG["hidden_size"]))  # h_{-1} at a document start


@pytest.mark.parametrize("bad,match", [({"pooling": "mean"}, "pooling"), ({"order": 0}, "order"),
                                       ({"fofe_alpha": 1.0}, "fofe_alpha")])
def test_bad_config_raises_data_error(bad, match):
    with pytest.raises(DataError, match=match):
        build_model("hornn", {**CFG, **bad}, V)


def test_gated_parameter_count_matches_the_equations():
    e, h, n = CFG["embedding_dim"], CFG["hidden_size"], CFG["order"]
    counts = {p: make(p).num_parameters()["without_embeddings"] for p in ("none", "gated")}
    # W_in, b, N W_n (+ N W^g_n, b^g_n, U^g_n), decoder bias V
    assert counts["none"] == e * h + h + n * h * h + V
    assert counts["gated"] == counts["none"] + n * (e * h + h + h * h)
