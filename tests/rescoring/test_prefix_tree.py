"""Prefix-tree scoring: the forest's structure against naive sets of prefixes, and the
same NN costs from ``tree``, ``padded`` and ``single`` scoring (and an independent
one-pass reference) with the trained tiny GRU and with small random models of every
registered name, from start states reached after reading a history."""

import numpy as np
import pytest
import torch

from nbest_rescore.models import MODEL_REGISTRY, build_model, load_model
from nbest_rescore.rescoring import prefix_tree
from nbest_rescore.rescoring.history_graph import scoring_graph
from nbest_rescore.rescoring.prefix_forest import build_forest
from nbest_rescore.rescoring.prefix_tree import frontier_rows, plan_segments
from nbest_rescore.rescoring.scorer import TREE_BYTES_PER_TOKEN, NnScorer
from nbest_rescore.vocab import Vocabulary

TOL = 1e-4  # nats


from tiny_models import EXTRA, SMALL  # noqa: E402  (tests/ is on sys.path, see conftest.py)


def ci_hyps(ci_nbest, n_utts=None, per_utt=None):
    """(rows, hyps): hypotheses of the first utterances, row = utterance index."""
    rows, hyps = [], []
    for i, u in enumerate(ci_nbest.utterances[:n_utts]):
        for h in u.hyps[:per_utt]:
            rows.append(i)
            hyps.append(h)
    return rows, hyps


def with_edge_cases(rows, hyps):
    """Adds empty hypotheses (two of them in one utterance) and duplicates, some of
    them placed far from their twin."""
    extra = [(rows[0], ()), (rows[-1], ()), (rows[-1], ()), (rows[0], hyps[0]),
             (rows[-1], hyps[-1]), (rows[0], hyps[0][:2])]
    rows = list(rows) + [r for r, _ in extra]
    hyps = list(hyps) + [h for _, h in extra]
    return rows, hyps


# -- structure ------------------------------------------------------------------------

@pytest.mark.parametrize("same_row", [False, True])
def test_forest_nodes_are_the_distinct_prefixes(ci_nbest, same_row):
    rows, hyps = ci_hyps(ci_nbest)
    if same_row:  # history "none": every utterance starts from the same row
        rows = [0] * len(rows)
    vocab = Vocabulary(["</s>", "<unk>"] + sorted({w for h in hyps for w in h}))
    seqs = [vocab.encode(h) for h in hyps]
    f = build_forest(seqs, rows, vocab.eos)
    naive = {(r, tuple(s[:k])) for r, s in zip(rows, seqs) for k in range(len(s) + 1)}
    assert f.num_nodes == len(naive)
    assert f.num_trees == len(set(rows))
    assert f.num_list_tokens == sum(len(s) + 1 for s in seqs)
    assert f.num_nodes * 2.5 < f.num_list_tokens  # N-best lists share most prefixes
    n_roots = f.num_trees
    assert (f.parent[:n_roots] == -1).all() and (f.word[:n_roots] == vocab.eos).all()
    kids = np.arange(n_roots, f.num_nodes)
    p = f.parent[kids]
    assert (p < kids).all() and (f.depth[kids] == f.depth[p] + 1).all()
    assert ((f.child_start[p] <= kids) & (kids < f.child_start[p + 1])).all()
    assert f.num_children.sum() == f.num_nodes - n_roots
    # every hypothesis is its root-to-end path, from its own start row
    for r, s, node in zip(rows, seqs, f.end_node):
        path = []
        while f.parent[node] >= 0:
            path.append(int(f.word[node]))
            node = f.parent[node]
        assert path[::-1] == s and f.row[node] == r


@pytest.mark.parametrize("max_segment", [1, 3, 1000])
def test_plan_reads_every_node_once_within_budgets(ci_nbest, max_segment):
    rows, hyps = with_edge_cases(*ci_hyps(ci_nbest, 5))
    vocab = Vocabulary(["</s>", "<unk>"] + sorted({w for h in hyps for w in h}))
    f = build_forest([vocab.encode(h) for h in hyps], rows, vocab.eos)
    read, dst = [], []
    g = scoring_graph(f, vocab.eos)
    for chunks in plan_segments(g, vocab.eos, max_rows=37, max_tokens=200, max_segment=max_segment):
        for c in chunks:
            b, t = c.tokens.shape
            assert b <= 37 and (b * t <= 200 or b == 1) and t <= max_segment
            read.append(c.tokens.reshape(-1) if c.valid is None else c.tokens.reshape(-1)[c.valid])
            dst.append(c.g_dst)
    read, dst = np.concatenate(read), np.concatenate(dst)
    assert len(read) == f.num_nodes and sorted(read.tolist()) == sorted(f.word.tolist())
    # each pair is gathered exactly once: one per non-root node (its word after its parent) and
    # one per distinct end (</s> after it)
    assert sorted(dst.tolist()) == list(range(g.num_pairs))
    assert g.num_pairs == f.num_nodes - f.num_trees + len(set(f.end_node.tolist()))
    assert (g.pair_word[g.node_pair[f.num_trees:]] == f.word[f.num_trees:]).all()
    assert (g.pair_word[g.end_pair] == vocab.eos).all()


# -- equal costs ----------------------------------------------------------------------

def history_states(scorer, ci_nbest, n):
    """Start states of n rows, each after reading the first-pass 1-best of two other
    ci utterances (so not the initial state)."""
    u = ci_nbest.utterances
    st = scorer.initial_state(n)
    for k in (1, 2):
        st = scorer.advance(st, [u[(i + 7 * k) % len(u)].hyps[0] for i in range(n)])
    return st, [[u[(i + 7 * k) % len(u)].hyps[0] for k in (1, 2)] for i in range(n)]


def one_pass_cost(model, vocab, history, hyp):
    """Independent reference: history and hypothesis read as one sequence from the
    initial state; the cost of the hypothesis' words and </s>."""
    ids = [vocab.eos]
    for h in history:
        ids += vocab.encode(h) + [vocab.eos]
    start = len(ids) - 1
    ids += vocab.encode(hyp) + [vocab.eos]
    x = torch.tensor(ids)[None]
    with torch.inference_mode():
        lp, _ = model.log_probs(x[:, :-1], x[:, 1:], model.init_state(1))
    return -float(lp[0, start:].double().sum())


def all_modes(model, vocab, rows, hyps, states, **kw):
    out = {}
    for mode, seg in (("tree", 1), ("tree", 3), ("padded", 1), ("single", 1)):
        sc = NnScorer(model, vocab, mode=mode, max_segment=seg, **kw)
        out[f"{mode}{seg}"] = sc.costs(states, rows, hyps)
    return out


def check_equal(costs, rows, hyps):
    ref = costs["single1"]
    assert np.isfinite(ref).all() and (ref > 0).all()
    for name, c in costs.items():
        assert np.abs(c - ref).max() <= TOL, name
    # duplicates (empty ones included) score exactly the same
    first = {}
    for i, key in enumerate(zip(rows, hyps)):
        j = first.setdefault(key, i)
        assert costs["tree1"][i] == costs["tree1"][j]


def test_tiny_gru_same_costs_in_every_mode(ci_nbest, tiny_lm):
    model, vocab, _ = load_model(tiny_lm)
    rows, hyps = with_edge_cases(*ci_hyps(ci_nbest, 6, 50))  # 306 hypotheses: 5 batches of 64
    sc = NnScorer(model, vocab)
    states, histories = history_states(sc, ci_nbest, 6)
    costs = all_modes(model, vocab, rows, hyps, states, batch_size=64, max_tokens=512)
    check_equal(costs, rows, hyps)
    for i in (0, 1, 57, 250, len(hyps) - 6, len(hyps) - 3, len(hyps) - 1):
        ref = one_pass_cost(model, vocab, histories[rows[i]], hyps[i])
        assert abs(costs["tree1"][i] - ref) <= TOL, i


def test_tree_equals_padded_across_utterances(ci_nbest, tiny_lm):
    """30 ci utterances in one call, all from the initial state (history none: one
    tree shared across utterances)."""
    model, vocab, _ = load_model(tiny_lm)
    rows, hyps = ci_hyps(ci_nbest, 30)
    st = model.init_state(1)
    rows = [0] * len(rows)
    tree = NnScorer(model, vocab).costs(st, rows, hyps)
    padded = NnScorer(model, vocab, mode="padded", max_tokens=2048).costs(st, rows, hyps)
    assert np.abs(tree - padded).max() <= TOL


@pytest.mark.parametrize("name", sorted(MODEL_REGISTRY) + ["gru+cache"])
def test_random_models_same_costs_in_every_mode(ci_nbest, name):
    rows, hyps = with_edge_cases(*ci_hyps(ci_nbest, 3, 20))  # 66 hypotheses: 5 batches of 16
    counts = {}
    for h in hyps:
        for w in h:
            counts[w] = counts.get(w, 0) + 1
    # a small vocabulary: frequent words plus <unk> for the rest
    vocab = Vocabulary(["</s>", "<unk>"] + sorted(sorted(counts, key=lambda w: -counts[w])[:60]))
    torch.manual_seed(0)
    base = name.split("+")[0]
    model = build_model(base, {**SMALL, **EXTRA.get(base, {})}, len(vocab)).eval()
    if name.endswith("+cache"):
        from nbest_rescore.models.cache import with_cache

        model = with_cache(model, 6, 0.5, 0.2)
    sc = NnScorer(model, vocab)
    states, histories = history_states(sc, ci_nbest, 3)
    costs = all_modes(model, vocab, rows, hyps, states, batch_size=16, max_tokens=100)
    check_equal(costs, rows, hyps)
    for i in (0, 31, len(hyps) - 1):
        assert abs(costs["tree1"][i] - one_pass_cost(model, vocab, histories[rows[i]], hyps[i])) <= TOL


def test_tree_groups_bound_the_frontier(ci_nbest, tiny_lm):
    """A tiny state budget splits the call into groups of hypotheses: same costs."""
    model, vocab, _ = load_model(tiny_lm)
    rows, hyps = ci_hyps(ci_nbest, 4)
    st = model.init_state(4)
    whole = NnScorer(model, vocab).costs(st, rows, hyps)
    split = NnScorer(model, vocab, batch_size=8, state_budget_bytes=4096).costs(st, rows, hyps)
    assert np.abs(whole - split).max() <= TOL


def test_bad_mode_and_sizes_are_rejected(tiny_lm):
    model, vocab, _ = load_model(tiny_lm)
    with pytest.raises(ValueError, match="scoring mode"):
        NnScorer(model, vocab, mode="fast")
    with pytest.raises(ValueError, match=">= 1"):
        NnScorer(model, vocab, max_segment=0)
    sc = NnScorer(model, vocab)
    assert len(sc.costs(sc.initial_state(1), [], [])) == 0


# -- memory bounds --------------------------------------------------------------------

def small_gru(hyps):
    """A random small GRU over the words of ``hyps`` (plus </s>, <unk>)."""
    vocab = Vocabulary(["</s>", "<unk>"] + sorted({w for h in hyps for w in h}))
    torch.manual_seed(0)
    return build_model("gru", SMALL, len(vocab)).eval(), vocab


@pytest.mark.parametrize("same_row", [False, True])
def test_frontier_rows_is_what_score_forest_keeps(ci_nbest, monkeypatch, same_row):
    """frontier_rows against a naive count (prefixes of d words that some hypothesis
    extends = states kept after depth d) and against the rows score_forest gathers."""
    rows, hyps = with_edge_cases(*ci_hyps(ci_nbest, 8))
    if same_row:
        rows = [0] * len(rows)
    model, vocab = small_gru(hyps)
    seqs = [vocab.encode(h) for h in hyps]
    kept = [len({(r, tuple(s[:d])) for r, s in zip(rows, seqs) if len(s) > d})
            for d in range(max(map(len, seqs)))]
    naive = max(a + b for a, b in zip([0] + kept, kept))
    f = build_forest(seqs, rows, vocab.eos)
    assert frontier_rows(plan_segments(scoring_graph(f, vocab.eos), vocab.eos, 16, 10**6, 1)) == naive
    # score_forest: rows kept per level = rows of each cat_states result
    made = []

    def recording_cat(parts):
        out = prefix_tree_cat(parts)
        made.append(out[0].shape[0])
        return out

    prefix_tree_cat = prefix_tree.cat_states
    monkeypatch.setattr(prefix_tree, "cat_states", recording_cat)
    for seg in (1, 3):
        made.clear()
        plans = plan_segments(scoring_graph(f, vocab.eos), vocab.eos, 16, 100, seg)
        with torch.inference_mode():
            prefix_tree.score_forest(model, scoring_graph(f, vocab.eos), model.init_state(max(rows) + 1), vocab.eos, 16, 100, seg)
        assert frontier_rows(plans) == max(a + b for a, b in zip([0] + made, made))
    assert made and max(made) <= len(hyps)


@pytest.mark.parametrize("budget_rows,budget_tokens", [(8, 10**9), (10**9, 120), (10, 150), (10**9, 12)])
def test_tree_forests_split_calls_within_both_budgets(ci_nbest, budget_rows, budget_tokens):
    """Groups are consecutive, cover every hypothesis once, hold at most the state
    budget's hypotheses and (unless one hypothesis alone) the token budget's list tokens,
    and are as large as both allow; the costs equal those of one forest."""
    rows, hyps = with_edge_cases(*ci_hyps(ci_nbest, 3, 20))
    model, vocab = small_gru(hyps)
    st = model.init_state(3)
    row_bytes = sum(s[:1].numel() * s.element_size() for s in st)
    budget = min(budget_rows * 2 * row_bytes, budget_tokens * TREE_BYTES_PER_TOKEN)
    sc = NnScorer(model, vocab, batch_size=4, state_budget_bytes=budget)
    max_hyps = max(4, budget // (2 * row_bytes))
    max_tokens = budget // TREE_BYTES_PER_TOKEN
    seqs = sc.encode(hyps)
    tokens = [len(s) + 1 for s in seqs]
    nxt, n_groups = 0, 0
    for sl, forest in sc.tree_forests(st, rows, seqs):
        assert sl.start == nxt and sl.stop > sl.start and len(forest.end_node) == sl.stop - sl.start
        n = sl.stop - sl.start
        assert n <= max_hyps and (n == 1 or sum(tokens[sl]) <= max_tokens)
        if sl.stop < len(seqs):  # one more hypothesis would break a budget
            assert n == max_hyps or sum(tokens[sl.start:sl.stop + 1]) > max_tokens
        nxt, n_groups = sl.stop, n_groups + 1
    assert nxt == len(seqs) and n_groups > 1
    whole = NnScorer(model, vocab, batch_size=4, state_budget_bytes=2**40).costs(st, rows, hyps)
    assert np.abs(sc.costs(st, rows, hyps) - whole).max() <= TOL
