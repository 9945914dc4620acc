"""The fused full-softmax output layer (issue 21): blocked online log-sum-exp against
float64 log-softmax, its cross-entropy gradients against torch's, every model family
on the ci lists in tree and padded modes against the plain path, ``ppl`` and the
bfloat16 output layer."""
import numpy as np
import pytest
import torch
from torch.nn import functional as F

from nbest_rescore.models import MODEL_REGISTRY, build_model, fused_output
from nbest_rescore.models.fused_output import (blocked_logsumexp, fused_linear_cross_entropy,
                                                fused_log_probs_at)
from nbest_rescore.models.quantize import bfloat16_output_layer
from nbest_rescore.rescoring import scorer as scorer_mod
from nbest_rescore.rescoring.scorer import NnScorer
from nbest_rescore.vocab import Vocabulary

from tiny_models import EXTRA, SMALL  # noqa: E402  (tests/ is on sys.path, see conftest.py)

TOL = 1e-5  # nats, the bound


def _layer(n=37, d=16, v=1003, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, d, generator=g), torch.randn(v, d, generator=g) * 0.5,
            torch.randn(v, generator=g))


@pytest.mark.parametrize("block", [1, 64, 1000, 1003, 5000])
@pytest.mark.parametrize("with_bias", [True, False])
def test_blocked_logsumexp_equals_float64_reference(block, with_bias):
    h, w, b = _layer()
    b = b if with_bias else None
    ref = torch.logsumexp(h.double() @ w.double().t() + (b.double() if b is not None else 0), -1)
    got = blocked_logsumexp(h, w, b, block)
    assert got.dtype == torch.float64 and got.shape == (37,)
    assert (got.double() - ref).abs().max() < 2e-6


def test_log_probs_at_pairs_equal_log_softmax_gathered():
    h, w, b = _layer()
    g = torch.Generator().manual_seed(1)
    rows = torch.randint(0, 37, (300,), generator=g)  # repeats: several targets per row
    tgt = torch.randint(0, 1003, (300,), generator=g)
    ref = torch.log_softmax(h.double() @ w.double().t() + b.double(), -1)[rows, tgt]
    got = fused_log_probs_at(h, w, b, rows, tgt, block=100)
    assert (got.double() - ref).abs().max() < 2e-6


@pytest.mark.parametrize("with_bias", [True, False])
def test_fused_cross_entropy_gradients_equal_torch(with_bias):
    h, w, b = _layer(n=29, v=517)
    g = torch.Generator().manual_seed(2)
    tgt = torch.randint(0, 517, (29,), generator=g)
    up = torch.rand(29, generator=g)  # a non-uniform upstream gradient (masked/scaled losses)
    leaves = [t.clone().requires_grad_() for t in (h, w, b)]
    bias = leaves[2] if with_bias else None
    ref = F.cross_entropy(leaves[0] @ leaves[1].t() + (bias if bias is not None else 0), tgt, reduction="none")
    want = torch.autograd.grad((ref * up).sum(), leaves[:3] if with_bias else leaves[:2])
    leaves2 = [t.clone().requires_grad_() for t in (h, w, b)]
    got_loss = fused_linear_cross_entropy(leaves2[0], leaves2[1], leaves2[2] if with_bias else None, tgt, block=50)
    got = torch.autograd.grad((got_loss * up).sum(), leaves2[:3] if with_bias else leaves2[:2])
    assert (got_loss - ref).abs().max() < 1e-5
    for a, e in zip(got, want):
        assert a.shape == e.shape and (a - e).abs().max() < 1e-5


def _ci_setup(ci_nbest, n_utts=3, per_utt=40):
    rows, hyps = [], []
    for i, u in enumerate(ci_nbest.utterances[:n_utts]):
        for h in u.hyps[:per_utt]:
            rows.append(i)
            hyps.append(h)
    words = sorted({w for u in ci_nbest.utterances for h in u.hyps for w in h})
    return rows, hyps, Vocabulary(["</s>", "<unk>"] + words[:400])


@pytest.mark.parametrize("name", sorted(MODEL_REGISTRY))
def test_every_model_fused_equals_plain_in_tree_and_padded_modes(ci_nbest, name, monkeypatch):
    """Real ci hypotheses (the 25 best of 3 lists: 5 padded batches of 16), a 402-word
    vocabulary cut into 64-word blocks (7 blocks, the last one partial), first-pass-like
    start states from the ci histories."""
    monkeypatch.setattr(fused_output, "DEFAULT_BLOCK", 64)
    rows, hyps, vocab = _ci_setup(ci_nbest, per_utt=25)
    torch.manual_seed(0)
    model = build_model(name, {**SMALL, **EXTRA.get(name, {})}, len(vocab)).eval()
    history = [u.hyps[0] for u in ci_nbest.utterances[:3]]
    costs = {}
    for impl in ("fused", "plain"):
        for mode in ("tree", "padded"):
            sc = NnScorer(model, vocab, mode=mode, batch_size=16, max_tokens=200, softmax_impl=impl)
            states = sc.advance(sc.initial_state(3), history)
            costs[impl, mode] = sc.costs(states, rows, hyps)
    for mode in ("tree", "padded"):
        assert np.abs(costs["fused", mode] - costs["plain", mode]).max() <= TOL, mode
    assert np.abs(costs["fused", "tree"] - costs["plain", "padded"]).max() <= 1e-4


def test_fused_path_never_builds_the_full_product(ci_nbest, monkeypatch):
    """The fused tree path must not call the output layer on all rows (``model.output.logits``)."""
    rows, hyps, vocab = _ci_setup(ci_nbest, 2)
    model = build_model("gru", dict(SMALL), len(vocab)).eval()
    calls = []
    orig = type(model.output).logits
    monkeypatch.setattr(type(model.output), "logits", lambda self, f: calls.append(f.shape) or orig(self, f))
    NnScorer(model, vocab).costs(model.init_state(2), rows, hyps)
    assert calls == []


def test_ppl_and_training_loss_fused_equal_plain(ci_nbest):
    rows, hyps, vocab = _ci_setup(ci_nbest, 2)
    torch.manual_seed(0)
    model = build_model("lstm", dict(SMALL), len(vocab))
    ids = torch.tensor([[vocab.eos] + vocab.encode(hyps[0]) + [vocab.eos]])
    inp, tgt = ids[:, :-1], ids[:, 1:]
    model.eval()
    with torch.inference_mode():
        model.output.softmax_impl = "plain"
        plain, _ = model.log_probs(inp, tgt, model.init_state(1))
        model.output.softmax_impl = "fused"
        fused, _ = model.log_probs(inp, tgt, model.init_state(1))
    assert (plain - fused).abs().max() < TOL
    model.train()
    model.drop_emb.p = model.output.drop.p = 0.0
    grads = {}
    for fused_training in (False, True):
        model.zero_grad()
        model.fused_training = fused_training
        logp, _ = model.log_probs(inp, tgt, model.init_state(1))
        (-logp.sum()).backward()
        grads[fused_training] = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    for a, b in zip(grads[False], grads[True]):
        assert (a - b).abs().max() < 1e-5


@pytest.mark.parametrize("output", ["softmax", "adaptive"])
def test_bfloat16_output_layer_close_to_float32(ci_nbest, output):
    rows, hyps, vocab = _ci_setup(ci_nbest)
    torch.manual_seed(0)
    cfg = {**SMALL, "output": output}
    if output == "adaptive":
        cfg.update(adaptive_cutoffs=[50, 200], adaptive_div_value=2.0)
    model = build_model("gru", cfg, len(vocab)).eval()
    bf = bfloat16_output_layer(model)
    assert next(model.parameters()).dtype == torch.float32  # the given model untouched
    st = model.init_state(3)
    exact = NnScorer(model, vocab).costs(st, rows, hyps)
    approx = NnScorer(bf, vocab).costs(st, rows, hyps)
    per_token = np.abs(approx - exact) / np.array([len(h) + 1 for h in hyps])
    assert 0 < per_token.max() < 0.05  # bfloat16 moves the costs, by hundredths of a nat per token


def test_cpu_bfloat16_only_where_the_isa_has_it(ci_nbest, monkeypatch, caplog):
    rows, hyps, vocab = _ci_setup(ci_nbest, 1)
    model = build_model("gru", dict(SMALL), len(vocab)).eval()
    st = model.init_state(1)
    exact = NnScorer(model, vocab).costs(st, rows, hyps)
    monkeypatch.setattr(scorer_mod, "cpu_has_fast_bfloat16", lambda: False)
    sc = NnScorer(model, vocab, dtype="bfloat16")
    assert sc.settings()["dtype_scope"] == "none" and "no bfloat16" in caplog.text
    assert np.array_equal(sc.costs(st, rows, hyps), exact)
    monkeypatch.setattr(scorer_mod, "cpu_has_fast_bfloat16", lambda: True)
    sc = NnScorer(model, vocab, dtype="bfloat16")
    assert sc.settings()["dtype_scope"] == "output layer"
    assert sc.model.output.bf16[0].dtype == torch.bfloat16
    assert next(sc.model.parameters()).dtype == torch.float32  # the recurrence stays float32


def test_training_with_fused_softmax_follows_the_plain_run(DATA, tmp_path, one_thread):
    """``optim.fused_softmax: true`` trains the same tiny full-softmax GRU as the plain
    loss on real text (lm_valid), up to float rounding over 2 epochs (the fused loss's
    own gradients are checked against torch's above), and it is stored
    in the checkpoint's training config."""
    from nbest_rescore.config import DataConfig, OptimConfig, TrainConfig, VocabConfig
    from nbest_rescore.io.checkpoint import load_checkpoint
    from nbest_rescore.training.trainer import train

    text = str(DATA / "lm" / "lm_valid.txt")
    out = {}
    for fused in (False, True):
        cfg = TrainConfig(model="gru", model_config={"embedding_dim": 16, "hidden_size": 16},
                          data=DataConfig(train=text, valid=text, max_words=3000, max_valid_words=1000),
                          vocab=VocabConfig(max_size=2000),
                          optim=OptimConfig(batch_size=8, bptt=10, lr=0.01, max_epochs=2, seed=1, threads=1,
                                            fused_softmax=fused))
        train(cfg, tmp_path / f"{fused}.pt", progress=False)
        out[fused] = load_checkpoint(tmp_path / f"{fused}.pt")
    assert out[True]["info"]["train_config"]["optim"]["fused_softmax"] is True
    a, b = out[False]["state_dict"], out[True]["state_dict"]
    # Adam turns float-rounding differences of near-zero gradients into steps of up to lr
    # (0.01); the weights moved by about 0.1 from their start
    assert max(float((a[k].float() - b[k].float()).abs().max()) for k in a) < 1e-3


@pytest.mark.parametrize("output", ["softmax", "adaptive"])
def test_deferred_output_layer_gives_the_same_costs_at_any_queue_size(ci_nbest, output, monkeypatch):
    """The tree queues nodes' features across levels before the output layer
    (``prefix_tree.OUTPUT_ROWS``): flushing after every level (1), at the default and
    only at the end give the same costs, and the padded path agrees."""
    from nbest_rescore.rescoring import prefix_tree

    rows, hyps, vocab = _ci_setup(ci_nbest)
    torch.manual_seed(0)
    cfg = {**SMALL, "output": output}
    if output == "adaptive":
        cfg.update(adaptive_cutoffs=[50, 200], adaptive_div_value=2.0)
    model = build_model("lstm", cfg, len(vocab)).eval()
    st = model.init_state(3)
    costs = []
    for queue in (1, prefix_tree.OUTPUT_ROWS, 10 ** 9):
        monkeypatch.setattr(prefix_tree, "OUTPUT_ROWS", queue)
        costs.append(NnScorer(model, vocab, batch_size=16).costs(st, rows, hyps))
    padded = NnScorer(model, vocab, mode="padded").costs(st, rows, hyps)
    for c in costs[1:] + [padded]:
        assert np.abs(c - costs[0]).max() <= TOL
