"""Every registered model: shapes, finite log-probs, causality, carried state, padding,
checkpoint round trip and a loss that falls on the ci references."""
import math

import pytest
import torch

from nbest_rescore.models import MODEL_REGISTRY, build_model, load_model, save_model
from nbest_rescore.models.base import expand_state, reset_state, select_state
from nbest_rescore.vocab import Vocabulary

from tiny_models import EXTRA, SMALL  # noqa: E402  (tests/ is on sys.path, see conftest.py)

V = 40


def make(name, **kw):
    torch.manual_seed(0)
    cfg = {**SMALL, **EXTRA.get(name, {}), **kw}
    return build_model(name, cfg, V).eval()


@pytest.fixture(params=sorted(MODEL_REGISTRY))
def name(request):
    return request.param


def test_shapes_and_normalised(name):
    m = make(name)
    x = torch.randint(0, V, (3, 6))
    out = m(x, m.init_state(3))
    assert out.features.shape[:2] == (3, 6)
    logp = torch.log_softmax(m.logits(out.features), -1)
    assert torch.isfinite(logp).all()
    assert torch.allclose(logp.exp().sum(-1), torch.ones(3, 6), atol=1e-5)
    assert all(s.shape[0] == 3 for s in out.state)


def test_causality(name):
    m = make(name)
    x = torch.randint(0, V, (2, 9))
    y = x.clone()
    y[:, 5:] = torch.randint(0, V, (2, 4))
    st = m.init_state(2)
    lp_x, _ = m.log_probs(x[:, :-1], x[:, 1:], st)
    lp_y, _ = m.log_probs(y[:, :-1], y[:, 1:], st)
    assert torch.allclose(lp_x[:, :4], lp_y[:, :4], atol=1e-6)


def test_carried_state_equals_one_pass(name):
    m = make(name)
    x = torch.randint(0, V, (2, 15))
    st = m.init_state(2)
    full, _ = m.log_probs(x[:, :-1], x[:, 1:], st)
    a, st1 = m.log_probs(x[:, :6], x[:, 1:7], st)
    b, _ = m.log_probs(x[:, 6:-1], x[:, 7:], st1)
    assert torch.allclose(full, torch.cat([a, b], 1), atol=1e-4)


def test_lengths_give_state_at_own_length_and_padding_is_harmless(name):
    m = make(name)
    x = torch.randint(1, V, (3, 8))
    lengths = torch.tensor([8, 3, 5])
    st = m.init_state(3)
    out = m(x, st, lengths)
    lp_batch, _ = m.log_probs(x[:, :-1], x[:, 1:], st)
    for b in range(3):
        n = int(lengths[b])
        alone = m(x[b:b + 1, :n], select_state(st, torch.tensor([b])))
        for s_b, s_alone in zip(out.state, alone.state):
            assert torch.allclose(s_b[b], s_alone[0], atol=1e-5)
        lp_alone, _ = m.log_probs(x[b:b + 1, :n - 1], x[b:b + 1, 1:n], select_state(st, torch.tensor([b])))
        assert torch.allclose(lp_batch[b, :n - 1], lp_alone[0], atol=1e-5)


def test_state_helpers(name):
    m = make(name)
    st = m(torch.randint(0, V, (2, 4)), m.init_state(2)).state
    ex = expand_state(st, 3)
    assert all(e.shape[0] == 6 for e in ex)
    assert all(torch.equal(e[3], s[1]) for e, s in zip(ex, st))
    init = m.init_state(2)
    r = reset_state(st, torch.tensor([True, False]), init)
    assert all(torch.equal(a[0], i[0]) and torch.equal(a[1], s[1]) for a, s, i in zip(r, st, init))


def test_checkpoint_round_trip(name, tmp_path):
    m = make(name)
    vocab = Vocabulary(["</s>", "<unk>"] + [f"w{i}" for i in range(V - 2)])
    path = tmp_path / "m.pt"
    save_model(path, m, vocab, {"note": "test"})
    m2, vocab2, info = load_model(path)
    assert vocab2.words == vocab.words and info["note"] == "test" and m2.name == name
    x = torch.randint(0, V, (2, 7))
    a, _ = m.log_probs(x[:, :-1], x[:, 1:], m.init_state(2))
    b, _ = m2.log_probs(x[:, :-1], x[:, 1:], m2.init_state(2))
    assert torch.equal(a, b)


def test_training_steps_lower_loss_on_ci_text(name, DATA):
    from nbest_rescore.io.references import read_references
    from nbest_rescore.corpus import encode_document, run_segment, segments
    from stream_columns import make_streams

    refs = list(read_references(DATA / "ci" / "ref.txt").values())
    words = sorted({w for s in refs for w in s})[:200]
    vocab = Vocabulary(["</s>", "<unk>"] + words)
    torch.manual_seed(0)
    m = build_model(name, {**SMALL, **EXTRA.get(name, {})}, len(vocab)).train()
    streams = make_streams([encode_document(refs[i:i + 10], vocab) for i in range(0, 60, 10)], 3)
    opt = torch.optim.Adam(m.parameters(), lr=0.01)

    def epoch(update):
        st, tot, n = m.init_state(3), 0.0, 0
        for inp, tgt, mask, reset in segments(streams, 20):
            feats, st, aux = run_segment(m, tuple(s.detach() for s in st), inp, reset)
            ce = torch.nn.functional.cross_entropy(m.logits(feats)[mask], tgt[mask])
            if update:
                opt.zero_grad()
                (ce + (aux if aux is not None else 0)).backward()
                opt.step()
            tot += float(ce.detach()) * int(mask.sum())
            n += int(mask.sum())
        return tot / n

    before = epoch(False)
    for _ in range(3):
        epoch(True)
    m.eval()
    assert epoch(False) < before - 0.3


def test_unknown_model_lists_choices():
    from nbest_rescore.errors import DataError

    with pytest.raises(DataError, match="registered models: .*gru"):
        build_model("transformerxl", {}, 10)


def test_unknown_config_key_lists_valid():
    from nbest_rescore.errors import DataError

    with pytest.raises(DataError, match="hidden_size"):
        build_model("gru", {"hiden_size": 3}, 10)
