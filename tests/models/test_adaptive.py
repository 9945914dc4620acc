"""The adaptive softmax output layer (``model_config.output: adaptive``) for every model
family: exactly normalised, target log-probs equal to the full distribution, trainable;
config validation, the frequency-based default cutoffs, a trained model's checkpoint
round trip and which models can be captured as a CUDA graph."""
from collections import Counter

import numpy as np
import pytest
import torch

from nbest_rescore.config import DataConfig, OptimConfig, TrainConfig, VocabConfig
from nbest_rescore.errors import DataError
from nbest_rescore.evaluation.perplexity import corpus_perplexity
from nbest_rescore.io.checkpoint import load_checkpoint
from nbest_rescore.io.lm_text import read_lm_text
from nbest_rescore.models import MODEL_REGISTRY, build_model, load_model, save_model
from nbest_rescore.models.base import default_adaptive_cutoffs
from nbest_rescore.corpus import encode_document
from nbest_rescore.training.step import segment_loss
from nbest_rescore.training.trainer import train
from nbest_rescore.vocab import Vocabulary

from tiny_models import EXTRA, SMALL  # noqa: E402

# Every registered family's Config derives from OutputLayerConfig and none overrides
# LanguageModel.logits, so all of them take output: adaptive; none is skipped.
SKIP = {}
V = 100
CUTOFFS = [10, 40]
# tail cluster i projects to D // div**(i+1) units: with D = 10 and the default 4 the
# second tail would get 0 units (a silently uniform cluster), so the family tests use 2
DIV = 2.0


pytestmark = pytest.mark.usefixtures("one_thread")


def make_adaptive(name, **kw):
    torch.manual_seed(0)
    cfg = {**SMALL, **EXTRA.get(name, {}), "output": "adaptive", "adaptive_cutoffs": CUTOFFS,
           "adaptive_div_value": DIV, **kw}
    return build_model(name, cfg, V)


@pytest.fixture(params=sorted(MODEL_REGISTRY))
def name(request):
    if request.param in SKIP:
        pytest.skip(SKIP[request.param])
    return request.param


def batch():
    """Inputs and targets [2, 12] whose targets hit the head and both tail clusters."""
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, V, (2, 13), generator=g)
    x[0, 1:4] = torch.tensor([3, 25, 77])  # head, tail 1, tail 2
    x[1, 5:8] = torch.tensor([99, 10, 9])  # the cluster edges
    return x[:, :-1], x[:, 1:]


def test_adaptive_is_normalised_and_consistent(name):
    m = make_adaptive(name).eval()
    assert m.adaptive is not None and m.decoder is None
    inp, tgt = batch()
    st = m.init_state(2)
    with torch.no_grad():
        feats = m(inp, st).features
        logits = m.logits(feats)
        assert logits.shape == (2, 12, V)
        assert torch.isfinite(logits).all()
        assert torch.allclose(logits.double().exp().sum(-1), torch.ones(2, 12, dtype=torch.float64), atol=1e-5)
        full = logits.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
        tlp = m.target_log_probs(feats, tgt)
        lp, _ = m.log_probs(inp, tgt, st)
    assert tlp.shape == tgt.shape and tlp.dtype == torch.float32
    assert torch.allclose(tlp, full, atol=1e-5)
    assert torch.allclose(lp, full, atol=1e-5)
    # every word id, not only the drawn targets: the whole vocabulary at one position
    every = torch.arange(V).view(1, V)
    f0 = feats[:1, 3:4].expand(1, V, feats.shape[-1])
    with torch.no_grad():
        assert torch.allclose(m.target_log_probs(f0, every)[0], logits[0, 3], atol=1e-5)


def test_adaptive_trains_with_finite_gradients(name):
    m = make_adaptive(name).train()
    inp, tgt = batch()
    mask = torch.ones_like(tgt, dtype=torch.bool)
    mask[1, -2:] = False
    out = m(inp, m.init_state(2))
    step = segment_loss(m, out.features, tgt, mask, out.aux_loss)
    assert torch.isfinite(step.loss)
    # the reported NLL is the masked sum of the target log-probs
    with torch.no_grad():
        ref = -(m.target_log_probs(out.features, tgt) * mask).sum()
    if not any(isinstance(x, torch.nn.Dropout) and x.p > 0 for x in m.modules()):
        assert float(step.nll) == pytest.approx(float(ref), rel=1e-5)
    step.loss.backward()
    grads = {n: p.grad for n, p in m.adaptive.named_parameters()}
    assert grads and all(g is not None for g in grads.values()), [n for n, g in grads.items() if g is None]
    assert all(torch.isfinite(g).all() for g in grads.values())
    # targets in both tail clusters: every cluster's weights receive a gradient
    assert all(g.numel() > 0 and float(g.abs().sum()) > 0 for g in grads.values())
    assert m.embedding.weight.grad is not None and torch.isfinite(m.embedding.weight.grad).all()


def test_adaptive_config_errors():
    with pytest.raises(DataError, match="tie_weights"):
        build_model("gru", {**SMALL, "output": "adaptive", "tie_weights": True}, V)
    for bad in ([40, 10], [0, 10], [10, 100], [10, 10], [10.5, 40], [-5]):
        with pytest.raises(DataError, match="adaptive_cutoffs"):
            build_model("gru", {**SMALL, "output": "adaptive", "adaptive_cutoffs": bad}, V)
    with pytest.raises(DataError, match="output"):
        build_model("gru", {**SMALL, "output": "hierarchical"}, V)
    with pytest.raises(DataError, match="adaptive_div_value"):
        build_model("gru", {**SMALL, "output": "adaptive", "adaptive_div_value": 0.5}, V)
    # the largest allowed cutoff and no cutoffs at all (fallback) are fine
    build_model("gru", {**SMALL, "output": "adaptive", "adaptive_cutoffs": [1, V - 1], "adaptive_div_value": DIV}, V)
    m = build_model("gru", {**SMALL, "output": "adaptive", "adaptive_div_value": DIV}, V)
    assert list(m.adaptive.cutoffs[:-1]) == sorted(set(m.adaptive.cutoffs[:-1]))


def test_default_cutoffs_cover_85_and_97_percent_of_real_tokens(DATA):
    docs = read_lm_text(DATA / "lm" / "lm_valid.txt")
    counts = Counter(w for d in docs for s in d for w in s)
    vocab = Vocabulary.from_counts(counts)
    freq = [counts[w] for w in vocab.words[2:]]
    assert freq == sorted(freq, reverse=True), "from_counts is not frequency-ordered"
    # target counts per id: </s> ends every sentence, <unk> never occurs (all words kept)
    n_sent = sum(len(d) for d in docs)
    ids = np.array([n_sent, 0] + freq, dtype=np.int64)
    cuts = default_adaptive_cutoffs(ids.tolist())
    cum = np.cumsum(ids) / ids.sum()
    head = int(np.searchsorted(cum, 0.85) + 1)  # fewest ids covering 85%
    tail = int(np.searchsorted(cum, 0.97) + 1)
    assert head > 128  # the real head, not the minimum size
    assert cuts == [head, tail]
    assert cum[cuts[0] - 1] >= 0.85 > cum[cuts[0] - 2]
    assert all(0 < a < b < len(vocab) for a, b in zip(cuts, cuts[1:]))
    assert cuts[-1] < len(vocab)
    # a small vocabulary: the head keeps min(V - 1, 128) words, values stay increasing < V
    for v in (3, 10, 200):
        small = default_adaptive_cutoffs(list(range(v, 0, -1)))
        assert small == sorted(set(small)) and 1 <= small[0] and small[-1] <= v - 1
        assert small[0] >= min(v - 1, 128)


def test_by_frequency_orders_a_file_vocabulary():
    v = Vocabulary(["</s>", "<unk>", "c", "a", "b", "d"])
    out = v.by_frequency(Counter({"a": 1, "b": 7, "c": 3}))
    assert out.words == ["</s>", "<unk>", "b", "c", "a", "d"]


@pytest.fixture(scope="module")
def trained_adaptive(DATA, tmp_path_factory):
    old = torch.get_num_threads()
    text = str(DATA / "lm" / "lm_valid.txt")
    cfg = TrainConfig(model="gru", model_config={"embedding_dim": 16, "hidden_size": 16, "output": "adaptive"},
                      data=DataConfig(train=text, valid=text, max_words=3000, max_valid_words=1000),
                      vocab=VocabConfig(max_size=2000),
                      optim=OptimConfig(batch_size=8, bptt=10, lr=0.01, max_epochs=1, threads=1))
    out = tmp_path_factory.mktemp("adaptive") / "ad.pt"
    res = train(cfg, out, progress=False)
    torch.set_num_threads(old)
    return out, res, cfg


def test_trained_adaptive_model_round_trips(DATA, tmp_path, trained_adaptive):
    out, res, cfg = trained_adaptive
    model, vocab, info = load_model(out)
    assert model.adaptive is not None
    # the cutoffs the trainer chose are the frequency defaults of the training targets
    docs = read_lm_text(cfg.data.train, cfg.data.max_words)
    enc = [encode_document(d, vocab) for d in docs]
    counts = np.bincount(np.concatenate([e[1:] for e in enc]), minlength=len(vocab))
    stored = load_checkpoint(out)["config"]["adaptive_cutoffs"]
    assert stored == default_adaptive_cutoffs(counts.tolist())
    assert list(model.adaptive.cutoffs[:-1]) == stored
    # the recorded validation perplexity is the loaded model's
    valid = read_lm_text(cfg.data.valid, cfg.data.max_valid_words)
    assert corpus_perplexity(model, vocab, valid, batch_size=5).perplexity == pytest.approx(res.best_valid_ppl,
                                                                                           rel=1e-4)
    save_model(tmp_path / "copy.pt", model, vocab, info)
    again, vocab2, _ = load_model(tmp_path / "copy.pt")
    assert vocab2.words == vocab.words
    x = torch.from_numpy(np.concatenate(enc[:3])[:60]).view(2, 30)
    with torch.no_grad():
        a, _ = model.log_probs(x[:, :-1], x[:, 1:], model.init_state(2))
        b, _ = again.log_probs(x[:, :-1], x[:, 1:], again.init_state(2))
    assert torch.equal(a, b)
    assert not model.supports_cuda_graph()


def test_supports_cuda_graph():
    assert build_model("gru", SMALL, V).supports_cuda_graph()
    assert not make_adaptive("gru").supports_cuda_graph()
    assert build_model("lstm", {**SMALL, "num_layers": 2}, V).supports_cuda_graph()
    assert not build_model("lstm", {**SMALL, "num_layers": 2, "dropout": 0.3}, V).supports_cuda_graph()
    # families not checked for capture
    assert not build_model("transformer", {**SMALL, **EXTRA["transformer"]}, V).supports_cuda_graph()


# -- log-probs of chosen (row, target) pairs (prefix-tree scoring) ----------------------

def pairs_case():
    """(rows, targets): row 0 head words only, row 1 tail 1 only, row 2 tail 2 only,
    row 3 the head and both tails, row 4 no target, row 5 a repeated target, row 6 the
    cluster edges; shuffled."""
    rows = [0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 3, 5, 5, 6, 6, 6, 6, 6]
    tgts = [0, 3, 9, 10, 25, 39, 40, 99, 5, 12, 77, 0, 50, 50, 9, 10, 39, 40, 99]
    perm = torch.randperm(len(rows), generator=torch.Generator().manual_seed(2))
    return torch.tensor(rows)[perm], torch.tensor(tgts)[perm]


def test_adaptive_log_probs_at_equals_the_full_distribution(name):
    """Every family: the pairs' log-probs equal logits() gathered; a tail projection
    runs only on the rows that have a target in its cluster."""
    m = make_adaptive(name).eval()
    x = torch.randint(0, V, (1, 7), generator=torch.Generator().manual_seed(4))
    rows, tgts = pairs_case()
    seen = {0: [], 1: []}
    # distinct rows: a call is padded with copies of its first row up to safe_rows (models.rows)
    hooks = [m.adaptive.tail[i].register_forward_hook(
        lambda mod, inp, out, i=i: seen[i].append(torch.unique(inp[0], dim=0).shape[0])) for i in (0, 1)]
    try:
        with torch.no_grad():
            feats = m(x, m.init_state(1)).features[0]  # [7, D]
            got = m.output.log_probs_at(feats, rows, tgts)
    finally:
        for h in hooks:
            h.remove()
    assert seen == {0: [3], 1: [4]}  # rows {1, 3, 6} / {2, 3, 5, 6}, once each
    with torch.no_grad():
        full = m.logits(feats.unsqueeze(0))[0]
    assert got.dtype == torch.float32 and got.shape == rows.shape
    assert torch.allclose(got, full[rows, tgts], atol=1e-5, rtol=0)


@pytest.mark.parametrize("cutoffs,div", [([2943, 14651], 4.0), ([100], 2.0), ([5, 1000, 20000], 2.0)])
def test_adaptive_log_probs_at_43k_random_features(cutoffs, div):
    """The benchmark's vocabulary size, random features of a large scale (log-probs far
    from uniform), targets drawn from every cluster and from the head only."""
    from torch import nn

    from nbest_rescore.models.output_layer import adaptive_log_probs_at, cluster_of

    torch.manual_seed(0)
    v, d = 43048, 64
    ad = nn.AdaptiveLogSoftmaxWithLoss(d, v, cutoffs, div_value=div).eval()
    g = torch.Generator().manual_seed(5)
    h = torch.randn(50, d, generator=g) * 4
    rows = torch.randint(0, 50, (600,), generator=g)
    tgts = torch.randint(0, v, (600,), generator=g)
    tgts[:200] = torch.randint(0, cutoffs[0], (200,), generator=g)
    assert set(cluster_of(ad, tgts).tolist()) == set(range(len(cutoffs) + 1))
    with torch.no_grad():
        full = ad.log_prob(h)
        assert torch.allclose(adaptive_log_probs_at(ad, h, rows, tgts), full[rows, tgts], atol=1e-5, rtol=0)
        head_only = adaptive_log_probs_at(ad, h, rows[:200], tgts[:200])
        assert torch.allclose(head_only, full[rows[:200], tgts[:200]], atol=1e-5, rtol=0)
        assert adaptive_log_probs_at(ad, h, rows[:0], tgts[:0]).shape == (0,)
    with pytest.raises(ValueError, match="expected features"):
        adaptive_log_probs_at(ad, h.unsqueeze(0), rows, tgts)
