"""Fast approximate scoring: target-only logits, self-normalised training (Chen et al.
2016, ``000`` section 3.5 ref. [45]), int8 dynamic quantisation and bfloat16 casts."""
import pytest
import torch

from nbest_rescore.config import OptimConfig
from nbest_rescore.errors import DataError
from nbest_rescore.models import build_model
from nbest_rescore.models.base import select_state
from nbest_rescore.models.quantize import cast_for_inference, quantize_dynamic_int8
from nbest_rescore.corpus import encode_document, segments
from stream_columns import make_streams  # noqa: E402  (tests/ is on sys.path, see conftest.py)
from nbest_rescore.training.step import segment_loss, train_step
from nbest_rescore.vocab import Vocabulary

V = 40
CONFIGS = [
    ("gru", {"embedding_dim": 12, "hidden_size": 10}),
    ("gru", {"embedding_dim": 12, "hidden_size": 10, "tie_weights": True}),  # tied + projection
    ("lstm", {"embedding_dim": 10, "hidden_size": 10, "tie_weights": True, "dropout_out": 0.3}),
    ("amn", {"embedding_dim": 12, "hidden_size": 6, "num_memcells": 3}),
]


@pytest.mark.parametrize("name,cfg", CONFIGS)
def test_target_logits_equal_gathered_full_logits(name, cfg):
    torch.manual_seed(0)
    m = build_model(name, cfg, V).double()
    x = torch.randint(0, V, (3, 7))
    tgt = torch.randint(0, V, (3, 7))
    feats = m(x, tuple(s.double() for s in m.init_state(3))).features
    for train in (False, True):  # in training mode both draw the same dropout mask
        m.train(train)
        torch.manual_seed(1)
        full = m.logits(feats).gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
        torch.manual_seed(1)
        only = m.output.target_logits(feats, tgt)
        assert only.shape == (3, 7)
        assert torch.allclose(only, full, rtol=0, atol=1e-12), (only - full).abs().max()


def test_self_normalized_log_probs_are_log_probs_plus_log_z():
    torch.manual_seed(0)
    m = build_model("gru", {"embedding_dim": 12, "hidden_size": 10}, V).eval()
    x = torch.randint(0, V, (2, 9))
    st = m.init_state(2)
    lp, st1 = m.log_probs(x[:, :-1], x[:, 1:], st)
    sn = m.output.target_logits(m(x[:, :-1], st).features, x[:, 1:])  # (what self-normalised scoring reads)
    log_z = torch.logsumexp(m.logits(m(x[:, :-1], st).features), -1)
    assert sn.dtype == torch.float32
    assert torch.allclose(sn, lp + log_z, atol=1e-5)


def ci_streams(DATA, words=200):
    from nbest_rescore.io.references import read_references

    refs = list(read_references(DATA / "ci" / "ref.txt").values())
    vocab = Vocabulary(["</s>", "<unk>"] + sorted({w for s in refs for w in s})[:words])
    return make_streams([encode_document(refs[i:i + 10], vocab) for i in range(0, 60, 10)], 3), len(vocab)


def train_tiny_gru(DATA, epochs=2, self_norm_weight=0.0):
    """A tiny GRU trained with the trainer's own step on the ci reference text."""
    streams, nv = ci_streams(DATA)
    torch.manual_seed(0)
    m = build_model("gru", {"embedding_dim": 16, "hidden_size": 16}, nv).train()
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    for _ in range(epochs):
        st = m.init_state(3)
        for inp, tgt, mask, reset in segments(streams, 20):
            st, _ = train_step(m, opt, st, inp, tgt, mask, reset, 10.0, self_norm_weight)
    return m.eval(), streams


def mean_abs_log_z(m, streams):
    """Independent of the trainer: mean |logsumexp of the logits| over all tokens."""
    with torch.no_grad():
        logits = m.logits(m(streams.inputs, m.init_state(streams.inputs.shape[0])).features)
        return float(torch.logsumexp(logits, -1)[streams.mask].abs().mean())


def test_segment_loss_adds_alpha_mean_squared_log_z(DATA):
    streams, nv = ci_streams(DATA)
    torch.manual_seed(0)
    m = build_model("gru", {"embedding_dim": 8, "hidden_size": 8}, nv)
    inp, tgt, mask, _ = next(segments(streams, 12))
    feats = m(inp, m.init_state(3)).features
    step = segment_loss(m, feats, tgt, mask, None, 0.7)
    logits = m.logits(feats)[mask]
    log_z = torch.logsumexp(logits, -1)
    ce = torch.nn.functional.cross_entropy(logits, tgt[mask])
    assert torch.allclose(step.loss, ce + 0.7 * (log_z ** 2).mean(), atol=1e-5)
    assert int(step.num_tokens) == int(mask.sum())
    assert float(step.abs_log_z) == pytest.approx(float(log_z.detach().abs().sum()), rel=1e-5)
    assert float(step.nll) == pytest.approx(float(ce.detach()) * int(step.num_tokens), rel=1e-5)


def test_self_norm_training_lowers_mean_abs_log_z(DATA):
    plain, streams = train_tiny_gru(DATA, self_norm_weight=0.0)
    normed, _ = train_tiny_gru(DATA, self_norm_weight=0.5)
    z_plain, z_normed = mean_abs_log_z(plain, streams), mean_abs_log_z(normed, streams)
    assert z_normed < 0.5 * z_plain, (z_plain, z_normed)


def test_self_norm_weight_is_validated_and_logged(DATA, tmp_path):
    from nbest_rescore.config import DataConfig, TrainConfig
    from nbest_rescore.training.trainer import train

    with pytest.raises(DataError, match="self_norm_weight"):
        OptimConfig(self_norm_weight=-0.1)
    cfg = TrainConfig(model="gru", model_config={"embedding_dim": 8, "hidden_size": 8},
                      data=DataConfig(train=str(DATA / "lm" / "lm_valid.txt"), valid=None, max_words=2000),
                      optim=OptimConfig(batch_size=4, bptt=10, max_epochs=2, self_norm_weight=1.0, lr=0.01))
    res = train(cfg, tmp_path / "m.pt", progress=False)
    z = [e["mean_abs_log_z"] for e in res.history]
    assert len(z) == 2 and z[1] < z[0]


@pytest.fixture(scope="module")
def trained_gru(DATA):
    return train_tiny_gru(DATA)


@torch.no_grad()
def test_int8_gru_stays_close_to_float_and_keeps_state_semantics(trained_gru):
    m, streams = trained_gru
    q = quantize_dynamic_int8(m)
    assert isinstance(m.rnn, torch.nn.GRU) and type(m.decoder) is torch.nn.Linear  # original untouched
    assert type(q.rnn).__module__.startswith("torch.ao.nn.quantized.dynamic")
    assert type(q.decoder).__module__.startswith("torch.ao.nn.quantized.dynamic")
    x = streams.inputs[:, :31]
    st = m.init_state(3)
    lp, _ = m.log_probs(x[:, :-1], x[:, 1:], st)
    lq, _ = q.log_probs(x[:, :-1], x[:, 1:], st)
    diff = float((lp - lq).abs().max())
    assert 0 < diff < 0.1, diff
    # causality, carried state and batch independence hold up to quantisation noise
    # (activation scales are computed per call), far below the int8-vs-float difference
    y = x.clone()
    y[:, 5:] = torch.randint(0, m.vocab_size, y[:, 5:].shape)
    ly, _ = q.log_probs(y[:, :-1], y[:, 1:], st)
    # (the output layer's activation scale is taken over the whole call, so later words
    # move earlier scores by quantisation noise: measured 1e-4 to 0.015 nats here)
    assert float((ly[:, :4] - lq[:, :4]).abs().max()) < 0.05
    a, st1 = q.log_probs(x[:, :12], x[:, 1:13], st)
    b, _ = q.log_probs(x[:, 12:-1], x[:, 13:], st1)
    assert float((torch.cat([a, b], 1) - lq).abs().max()) < 0.05
    alone, _ = q.log_probs(x[1:2, :-1], x[1:2, 1:], select_state(st, torch.tensor([1])))
    assert float((alone[0] - lq[1]).abs().max()) < 0.05
    # self-normalised scoring falls back to the full product on the quantised layer
    sn = q.output.target_logits(q(x[:, :-1], st).features, x[:, 1:])
    assert torch.isfinite(sn).all()


@torch.no_grad()
def test_int8_amn_quantizes_only_linear_layers():
    torch.manual_seed(0)
    m = build_model("amn", {"embedding_dim": 8, "hidden_size": 6, "num_memcells": 2}, V)
    q = quantize_dynamic_int8(m)
    assert q.w_hh.dtype == torch.float32 and not q.training
    assert type(q.decoder).__module__.startswith("torch.ao.nn.quantized.dynamic")
    x = torch.randint(0, V, (2, 6))
    lp, _ = m.eval().log_probs(x[:, :-1], x[:, 1:], m.init_state(2))
    lq, _ = q.log_probs(x[:, :-1], x[:, 1:], q.init_state(2))
    assert torch.allclose(lp, lq, atol=0.05)
    with pytest.raises(DataError, match="float32"):
        quantize_dynamic_int8(cast_for_inference(m, "bfloat16"))


@torch.no_grad()
def test_bfloat16_cast_on_cpu_and_float16_refused(trained_gru):
    m, streams = trained_gru
    bf = cast_for_inference(m, torch.bfloat16)
    assert m.embedding.weight.dtype == torch.float32 and bf.embedding.weight.dtype == torch.bfloat16
    x = streams.inputs[:, :21]
    st = m.init_state(3)  # float32 state: cast by forward
    lp, _ = m.log_probs(x[:, :-1], x[:, 1:], st)
    lb, stb = bf.log_probs(x[:, :-1], x[:, 1:], st)
    assert lb.dtype == torch.float32 and stb[0].dtype == torch.bfloat16
    assert float((lp - lb).abs().max()) < 0.2
    with pytest.raises(DataError, match="CUDA"):
        cast_for_inference(m, "float16")
    with pytest.raises(DataError, match="bfloat16"):
        cast_for_inference(m, "int4")
