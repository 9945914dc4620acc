"""Fast, approximate N-best scoring (``NnScorer(output=, quantize=, dtype=)`` and the
``score`` options): self-normalised costs equal in every mode and equal to an
independent sum of features . W[target] + b; exact minus self-normalised cost is the
sum of log Z; int8/bfloat16 costs close to float32; the CLI records the settings and
refuses impossible combinations cleanly."""
import json
import logging

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from nbest_rescore.cli import main
from nbest_rescore.errors import DataError
from nbest_rescore.io.score_ark import read_cost_ark
from nbest_rescore.models import MODEL_REGISTRY, build_model, load_model
from nbest_rescore.models.cache import with_cache
from nbest_rescore.rescoring.scorer import NnScorer, check_inference_options
from nbest_rescore.vocab import Vocabulary

TOL = 1e-4  # nats
# observed on the ci lists with the tiny GRU: int8 0.004, bfloat16 0.002 nats per token
APPROX_PER_TOKEN = 0.05

MODELS = [
    ("gru", {"embedding_dim": 12, "hidden_size": 10}),
    ("lstm", {"embedding_dim": 8, "hidden_size": 10, "num_layers": 2, "tie_weights": True}),  # projection
    ("amn", {"embedding_dim": 12, "hidden_size": 10, "num_memcells": 3}),
    ("transformer", {"embedding_dim": 12, "hidden_size": 10, "num_layers": 2, "num_heads": 2, "ff_dim": 16,
                     "window": 4, "dropout": 0.0}),
]


def ci_rows_hyps(ci_nbest, n_utts, per_utt=None):
    """Hypotheses of the first utterances (row = utterance), plus an empty hypothesis
    and a duplicate."""
    rows, hyps = [], []
    for i, u in enumerate(ci_nbest.utterances[:n_utts]):
        rows += [i] * len(u.hyps[:per_utt])
        hyps += list(u.hyps[:per_utt])
    return rows + [n_utts - 1, 0], hyps + [(), hyps[0]]


def small_vocab(hyps, n=60):
    counts = {}
    for h in hyps:
        for w in h:
            counts[w] = counts.get(w, 0) + 1
    return Vocabulary(["</s>", "<unk>"] + sorted(sorted(counts, key=lambda w: -counts[w])[:n]))


def history_states(model, vocab, ci_nbest, n):
    """Start states after reading two other ci 1-bests (and those histories)."""
    u = ci_nbest.utterances
    histories = [[u[(i + 7 * k) % len(u)].hyps[0] for k in (1, 2)] for i in range(n)]
    sc = NnScorer(model, vocab)
    st = sc.initial_state(n)
    for k in range(2):
        st = sc.advance(st, [h[k] for h in histories])
    return st, histories


@torch.no_grad()
def one_pass_terms(model, vocab, history, hyp):
    """Independent reference: history and hypothesis read as one sequence from the
    initial state. Returns float64 (sum over the hypothesis' words and </s> of
    features . W[target] + b[target], the sum of log Z, the sum of log P)."""
    ids = [vocab.eos]
    for h in history:
        ids += vocab.encode(h) + [vocab.eos]
    start = len(ids) - 1
    ids += vocab.encode(hyp) + [vocab.eos]
    x = torch.tensor(ids)[None]
    feats = model(x[:, :-1], model.init_state(1)).features[0, start:].double()
    if model.project is not None:  # tied weights: features -> embedding size
        feats = torch.nn.functional.linear(feats, model.project.weight.double(), model.project.bias.double())
    tgt = x[0, start + 1:]
    w, b = model.decoder.weight.double(), model.decoder.bias.double()
    target_logit = (feats * w[tgt]).sum(-1) + b[tgt]
    log_z = torch.logsumexp(feats @ w.T + b, -1)
    return float(target_logit.sum()), float(log_z.sum()), float((target_logit - log_z).sum())


def costs_by_mode(model, vocab, rows, hyps, states, **kw):
    out = {}
    for mode, seg in (("tree", 1), ("tree", 3), ("padded", 1), ("single", 1)):
        sc = NnScorer(model, vocab, mode=mode, max_segment=seg, batch_size=16, max_tokens=100, **kw)
        out[f"{mode}{seg}"] = sc.costs(states, rows, hyps)
    return out


@pytest.mark.parametrize("name,cfg", MODELS, ids=[m[0] for m in MODELS])
def test_self_normalized_costs_same_in_every_mode_and_equal_logit_sums(ci_nbest, name, cfg):
    rows, hyps = ci_rows_hyps(ci_nbest, 3, 30)
    vocab = small_vocab(hyps)
    torch.manual_seed(0)
    model = build_model(name, cfg, len(vocab)).eval()
    with torch.no_grad():  # a non-zero bias, so that b[target] is checked too
        model.decoder.bias.normal_(0, 0.5)
    states, histories = history_states(model, vocab, ci_nbest, 3)
    sn = costs_by_mode(model, vocab, rows, hyps, states, output="self-normalized")
    exact = NnScorer(model, vocab).costs(states, rows, hyps)
    for key, c in sn.items():
        assert np.abs(c - sn["single1"]).max() <= TOL, key
    assert sn["tree1"][-1] == sn["tree1"][0]  # a duplicate scores the same
    for i in (0, 17, 45, len(hyps) - 2, len(hyps) - 1):
        logit_sum, log_z_sum, logp_sum = one_pass_terms(model, vocab, histories[rows[i]], hyps[i])
        assert abs(sn["tree1"][i] + logit_sum) <= TOL, i
        assert abs(exact[i] + logp_sum) <= TOL, i
        assert abs((exact[i] - sn["tree1"][i]) - log_z_sum) <= TOL, i
    assert np.abs(exact - sn["tree1"]).min() > 1e-2  # really not normalised


def test_trained_gru_exact_minus_self_normalized_is_sum_of_log_z(ci_nbest, tiny_lm):
    model, vocab, info = load_model(tiny_lm)
    rows, hyps = ci_rows_hyps(ci_nbest, 4)
    states, histories = history_states(model, vocab, ci_nbest, 4)
    exact = NnScorer(model, vocab).costs(states, rows, hyps)
    sn = NnScorer(model, vocab, output="self-normalized", model_info=info).costs(states, rows, hyps)
    padded = NnScorer(model, vocab, mode="padded", output="self-normalized").costs(states, rows, hyps)
    assert np.abs(sn - padded).max() <= 1e-3  # float32 logits of size ~10 summed over ~30 tokens
    for i in (0, 99, 250, len(hyps) - 2, len(hyps) - 1):
        logit_sum, log_z_sum, _ = one_pass_terms(model, vocab, histories[rows[i]], hyps[i])
        assert abs(sn[i] + logit_sum) <= 1e-3, i
        assert abs((exact[i] - sn[i]) - log_z_sum) <= 1e-3, i


def test_cache_keeps_self_normalized_costs_exact(ci_nbest, caplog):
    rows, hyps = ci_rows_hyps(ci_nbest, 2, 20)
    vocab = small_vocab(hyps)
    torch.manual_seed(0)
    model = with_cache(build_model("gru", {"embedding_dim": 12, "hidden_size": 10}, len(vocab)), 6, 0.5, 0.2)
    st = model.init_state(2)
    with caplog.at_level(logging.WARNING):
        sn = NnScorer(model, vocab, output="self-normalized").costs(st, rows, hyps)
    assert "already normalised" in caplog.text
    assert np.abs(sn - NnScorer(model, vocab).costs(st, rows, hyps)).max() <= TOL


@pytest.mark.parametrize("option", [{"quantize": "int8"}, {"dtype": "bfloat16"}])
def test_int8_and_bfloat16_costs_close_to_float32(ci_nbest, tiny_lm, option, monkeypatch):
    from nbest_rescore.rescoring import scorer as scorer_mod

    # the bfloat16 output layer is chosen only on CPUs with bfloat16 dot products; it runs
    # (slower) on any CPU, so the path is taken here whatever this machine has
    monkeypatch.setattr(scorer_mod, "cpu_has_fast_bfloat16", lambda: True)
    model, vocab, _ = load_model(tiny_lm)
    rows, hyps = ci_rows_hyps(ci_nbest, 10)
    rows = [0] * len(rows)  # history none
    st = model.init_state(1)
    ref = NnScorer(model, vocab).costs(st, rows, hyps)
    approx = NnScorer(model, vocab, **option).costs(st, rows, hyps)
    assert model.embedding.weight.dtype == torch.float32  # the given model is untouched
    assert type(model.decoder) is torch.nn.Linear
    per_token = np.abs(approx - ref).sum() / sum(len(h) + 1 for h in hyps)
    assert 0 < per_token < APPROX_PER_TOKEN, per_token
    # the history path (advance) keeps the caller's float32 states
    sc = NnScorer(model, vocab, **option)
    nxt = sc.advance(sc.initial_state(2), [hyps[0], hyps[5]])
    assert all(s.dtype == s0.dtype for s, s0 in zip(nxt, sc.initial_state(2)))


@pytest.mark.parametrize("name", sorted(n for n in MODEL_REGISTRY if n != "hf"))
def test_int8_scores_every_family(ci_nbest, name):
    """Dynamic int8 quantisation scores every registered family (its Linear weights become
    methods: no model may read ``Linear.weight`` for its state), close to float32."""
    rows, hyps = ci_rows_hyps(ci_nbest, 3, 12)
    vocab = small_vocab(hyps)
    torch.manual_seed(0)
    model = build_model(name, {"embedding_dim": 16, "hidden_size": 16}, len(vocab)).eval()
    st = model.init_state(3)
    ref = NnScorer(model, vocab).costs(st, rows, hyps)
    approx = NnScorer(model, vocab, quantize="int8").costs(st, rows, hyps)
    assert np.isfinite(approx).all() and np.abs(approx - ref).max() < 0.5, name


def test_impossible_combinations_are_refused():
    for kw, msg in (({"device": "cuda:0", "quantize": "int8"}, "CPU only"),
                    ({"device": "cpu", "dtype": "float16"}, "CUDA only"),
                    ({"device": "cpu", "quantize": "int8", "dtype": "bfloat16"}, "float32"),
                    ({"device": "cpu", "output": "sampled"}, "softmax, self-normalized")):
        with pytest.raises(DataError, match=msg):
            check_inference_options(**kw)
    check_inference_options("cuda", dtype="float16")  # fine (availability is checked elsewhere)


@pytest.mark.parametrize("weight,expected", [(0.0, "trained without"), (0.1, None), ("missing", "unknown")])
def test_self_normalized_warns_unless_trained_for_it(weight, expected, caplog):
    vocab = Vocabulary(["</s>", "<unk>", "a"])
    model = build_model("gru", {"embedding_dim": 4, "hidden_size": 4}, len(vocab))
    info = {} if weight == "missing" else {"train_config": {"optim": {"self_norm_weight": weight}}}
    with caplog.at_level(logging.WARNING):
        NnScorer(model, vocab, output="self-normalized", model_info=info)
    if expected is None:
        assert "self-normalized" not in caplog.text
    else:
        assert expected in caplog.text


# -- command line -----------------------------------------------------------------------

def run(args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def small_lists(DATA, tmp_path_factory):
    """The first 8 ci utterances, 20 hypotheses each, as a Kaldi N-best directory."""
    d = tmp_path_factory.mktemp("nbest8")
    utts = [line.split()[0] for line in open(DATA / "ci" / "utt2doc")][:8]
    keep = set(utts) | {f"{u}-{n}" for u in utts for n in range(1, 21)}
    for name in ("text", "ac_cost", "lm_cost", "utt2doc", "ref.txt"):
        with open(DATA / "ci" / name, encoding="utf-8") as f:
            lines = [line for line in f if line.split(" ", 1)[0] in keep]
        (d / name).write_text("".join(lines), encoding="utf-8")
    return d


@pytest.fixture
def threads_restored():
    n = torch.get_num_threads()
    torch.set_num_threads(2)  # so that --threads 1 is seen to take effect
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("opts,expected", [
    ([], {"mode": "tree", "output": "softmax", "quantize": "none", "dtype": "float32"}),
    (["--output", "self-normalized"], {"mode": "tree", "output": "self-normalized"}),
    (["--quantize", "int8", "--scoring", "padded"], {"mode": "padded", "quantize": "int8"}),
    (["--dtype", "bfloat16"], {"dtype": "bfloat16", "quantize": "none"}),
])
def test_score_options_reach_the_scorer_and_wer_json(tiny_lm, small_lists, tmp_path, threads_restored,
                                                    opts, expected):
    res = run(["score", "--lm", tiny_lm, "--nbest", small_lists, "--ref", small_lists / "ref.txt",
               "--out", tmp_path, "--history", "none", "--no-progress", "--threads", "1", *opts])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert torch.get_num_threads() == 1
    settings = json.loads((tmp_path / "wer.json").read_text())["scoring"]
    assert settings["threads"] == 1
    assert {k: settings[k] for k in expected} == expected
    # the written costs are the library's with the same options (history none)
    model, vocab, _ = load_model(tiny_lm)
    from nbest_rescore.io.kaldi_nbest import read_kaldi_nbest_dir

    lists = read_kaldi_nbest_dir(small_lists)
    hyps = [h for u in lists.utterances for h in u.hyps]
    keys = [k for u in lists.utterances for k in u.keys]
    kw = {k: settings[k] for k in ("mode", "output", "quantize", "dtype")}
    sc = NnScorer(model, vocab, **kw)
    want = sc.costs(sc.initial_state(1), [0] * len(hyps), hyps)
    got = read_cost_ark(tmp_path / "nn_cost")
    assert np.abs(np.array([got[k] for k in keys]) - want).max() <= 1e-3


@pytest.mark.parametrize("opts,msg", [
    (["--dtype", "float16"], "float16 is for CUDA only"),
    (["--quantize", "int8", "--device", "cuda"], "int8 runs on the CPU only"),
    (["--quantize", "int8", "--dtype", "bfloat16"], "needs float32"),
])
def test_impossible_score_options_are_clean_errors(tiny_lm, small_lists, tmp_path, opts, msg):
    res = run(["score", "--lm", tiny_lm, "--nbest", small_lists, "--out", tmp_path / "o", *opts])
    assert res.exit_code == 1 and msg in res.output, res.output
    assert isinstance(res.exception, SystemExit) and "Traceback" not in res.output
    assert not (tmp_path / "o").exists()


def test_threads_option_of_ppl_and_bad_value(tiny_lm, DATA, threads_restored):
    res = run(["ppl", "--lm", tiny_lm, "--text", DATA / "lm" / "lm_valid.txt", "--max-words", "300",
               "--threads", "1"])
    assert res.exit_code == 0, res.output
    assert torch.get_num_threads() == 1 and json.loads(res.stdout)["perplexity"] > 1
    res = run(["ppl", "--lm", tiny_lm, "--text", DATA / "lm" / "lm_valid.txt", "--threads", "0"])
    assert res.exit_code == 2 and "--threads" in res.output
