"""Prefix-tree scoring through the adaptive softmax (``output: adaptive``): each node's
head once, a tail cluster only on the nodes with a child word in it. Checked on the
ci lists with the benchmark's 43k-word vocabulary (random weights, the CPU recipe's
cutoffs [2943, 14651]) against an independent reference (each hypothesis run over its
padded sentence, ``adaptive.log_prob`` gathered at its targets): every node's
log-probability to 1e-5, every hypothesis' cost to 1e-4."""

import numpy as np
import pytest
import torch

from nbest_rescore.models import build_model
from nbest_rescore.models.output_layer import cluster_of
from nbest_rescore.models.base import select_state
from nbest_rescore.rescoring import prefix_tree
from nbest_rescore.rescoring.history_graph import scoring_graph
from nbest_rescore.rescoring.prefix_forest import build_forest
from nbest_rescore.rescoring.prefix_tree import pair_log_probs
from nbest_rescore.rescoring.scorer import NnScorer
from nbest_rescore.vocab import Vocabulary

CUTOFFS = [2943, 14651]
TOK_TOL = 1e-5  # nats per log-probability
HYP_TOL = 1e-4  # nats per hypothesis

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def vocab43k(DATA):
    return Vocabulary.from_file(DATA / "lm" / "vocab.txt")


@pytest.fixture(scope="module")
def adaptive_gru(vocab43k):
    torch.manual_seed(0)
    model = build_model("gru", {"embedding_dim": 16, "hidden_size": 16, "output": "adaptive",
                                "adaptive_cutoffs": CUTOFFS, "adaptive_div_value": 2.0}, len(vocab43k))
    with torch.no_grad():  # larger logits than the default init: log-probs far from uniform
        for p in model.adaptive.parameters():
            p.mul_(4.0)
    return model.eval()


def ci_rows_seqs(ci_nbest, vocab, n_utts=None, per_utt=None):
    rows, seqs = [], []
    for i, u in enumerate(ci_nbest.utterances[:n_utts]):
        for h in u.hyps[:per_utt]:
            rows.append(i)
            seqs.append(vocab.encode(h))
    # an empty hypothesis, a duplicate and a prefix of another hypothesis
    return rows + [0, 0, 1], seqs + [[], seqs[0], seqs[-1][:3]]


def start_states(model, n):
    """n distinct start states: row i after reading i + 1 random words."""
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, model.vocab_size, (n, n + 1), generator=g)
    with torch.inference_mode():
        return model(x, model.init_state(n), torch.arange(1, n + 1)).state


@torch.inference_mode()
def reference_token_logp(model, states, rows, seqs, batch=48):
    """Independent reference: each hypothesis ``</s> w_1 .. w_n`` run over a padded
    batch from its start state, the full ``adaptive.log_prob`` gathered at the targets
    ``w_1 .. w_n </s>``. Returns one float32 array [n + 1] per hypothesis."""
    out = []
    for a in range(0, len(seqs), batch):
        part = seqs[a:a + batch]
        t = max(len(s) for s in part) + 1
        x = torch.zeros(len(part), t + 1, dtype=torch.long)  # </s> = 0 is also the padding
        for b, s in enumerate(part):
            x[b, 1:len(s) + 1] = torch.tensor(s, dtype=torch.long)
        st = select_state(states, torch.tensor(rows[a:a + batch]))
        feats = model(x[:, :-1], st).features  # [B, t, D]
        logp = model.adaptive.log_prob(feats.reshape(-1, feats.shape[-1])).view(len(part), t, -1)
        tgt = logp.gather(-1, x[:, 1:].unsqueeze(-1)).squeeze(-1)
        out += [tgt[b, :len(s) + 1].numpy().copy() for b, s in enumerate(part)]
    return out


def path_nodes(forest, i, n):
    """Nodes of hypothesis i's path below the root, in word order."""
    node, path = int(forest.end_node[i]), []
    for _ in range(n):
        path.append(node)
        node = int(forest.parent[node])
    return path[::-1]


def score_recording(model, forest, states, monkeypatch, **kw):
    """score_forest's costs (graph.costs of pair_log_probs) and the log-probabilities it
    used, laid out per node [2N]:
    ``[n]`` log P(word of n | parent prefix) (0 at roots), ``[N + n]`` log P(</s> | prefix n)
    where a hypothesis ends."""
    graph = scoring_graph(forest, 0)
    with torch.inference_mode():
        pairs = pair_log_probs(model, graph, states, 0, **kw)
    costs = graph.costs(pairs)
    logp = np.zeros(2 * forest.num_nodes)
    logp[:forest.num_nodes] = graph.node_log_probs(pairs)
    logp[forest.num_nodes + forest.end_node] = pairs[graph.end_pair]
    return costs, logp


def never_full(model, monkeypatch):
    """Make the full [rows, V] distribution fail: the tree must not build it."""
    def boom(*a, **k):
        raise AssertionError("the full adaptive distribution was computed")

    monkeypatch.setattr(model.adaptive, "log_prob", boom)
    monkeypatch.setattr(model.output, "logits", boom)


def node_logp_of(forest, logp, i, n):
    """The log-probabilities score_forest used for hypothesis i (n words): its path's
    nodes, then </s> at its end node."""
    return np.append(logp[path_nodes(forest, i, n)], logp[forest.num_nodes + forest.end_node[i]])


def test_ci_tree_log_probs_equal_the_full_computation(ci_nbest, vocab43k, adaptive_gru, monkeypatch):
    """All 60 ci lists (6,000 hypotheses) in one forest. The full-distribution reference
    (43k values per position, the slow part) covers every 16th hypothesis of each list
    and the edge cases, whose paths hold nodes that need the head only, one tail or
    both tails."""
    model = adaptive_gru
    rows, seqs = ci_rows_seqs(ci_nbest, vocab43k)
    states = start_states(model, len(ci_nbest.utterances))
    forest = build_forest(seqs, rows, vocab43k.eos)
    kids = np.arange(forest.num_trees, forest.num_nodes)
    cl = cluster_of(model.adaptive, torch.from_numpy(forest.word[kids])).numpy()
    uses = np.zeros((forest.num_nodes, 3), dtype=bool)
    uses[forest.parent[kids], cl] = True
    uses[forest.end_node, 0] = True  # </s> is a head word
    tails = uses[:, 1:].sum(1)
    assert (tails == 0).sum() > 1000 and (tails == 1).sum() > 1000 and (tails == 2).sum() > 100
    assert (uses[:, 0] & (tails == 0)).any() and (~uses[:, 0] & (tails == 1)).any()

    never_full(model, monkeypatch)
    costs, logp = score_recording(model, forest, states, monkeypatch)
    monkeypatch.undo()
    sample = [i for i in range(len(seqs)) if i % 16 == 0 or i >= len(seqs) - 3]
    # the nodes whose predictions the sample checks (roots and the path's prefixes)
    read = np.unique(np.concatenate([[forest.parent[path_nodes(forest, i, len(seqs[i]))[0]]
                                      if seqs[i] else forest.end_node[i]]
                                     + path_nodes(forest, i, len(seqs[i])) for i in sample]))
    assert set(tails[read]) == {0, 1, 2}
    ref = reference_token_logp(model, states, [rows[i] for i in sample], [seqs[i] for i in sample])
    worst_tok = max(float(np.abs(node_logp_of(forest, logp, i, len(seqs[i])) - r).max())
                    for i, r in zip(sample, ref))
    assert worst_tok <= TOK_TOL, worst_tok
    ref_cost = np.array([-r.astype(np.float64).sum() for r in ref])
    assert np.abs(costs[sample] - ref_cost).max() <= HYP_TOL
    assert costs[-2] == costs[0]  # a duplicate


@pytest.mark.parametrize("kw", [{"max_segment": 3, "max_rows": 50, "max_tokens": 300},
                                {"self_normalized": True}], ids=["segments", "self-normalized"])
def test_other_tree_settings_same_log_probs(ci_nbest, vocab43k, adaptive_gru, monkeypatch, kw):
    """Multi-token segments and small calls, or the self-normalised flag (exact anyway
    for the adaptive softmax): the same per-node log-probabilities, against the full
    reference, on 10 ci lists."""
    model = adaptive_gru
    rows, seqs = ci_rows_seqs(ci_nbest, vocab43k, 10, 40)
    states = start_states(model, 10)
    forest = build_forest(seqs, rows, vocab43k.eos)
    ref = reference_token_logp(model, states, rows, seqs)
    never_full(model, monkeypatch)
    costs, logp = score_recording(model, forest, states, monkeypatch, **kw)
    for i, r in enumerate(ref):
        assert np.abs(node_logp_of(forest, logp, i, len(seqs[i])) - r).max() <= TOK_TOL, i
    assert np.abs(costs - np.array([-r.astype(np.float64).sum() for r in ref])).max() <= HYP_TOL
    # through the scorer: tree (self-normalised or not) and padded (torch's target-wise
    # adaptive softmax) give the same costs
    monkeypatch.undo()
    hyps = [[vocab43k.words[w] for w in s] for s in seqs]
    output = "self-normalized" if kw.get("self_normalized") else "softmax"
    for mode in ("tree", "padded"):
        got = NnScorer(model, vocab43k, mode=mode, output=output).costs(states, rows, hyps)
        assert np.abs(got - costs).max() <= HYP_TOL, mode


def test_tails_run_only_on_the_nodes_that_need_them(vocab43k, adaptive_gru, monkeypatch):
    """Hand-made trees: a node whose children are head words only, one whose children
    are in one tail, one with children in both tails (and the head); every tail
    projection sees exactly the nodes with a child (or </s>) in its cluster."""
    model = adaptive_gru
    c0, c1 = CUTOFFS
    v = model.vocab_size
    h_, t1, t2 = [5, 17, 2942], [c0, c0 + 100, c1 - 1], [c1, c1 + 7, v - 1]
    seqs = [[3, h_[0]], [3, h_[1]], [3, h_[2]],              # node "3": head children only
            [4, t1[0]], [4, t1[1]], [4, t1[2]],              # node "4": tail 1 only
            [t2[0], 9], [t2[0], t2[1]],                      # node t2[0]: head + tail 2
            [6, h_[0]], [6, t1[0]], [6, t2[2]], [6],         # node "6": head, both tails, </s>
            [t1[1], t2[1], t1[2]]]
    rows = [0] * 8 + [1] * 5
    states = start_states(model, 2)
    ref = reference_token_logp(model, states, rows, seqs)
    forest = build_forest(seqs, rows, 0)
    seen = {0: [], 1: []}
    hooks = [model.adaptive.tail[i].register_forward_hook(
        # distinct rows: a call is padded with copies of its first row up to safe_rows (models.rows)
        lambda mod, inp, out, i=i: seen[i].append(torch.unique(inp[0], dim=0).shape[0])) for i in (0, 1)]
    try:
        never_full(model, monkeypatch)
        costs, logp = score_recording(model, forest, states, monkeypatch)
    finally:
        for hk in hooks:
            hk.remove()
    ref_cost = np.array([-r.astype(np.float64).sum() for r in ref])
    assert np.abs(costs - ref_cost).max() <= HYP_TOL
    for i, (s, r) in enumerate(zip(seqs, ref)):
        assert np.abs(node_logp_of(forest, logp, i, len(s)) - r).max() <= TOK_TOL, i
    # nodes with a child in tail cluster i (roots included), counted from the forest
    kids = np.arange(forest.num_trees, forest.num_nodes)
    cl = cluster_of(model.adaptive, torch.from_numpy(forest.word[kids])).numpy()
    for i in (0, 1):
        need = len(np.unique(forest.parent[kids[cl == i + 1]]))
        assert sum(seen[i]) == need, (i, seen[i], need)
    assert sum(seen[0]) + sum(seen[1]) < forest.num_nodes


def test_int8_and_bfloat16_adaptive_tree_run_close_to_exact(ci_nbest, vocab43k, adaptive_gru):
    model = adaptive_gru
    rows, seqs = ci_rows_seqs(ci_nbest, vocab43k, 4, 30)
    hyps = [[vocab43k.words[w] for w in s] for s in seqs]
    st = model.init_state(4)
    exact = NnScorer(model, vocab43k).costs(st, rows, hyps)
    per_tok = sum(len(s) + 1 for s in seqs)
    for opt in ({"quantize": "int8"}, {"dtype": "bfloat16"}):
        approx = NnScorer(model, vocab43k, **opt).costs(st, rows, hyps)
        padded = NnScorer(model, vocab43k, mode="padded", **opt).costs(st, rows, hyps)
        assert np.isfinite(approx).all()
        assert np.abs(approx - exact).sum() / per_tok < 0.1, opt
        assert np.abs(padded - exact).sum() / per_tok < 0.1, opt


def test_cache_around_an_adaptive_model_scores_through_its_logits(ci_nbest, vocab43k, adaptive_gru):
    from nbest_rescore.models.cache import with_cache

    rows, seqs = ci_rows_seqs(ci_nbest, vocab43k, 2, 10)
    hyps = [[vocab43k.words[w] for w in s] for s in seqs]
    model = with_cache(adaptive_gru, 6, 0.5, 0.2)
    assert not prefix_tree._adaptive_pairs(model) and prefix_tree._adaptive_pairs(adaptive_gru)
    st = model.init_state(2)
    tree = NnScorer(model, vocab43k).costs(st, rows, hyps)
    single = NnScorer(model, vocab43k, mode="single").costs(st, rows, hyps)
    assert np.abs(tree - single).max() <= HYP_TOL


def test_self_normalized_output_says_the_adaptive_costs_are_exact(vocab43k, adaptive_gru, caplog):
    import logging

    with caplog.at_level(logging.WARNING):
        NnScorer(adaptive_gru, vocab43k, output="self-normalized", model_info={})
    assert "exactly normalised" in caplog.text and "log Z" not in caplog.text
