"""A hypothesis' NN cost does not depend on which other hypotheses share its batches
(``nbest_rescore.models.rows``): on the real ci lists, every registered model, the
fused and the plain full softmax, the adaptive softmax, self-normalised output, chains,
padded batches and the neural cache, costs of the same lists scored all in one call,
one utterance per call and in another grouping and order are equal to the last bit
(float64 ``==``), and so are the start states that a batch of 1-best histories of
different lengths reaches against each history read alone, and the costs from them. One and two torch threads (the CI machine has two cores). The
sizes are hidden 64 over the 400 most frequent list words, wide enough for the CPU
GEMM to use its blocked kernels as the real models do."""
from collections import Counter

import numpy as np
import pytest
import torch

from nbest_rescore.models import MODEL_REGISTRY, build_model
from nbest_rescore.models.cache import with_cache
from nbest_rescore.models.rows import MIN_ROWS, ROW_MULTIPLE, pad_rows, safe_rows
from nbest_rescore.rescoring.scorer import NnScorer
from nbest_rescore.vocab import Vocabulary

from tiny_models import EXTRA  # noqa: E402  (tests/ is on sys.path, see conftest.py)

SIZE = {"embedding_dim": 32, "hidden_size": 64}
N_UTTS = 6
N_HYPS = 50  # the best 50 of each list: 300 rows in one call, 50 alone (both far above MIN_ROWS)


@pytest.fixture(scope="module")
def ci_vocab(ci_nbest):
    counts = Counter(w for u in ci_nbest.utterances for h in u.hyps for w in h)
    return Vocabulary(["</s>", "<unk>"] + sorted(w for w, _ in counts.most_common(400)))


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request):
    old = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(old)


def _model(family, vocab, **extra):
    torch.manual_seed(0)
    cfg = {**SIZE, **EXTRA.get(family, {}), **extra}
    if family == "transformer":
        cfg["ff_dim"] = 128
    model = build_model(family, cfg, len(vocab)).eval()
    with torch.no_grad():  # larger weights than the initialisation: far from uniform, long memory
        for p in model.parameters():
            p.mul_(3.0)
    return model


def _lists(ci_nbest):
    """(histories, lists): the 1-best of utterance i as the history of utterance i + 1
    (lengths differ), and the N_HYPS best of the N-best lists of utterances 1 .. N_UTTS."""
    utts = ci_nbest.utterances[:N_UTTS + 1]
    return [u.hyps[0] for u in utts[:-1]], [u.hyps[:N_HYPS] for u in utts[1:]]


def _costs_in_groups(scorer, states, lists, groups):
    """Costs of every hypothesis of ``lists`` (list i starting from state row i), one
    scorer call per group of list indices, in the order given; returned in list order."""
    out = [None] * len(lists)
    for group in groups:
        rows = [r for r, i in enumerate(group) for _ in lists[i]]
        hyps = [h for i in group for h in lists[i]]
        st = tuple(s[torch.as_tensor(group)] for s in states)
        costs = scorer.costs(st, rows, hyps)
        ends = np.cumsum([len(lists[i]) for i in group])
        for i, part in zip(group, np.split(costs, ends[:-1])):
            out[i] = part
    return np.concatenate(out)


def _check(scorer, ci_nbest):
    histories, lists = _lists(ci_nbest)
    together = scorer.advance(scorer.initial_state(len(histories)), histories)
    n = len(lists)
    one_call = _costs_in_groups(scorer, together, lists, [list(range(n))])
    ends = np.cumsum([len(x) for x in lists])
    for i, h in enumerate(histories):
        alone = scorer.advance(scorer.initial_state(1), [h])
        for a, b in zip(alone, together):  # (a cache's slots: as many as filled, empty ones in front)
            assert torch.equal(a[0], b[i][b.shape[1] - a.shape[1]:] if a.dim() > 1 else b[i]), \
                f"start state of history {i} read alone differs"
            assert a.dim() < 2 or not b[i][:b.shape[1] - a.shape[1]].any()
        costs = scorer.costs(alone, [0] * len(lists[i]), lists[i])
        assert np.array_equal(costs, one_call[ends[i] - len(lists[i]):ends[i]]), \
            f"list {i} from its history read alone: other costs"
    assert np.isfinite(one_call).all() and len(set(one_call.tolist())) > len(one_call) // 2
    for groups in ([[i] for i in range(n)], [[4, 1], [5, 0, 3], [2]]):
        other = _costs_in_groups(scorer, together, lists, groups)
        assert np.array_equal(other, one_call), \
            f"{int((other != one_call).sum())} of {len(one_call)} costs differ, largest by " \
            f"{np.abs(other - one_call).max():.3g} nats"


@pytest.mark.parametrize("family", sorted(MODEL_REGISTRY))
def test_costs_do_not_depend_on_the_batch(family, ci_nbest, ci_vocab, threads):
    _check(NnScorer(_model(family, ci_vocab), ci_vocab), ci_nbest)


@pytest.mark.parametrize("variant", ["plain softmax", "adaptive softmax", "self-normalized", "chains",
                                     "padded", "padded transformer", "neural cache"])
def test_output_variants_do_not_depend_on_the_batch(variant, ci_nbest, ci_vocab, threads):
    kw, extra = {}, {}
    if variant == "neural cache":  # a cache longer than the histories: its slots differ between calls
        _check(NnScorer(with_cache(_model("lstm", ci_vocab), 50), ci_vocab), ci_nbest)
        return
    if variant == "plain softmax":
        kw["softmax_impl"] = "plain"
    elif variant == "adaptive softmax":
        extra = {"output": "adaptive", "adaptive_cutoffs": [60, 200], "adaptive_div_value": 2.0}
    elif variant == "self-normalized":
        kw["output"] = "self-normalized"
    elif variant == "chains":
        kw["max_segment"] = 4
    else:  # small batches: the last batch of a call holds a few hypotheses
        kw.update(mode="padded", batch_size=7)
    family = "transformer" if variant == "padded transformer" else "lstm"
    _check(NnScorer(_model(family, ci_vocab, **extra), ci_vocab, **kw), ci_nbest)


def test_safe_rows_and_pad_rows():
    assert [safe_rows(n) for n in range(1, 20)] == [16] * 16 + [17, 18, 19]
    assert MIN_ROWS == 16 and ROW_MULTIPLE == 16
    t = torch.arange(6.0).view(3, 2)
    p = pad_rows(t)
    assert p.shape == (16, 2) and torch.equal(p[:3], t) and (p[3:] == t[0]).all()
    for n in (MIN_ROWS, MIN_ROWS + 1):
        ok = torch.zeros(n, 2)
        assert pad_rows(ok) is ok
    with pytest.raises(ValueError, match="at least one row"):
        pad_rows(torch.zeros(0, 2))
