"""History merging (``score --max-ngram-order K``): the merged costs against an
independent, Kaldi-style reference (a dictionary from word-sequence histories of at most
K - 1 items, the utterance start counting as one, to LM states, each created once by the
first path that reaches it, as ``KaldiRnnlmDeterministicFst::GetArc``), the positions
it reads, exactness for K above the longest hypothesis, and the refusals."""

import numpy as np
import pytest
import torch

from nbest_rescore.errors import DataError
from nbest_rescore.models import build_model
from nbest_rescore.options import ScorerOptions
from nbest_rescore.rescoring.hf_scorer import check_hf_options
from nbest_rescore.rescoring.history_graph import scoring_graph
from nbest_rescore.rescoring.prefix_forest import build_forest
from nbest_rescore.rescoring.scorer import NnScorer
from nbest_rescore.vocab import Vocabulary

from test_prefix_tree import ci_hyps, history_states, with_edge_cases  # noqa: E402  (tests/rescoring on sys.path)
from tiny_models import EXTRA, SMALL  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
BOS = -1  # the utterance start in a reference history


@pytest.fixture(scope="module")
def lists(ci_nbest):
    """(rows, hyps, vocab, model): 8 ci lists with empty hypotheses and duplicates, and a
    random GRU (full softmax) over their words."""
    rows, hyps = with_edge_cases(*ci_hyps(ci_nbest, 8))
    vocab = Vocabulary(["</s>", "<unk>"] + sorted({w for h in hyps for w in h}))
    torch.manual_seed(0)
    return rows, hyps, vocab, build_model("gru", SMALL, len(vocab)).eval()


@torch.inference_mode()
def kaldi_style_costs(model, vocab, states, rows, seqs, order):
    """(costs [H], states created): each hypothesis walks its words; the history after a
    word is the last ``order - 1`` items of (start, words so far); a history's LM state
    and distribution are made once, the first time a path reaches it, the paths advanced
    one word at a time (all hypotheses' word d, in list order, before word d + 1)."""
    eos = vocab.eos

    def step(state, word):
        out = model(torch.tensor([[word]]), state)
        return out.state, torch.log_softmax(model.logits(out.features), -1)[0, 0].double().numpy()

    table = {}
    for r in sorted(set(rows)):
        table[(r, (BOS,))] = step(tuple(s[r:r + 1] for s in states), eos)
    hist = [(r, (BOS,)) for r in rows]
    costs = np.zeros(len(seqs))
    for d in range(max(map(len, seqs)) + 1):
        for i, s in enumerate(seqs):
            if d > len(s):
                continue
            state, logp = table[hist[i]]
            if d == len(s):
                costs[i] -= logp[eos]
                continue
            costs[i] -= logp[s[d]]
            items = hist[i][1] + (s[d],)
            new = (hist[i][0], items[max(0, len(items) - (order - 1)):])
            if new not in table:
                table[new] = step(state, s[d])
            hist[i] = new
    return costs, len(table)


@pytest.mark.parametrize("order", [2, 3, 5])
def test_merged_costs_equal_the_kaldi_style_reference(lists, ci_nbest, order):
    rows, hyps, vocab, model = lists
    sc = NnScorer(model, vocab, max_ngram_order=order)
    states, _ = history_states(sc, ci_nbest, max(rows) + 1)
    seqs = sc.encode(hyps)
    want, created = kaldi_style_costs(model, vocab, states, rows, seqs, order)
    got = sc.costs(states, rows, hyps)
    assert np.abs(got - want).max() <= 1e-4
    assert sc.positions == created  # one LM position per history state
    # chains of single-child states read as segments: the same costs
    seg = NnScorer(model, vocab, max_ngram_order=order, max_segment=4).costs(states, rows, hyps)
    assert np.abs(seg - got).max() <= 1e-4


def test_positions_grow_with_the_order_up_to_the_exact_tree(lists):
    rows, hyps, vocab, _ = lists
    seqs = [vocab.encode(h) for h in hyps]
    forest = build_forest(seqs, rows, vocab.eos)
    longest = max(map(len, seqs))
    counts = [scoring_graph(forest, vocab.eos, k).states.num_nodes for k in range(2, longest + 3)]
    assert counts == sorted(counts) and counts[0] < forest.num_nodes / 4
    assert counts[-2] == counts[-1] == forest.num_nodes  # K - 1 >= longest: nothing merges
    assert counts[0] < counts[2] < forest.num_nodes


def test_an_order_above_the_longest_hypothesis_is_exact_scoring(lists, ci_nbest):
    rows, hyps, vocab, model = lists
    longest = max(map(len, hyps))
    exact = NnScorer(model, vocab)
    states, _ = history_states(exact, ci_nbest, max(rows) + 1)
    merged = NnScorer(model, vocab, max_ngram_order=longest + 1)
    assert (merged.costs(states, rows, hyps) == exact.costs(states, rows, hyps)).all()
    assert merged.positions == exact.positions
    assert merged.settings()["max_ngram_order"] == longest + 1 and exact.settings()["max_ngram_order"] is None
    zero = NnScorer(model, vocab, max_ngram_order=0)  # Kaldi's "no limit"
    assert (zero.costs(states, rows, hyps) == exact.costs(states, rows, hyps)).all()
    assert zero.settings()["max_ngram_order"] is None


def test_where_histories_cannot_merge_the_option_is_refused(lists):
    _, _, vocab, model = lists
    with pytest.raises(DataError, match="--max-ngram-order 3 .* --scoring is padded"):
        NnScorer(model, vocab, mode="padded", max_ngram_order=3)
    torch.manual_seed(0)
    transformer = build_model("transformer", {**SMALL, **EXTRA["transformer"]}, len(vocab))
    with pytest.raises(DataError, match="transformer LM's state is a window"):
        NnScorer(transformer, vocab, max_ngram_order=3)
    with pytest.raises(DataError, match="hf: LM's state"):
        check_hf_options("cpu", ScorerOptions(max_ngram_order=4))
    with pytest.raises(DataError, match="--max-ngram-order 1 would score every word from the list's start state"):
        ScorerOptions(max_ngram_order=1)
    with pytest.raises(DataError, match="--max-ngram-order must be an integer >= 0"):
        ScorerOptions(max_ngram_order=-1)
