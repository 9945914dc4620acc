"""Attention analysis (thesis 000 section 6.2, 001 Fig. 3) on the ci reference text,
checked against an independent float64 numpy AMN run over the same document streams."""
import json
import math
import os
from collections import Counter

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from nbest_rescore.cli import main
from nbest_rescore.errors import DataError
from nbest_rescore.evaluation.analysis import (AMNAnalysis, WindowAnalysis, analysis_figures, analysis_title,
                                                analyze_model, write_analysis)
from nbest_rescore.evaluation.perplexity import corpus_perplexity
from nbest_rescore.io.lm_text import read_lm_text
from nbest_rescore.models import build_model, save_model
from nbest_rescore.models.base import LanguageModel, Output
from nbest_rescore.corpus import encode_document, run_segment, segments
from stream_columns import make_streams  # noqa: E402  (tests/ is on sys.path, see conftest.py)
from nbest_rescore.vocab import Vocabulary

CFG = {"embedding_dim": 8, "hidden_size": 6, "num_memcells": 4}
BATCH, BPTT = 16, 64  # analyze_model's defaults


@pytest.fixture(scope="module")
def ci_text(DATA, tmp_path_factory):
    """The ci references as LM text: one sentence per line, documents from utt2doc."""
    doc_of = dict(line.split() for line in open(DATA / "ci" / "utt2doc"))
    lines, last = [], None
    for line in open(DATA / "ci" / "ref.txt"):
        utt, words = line.split(maxsplit=1)
        if last is not None and doc_of[utt] != last:
            lines.append("")
        lines.append(words.strip())
        last = doc_of[utt]
    path = tmp_path_factory.mktemp("text") / "ci.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def setup(ci_text):
    docs = read_lm_text(ci_text)
    counts = Counter(w for d in docs for s in d for w in s)
    vocab = Vocabulary.from_counts(counts, max_size=150)  # the rest becomes <unk>
    torch.manual_seed(3)
    model = build_model("amn", CFG, len(vocab)).eval()
    with torch.no_grad():  # sharper, more varied attention than the default init
        model.w_ih.mul_(3.0)
        model.temperature.fill_(0.1)
    streams = make_streams([encode_document(d, vocab) for d in docs], BATCH)
    return model, vocab, docs, streams


def numpy_amn_states(model, streams):
    """Controller and memcell states float64 [B, L, K + 1, H] of a plain numpy GRU
    loop over the streams (state zeroed where a document starts)."""
    g = lambda p: p.detach().double().numpy()
    w_ih, w_hh, b_ih, b_hh, emb = g(model.w_ih), g(model.w_hh), g(model.b_ih), g(model.b_hh), g(model.embedding.weight)
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))
    inputs, reset = streams.inputs.numpy(), streams.reset.numpy()
    b, length = inputs.shape
    k1, hd = w_ih.shape[0], w_hh.shape[1]
    h = np.zeros((b, k1, hd))
    out = np.zeros((b, length, k1, hd))
    for t in range(length):
        h[reset[:, t]] = 0.0
        gi = np.einsum("be,keg->bkg", emb[inputs[:, t]], w_ih) + b_ih
        gh = np.einsum("bkh,khg->bkg", h, w_hh) + b_hh
        r = sig(gi[..., :hd] + gh[..., :hd])
        z = sig(gi[..., hd:2 * hd] + gh[..., hd:2 * hd])
        n = np.tanh(gi[..., 2 * hd:] + r * gh[..., 2 * hd:])
        h = (1.0 - z) * n + z * h
        out[:, t] = h
    return out


def numpy_alpha(model, states):
    """alpha = softmax(u . m^(i) / T) over memcells: [..., K]."""
    beta = np.einsum("...h,...kh->...k", states[..., 0, :], states[..., 1:, :]) / float(model.temperature)
    e = np.exp(beta - beta.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def numpy_ppl(model, features, streams):
    """Perplexity of the masked targets from output-layer inputs [B, L, H] (numpy)."""
    w, bias = model.decoder.weight.detach().double().numpy(), model.decoder.bias.detach().double().numpy()
    logits = features @ w.T + bias
    logits -= logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    tgt, mask = streams.targets.numpy(), streams.mask.numpy()
    picked = np.take_along_axis(logp, tgt[..., None], -1)[..., 0]
    return math.exp(-picked[mask].mean())


@pytest.fixture(scope="module")
def analysed(setup):
    model, vocab, docs, streams = setup
    res = analyze_model(model, vocab, docs)
    states = numpy_amn_states(model, streams)
    return res, states


def test_recording_hooks_match_numpy_and_leave_outputs_unchanged(setup):
    model, vocab, docs, _ = setup
    streams = make_streams([encode_document(d, vocab) for d in docs[:3]], 3)
    ref = numpy_amn_states(model, streams)
    assert streams.reset[:, 0].all() and not streams.reset[:, 1:9].any()  # one document per row
    x = streams.inputs[:, :9]
    with torch.no_grad():
        plain = model(x, model.init_state(3)).features
        assert model.recorded_attention == [] and model.recorded_memcells == []
        model.record_attention = model.record_memcells = True
        try:
            rec = model(x, model.init_state(3)).features
            alpha, mem = model.recorded_attention.pop(), model.recorded_memcells.pop()
            model.force_memcell = 2
            forced = model(x, model.init_state(3)).features
        finally:
            model.record_attention = model.record_memcells = False
            model.force_memcell = None
            model.recorded_attention.clear()
            model.recorded_memcells.clear()
    assert torch.equal(plain, rec)
    assert alpha.shape == (3, 9, 4) and mem.shape == (3, 9, 4, 6)
    np.testing.assert_allclose(mem.numpy(), ref[:, :9, 1:], atol=1e-5)
    np.testing.assert_allclose(alpha.numpy(), numpy_alpha(model, ref[:, :9]), atol=1e-5)
    assert torch.equal(forced, mem[:, :, 2])


def test_entropy_and_attention_equal_numpy(setup, analysed):
    model, vocab, _, streams = setup
    res, states = analysed
    assert isinstance(res, AMNAnalysis)
    mask = streams.mask.numpy()
    alpha = numpy_alpha(model, states)[mask]  # [N, K]
    ent = -(alpha * np.log2(alpha)).sum(-1)
    assert res.tokens == mask.sum() and res.entropy_max == pytest.approx(2.0)
    assert res.entropy_mean == pytest.approx(ent.mean(), rel=1e-5)
    assert ent.std() > 0.05  # the check is not trivial: entropies vary
    np.testing.assert_allclose(res.mean_attention, alpha.mean(0), atol=1e-6)
    counts, _ = np.histogram(ent, np.linspace(0, 2, len(res.entropy_counts) + 1))
    assert sum(res.entropy_counts) == len(ent)
    assert np.abs(np.asarray(res.entropy_counts) - counts).sum() <= 2  # float32 vs float64 at bin edges
    # words ranked by mean entropy at the step where the word is the input
    words = streams.inputs.numpy()[mask]
    per_word = {vocab.words[i]: (int((words == i).sum()), ent[words == i].mean()) for i in np.unique(words)}
    eligible = sorted((v for c, v in per_word.values() if c >= 5), reverse=True)
    assert len(eligible) > 20  # both lists are cut (they overlap: only ~35 words qualify)
    np.testing.assert_allclose([w.mean_entropy for w in res.top_words], eligible[:20], rtol=1e-5)
    np.testing.assert_allclose([w.mean_entropy for w in res.bottom_words], eligible[::-1][:20], rtol=1e-5)
    for w in res.top_words + res.bottom_words:
        assert w.count == per_word[w.word][0] >= 5
        assert w.mean_entropy == pytest.approx(per_word[w.word][1], rel=1e-5)


def test_cosine_matrix_equals_numpy(setup, analysed):
    _, _, _, streams = setup
    res, states = analysed
    m = states[..., 1:, :][streams.mask.numpy()]  # [N, K, H]
    m = m / np.linalg.norm(m, axis=-1, keepdims=True)
    expected = np.einsum("nih,njh->ij", m, m) / len(m)
    s = np.asarray(res.cosine)
    assert s.shape == (4, 4)
    np.testing.assert_allclose(s, s.T, atol=1e-12)
    np.testing.assert_allclose(np.diag(s), 1.0, atol=1e-6)
    np.testing.assert_allclose(s, expected, atol=1e-5)


def test_forced_memcell_perplexity_equals_numpy(setup, analysed):
    model, vocab, docs, streams = setup
    res, states = analysed
    for k in range(4):
        assert res.memcell_perplexity[k] == pytest.approx(numpy_ppl(model, states[..., k + 1, :], streams), rel=1e-4)
    alpha = numpy_alpha(model, states)
    full = numpy_ppl(model, np.einsum("blk,blkh->blh", alpha, states[..., 1:, :]), streams)
    assert res.perplexity == pytest.approx(full, rel=1e-4)
    assert res.perplexity == pytest.approx(corpus_perplexity(model, vocab, docs).perplexity, rel=1e-6)  # plain log_softmax vs the fused output layer of ppl
    assert len(set(round(p, 3) for p in res.memcell_perplexity)) == 4
    assert model.force_memcell is None and not model.record_attention and model.recorded_attention == []


class FakeWindowModel(LanguageModel):
    """Follows the Daniluk recording contract without attending to anything: the
    weights over the L previous outputs are softmax(table[input word]) restricted to
    the positions that exist (the state counts the steps read since the document
    start), index L-1 the most recent. Not registered."""

    name = "key-value"
    L = 4

    class Config:
        embedding_dim = 5

    def __init__(self, vocab_size):
        super().__init__(self.Config(), vocab_size, 5)
        self.register_buffer("table", torch.randn(vocab_size, self.L))
        self.record_attention = False
        self.recorded_attention = []

    def init_state(self, batch_size, device=None):
        return (torch.zeros(batch_size, 1, device=device),)

    def forward(self, tokens, state, lengths=None):
        b, t = tokens.shape
        seen = state[0][:, :1] + torch.arange(t, dtype=torch.float32).view(1, t)  # [B, T]
        valid = torch.arange(self.L, dtype=torch.float32).view(1, 1, -1) >= self.L - seen.unsqueeze(-1)
        w = torch.softmax(self.table[tokens].masked_fill(~valid, -1e9), -1) * valid  # [B, T, L]
        if self.record_attention:
            self.recorded_attention.append(w)
        return Output(self.embedding(tokens), (state[0] + t,), None)


def test_window_attention_by_position_with_a_fake_contract_model(setup, tmp_path):
    _, vocab, docs, streams = setup
    torch.manual_seed(0)
    model = FakeWindowModel(len(vocab))
    res = analyze_model(model, vocab, docs)
    assert isinstance(res, WindowAnalysis) and res.window == 4
    # independent: walk the streams, counting steps since each document start
    table = model.table.numpy().astype(np.float64)
    total, n = np.zeros(4), 0
    inputs, reset, mask = streams.inputs.numpy(), streams.reset.numpy(), streams.mask.numpy()
    for b in range(inputs.shape[0]):
        seen = 0
        for t in range(inputs.shape[1]):
            if not mask[b, t]:
                continue
            seen = 0 if reset[b, t] else seen
            w = np.zeros(4)
            if seen:
                valid = np.arange(4) >= 4 - seen
                e = np.exp(table[inputs[b, t]][valid])
                w[valid] = e / e.sum()
            total += w
            n += 1
            seen += 1
    np.testing.assert_allclose(res.mean_attention, total / n, atol=1e-6)
    assert res.perplexity == pytest.approx(corpus_perplexity(model, vocab, docs).perplexity, rel=1e-6)  # analysis: log_softmax of the logits; ppl: the fused output layer (float32 rounding)
    paths = write_analysis(res, tmp_path)
    assert [p.rsplit("/", 1)[1] for p in paths] == ["analysis.json", "window_attention.png"]
    assert json.loads(open(paths[0]).read())["mean_attention_by_position"] == list(res.mean_attention)


@pytest.mark.parametrize("name", ["attention", "key-value", "key-value-predict"])
def test_daniluk_models_through_the_contract(name, setup, tmp_path):
    from nbest_rescore.models import MODEL_REGISTRY

    if name not in MODEL_REGISTRY:
        pytest.skip(f"model {name!r} is not registered")
    _, vocab, docs, _ = setup
    torch.manual_seed(0)
    model = build_model(name, {"embedding_dim": 8, "hidden_size": 6, "window": 3}, len(vocab)).eval()
    res = analyze_model(model, vocab, docs)
    assert res.window == 3 and model.recorded_attention == [] and not model.record_attention
    # weights sum to 1 at every step but the first of each document (no previous output)
    assert sum(res.mean_attention) == pytest.approx(1.0 - res.documents / res.tokens, rel=1e-6)
    assert res.perplexity == pytest.approx(corpus_perplexity(model, vocab, docs).perplexity, rel=1e-6)  # plain log_softmax vs the fused output layer of ppl
    assert (tmp_path / write_analysis(res, tmp_path)[1]).read_bytes()[:4] == b"\x89PNG"


def test_unsupported_model_is_a_data_error(setup):
    _, vocab, docs, _ = setup
    with pytest.raises(DataError, match=r"amn.*attention, key-value, key-value-predict.*'gru'"):
        analyze_model(build_model("gru", {"embedding_dim": 4, "hidden_size": 4}, len(vocab)), vocab, docs)
    fake = FakeWindowModel(len(vocab))
    del fake.record_attention  # a window model without the recording contract
    with pytest.raises(DataError, match="does not implement attention recording"):
        analyze_model(fake, vocab, docs)


@pytest.fixture(scope="module")
def tiny_amn_checkpoint(setup, tmp_path_factory):
    """A tiny AMN trained for a few Adam steps on the ci text, saved with save_model."""
    _, vocab, _, streams = setup
    torch.manual_seed(0)
    m = build_model("amn", CFG, len(vocab)).train()
    opt = torch.optim.Adam(m.parameters(), lr=0.02)
    st = m.init_state(streams.inputs.shape[0])
    for (inp, tgt, mask, reset), _ in zip(segments(streams, 16), range(4)):
        feats, st, _ = run_segment(m, tuple(s.detach() for s in st), inp, reset)
        loss = torch.nn.functional.cross_entropy(m.logits(feats)[mask], tgt[mask])
        opt.zero_grad()
        loss.backward()
        opt.step()
    path = tmp_path_factory.mktemp("amn") / "amn.pt"
    save_model(path, m.eval(), vocab)
    return path


def test_cli_writes_plots_and_json(tiny_amn_checkpoint, ci_text, tmp_path):
    out = tmp_path / "analysis"
    res = CliRunner().invoke(main, ["analyze", "--lm", str(tiny_amn_checkpoint), "--text", str(ci_text),
                                    "--out", str(out), "--max-words", "600"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    for name in ("attention_entropy.png", "memcell_attention.png", "memcell_cosine.png", "memcell_ppl.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    run_marker = ".nbest-rescore-run"  # io.output_checks.RUN_MARKER, where the CLI writes one
    assert sorted(p.name for p in out.iterdir() if p.name != run_marker) == ["analysis.json", "attention_entropy.png", "memcell_attention.png",
                                                     "memcell_cosine.png", "memcell_ppl.png"]  # no temp files left
    data = json.loads((out / "analysis.json").read_text())
    assert data["word_ranking"]["step"] == "input" and "INPUT" in data["word_ranking"]["note"]
    assert len(data["memcell_perplexity"]) == 4 and data["attention_entropy"]["unit"] == "bits"
    assert sum(data["attention_entropy"]["histogram"]["counts"]) == data["tokens"]
    assert data["settings"]["max_words"] == 600
    ppl = CliRunner().invoke(main, ["ppl", "--lm", str(tiny_amn_checkpoint), "--text", str(ci_text),
                                    "--max-words", "600"])
    assert data["perplexity"] == pytest.approx(json.loads(ppl.stdout)["perplexity"], rel=1e-6)  # plain log_softmax vs the fused output layer of ppl


def test_cli_rejects_other_models(ci_text, tmp_path):
    vocab = Vocabulary(["</s>", "<unk>", "the"])
    path = tmp_path / "gru.pt"
    save_model(path, build_model("gru", {"embedding_dim": 4, "hidden_size": 4}, len(vocab)), vocab)
    res = CliRunner().invoke(main, ["analyze", "--lm", str(path), "--text", str(ci_text), "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and "supports the models amn" in res.output and "Traceback" not in res.output


def _hand_made_amn():
    return AMNAnalysis(
        model="amn", num_memcells=3, tokens=100, documents=2, perplexity=120.0,
        memcell_perplexity=(150.0, 900.0, 130.0), mean_attention=(0.5, 0.1, 0.4),
        cosine=((1.0, 0.2, 0.3), (0.2, 1.0, 0.1), (0.3, 0.1, 1.0)), entropy_mean=0.8, entropy_max=math.log2(3),
        entropy_counts=(10, 50, 40), entropy_edges=(0.0, 0.5, 1.0, math.log2(3)), top_words=(), bottom_words=(),
        min_count=5)


SETTINGS = {"lm": "/some/dir/amn.pt", "text": "/other/ci.txt", "max_words": 600}
SHOWS = {"attention_entropy.png": "attention entropy over 100 tokens",
         "memcell_attention.png": "mean attention per memcell",
         "memcell_cosine.png": "mean cosine similarity of memcell states",
         "memcell_ppl.png": "perplexity of each memcell alone",
         "window_attention.png": "key-value: mean attention by window position"}


@pytest.mark.parametrize("kind", ["amn", "window"])
def test_every_analysis_plot_is_titled_with_lm_and_text(kind, tmp_path, monkeypatch):
    """No data needed: every figure write_analysis saves has the title line built from
    the settings (basenames of the checkpoint and the text) above what it shows."""
    from nbest_rescore.evaluation import plots

    res = _hand_made_amn() if kind == "amn" else WindowAnalysis(
        model="key-value", window=3, tokens=100, documents=2, perplexity=99.0, mean_attention=(0.2, 0.3, 0.48))
    saved = {}
    save = plots.save_figure
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: saved.setdefault(os.path.basename(path), fig) and save(fig, path))
    paths = write_analysis(res, tmp_path / "out", SETTINGS)
    names = [os.path.basename(p) for p in paths]
    assert names[0] == "analysis.json" and names[1:] == list(saved) and sorted(os.listdir(tmp_path / "out")) == sorted(names)
    assert set(saved) == ({"window_attention.png"} if kind == "window" else set(SHOWS) - {"window_attention.png"})
    for name, fig in saved.items():
        assert (tmp_path / "out" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert fig.axes[0].get_title().splitlines() == ["amn.pt on ci.txt, first 600 words", SHOWS[name]], name
    # without settings: only what the plot shows
    assert [f.axes[0].get_title() for f in analysis_figures(res).values()] == [SHOWS[n] for n in saved]
    assert analysis_title({"lm": "x/gru.pt", "text": "y/dev/"}) == "gru.pt on dev"


def test_plot_functions_take_a_title(tmp_path, monkeypatch):
    """The thin writers pass ``title`` through (callers elsewhere use them directly)."""
    from nbest_rescore.evaluation import plots

    saved = []
    save = plots.save_figure
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: saved.append(fig) or save(fig, path))
    a = _hand_made_amn()
    calls = [(plots.plot_attention_entropy, (a.entropy_counts, a.entropy_edges, a.entropy_max, a.entropy_mean)),
             (plots.plot_memcell_attention, (a.mean_attention,)), (plots.plot_memcell_cosine, (a.cosine,)),
             (plots.plot_memcell_perplexity, (a.memcell_perplexity, a.perplexity)),
             (plots.plot_window_attention, ((0.5, 0.5), "attention"))]
    for i, (fn, args) in enumerate(calls):
        out = tmp_path / f"{i}.png"
        assert fn(*args, out, title="T") == str(out) and out.read_bytes()[:4] == b"\x89PNG"
        assert saved[-1].axes[0].get_title().splitlines()[0] == "T", fn.__name__
