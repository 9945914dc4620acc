"""Costs through the prefix tree with their gradient (nbest_rescore.rescoring.forest_grad),
on ci lists: the values equal the padded forward's (one row per hypothesis, independent
of the tree) and exact scoring's (score_forest; bit for bit with the adaptive softmax),
and the gradients equal the padded forward's."""
import numpy as np
import pytest
import torch

from nbest_rescore.models import build_model, load_model
from nbest_rescore.rescoring.forest_grad import forest_costs
from nbest_rescore.rescoring.history_graph import scoring_graph
from nbest_rescore.rescoring.prefix_forest import build_forest
from nbest_rescore.rescoring.prefix_tree import score_forest
from nbest_rescore.training.mwer import hypothesis_costs


def _lists(ci_nbest, vocab, utts=3):
    seqs, rows = [], []
    for u, utt in enumerate(ci_nbest.utterances[:utts]):
        seqs += [vocab.encode(h) for h in utt.hyps]
        rows += [u] * len(utt.hyps)
    return seqs, rows


@pytest.mark.parametrize("output", ["tiny", "adaptive"])
def test_costs_and_gradients_equal_the_padded_forward(ci_nbest, tiny_lm, output):
    model, vocab, _ = load_model(tiny_lm)
    if output == "adaptive":  # the output layer of the converged models (pairs through log_probs_at)
        torch.manual_seed(0)
        model = build_model("gru", {"embedding_dim": 16, "hidden_size": 16, "output": "adaptive",
                                    "adaptive_cutoffs": [100, 1000]}, len(vocab))
    model.eval()
    seqs, rows = _lists(ci_nbest, vocab)
    torch.manual_seed(1)
    states = tuple(torch.randn(3, *s.shape[1:]) * 0.1 for s in model.init_state(1))  # 3 history states
    params = [p for p in model.parameters() if p.requires_grad]
    weights = torch.linspace(0.5, 1.5, len(seqs))  # a loss that weighs every hypothesis differently
    tree = forest_costs(model, seqs, vocab.eos, states, rows)
    padded = hypothesis_costs(model, seqs, vocab.eos, states, rows)
    assert tree.detach().numpy() == pytest.approx(padded.detach().double().numpy(), abs=2e-4)
    g_tree = torch.autograd.grad((tree.float() * weights).sum(), params, allow_unused=True)
    g_pad = torch.autograd.grad((padded * weights).sum(), params, allow_unused=True)
    for a, b in zip(g_tree, g_pad):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.allclose(a, b, rtol=1e-3, atol=1e-5)
    with torch.inference_mode():
        exact = score_forest(model, scoring_graph(build_forest(seqs, rows, vocab.eos), vocab.eos), states, vocab.eos)
    if output == "adaptive":  # the same output layer: bit for bit
        assert np.array_equal(tree.detach().numpy(), exact)
    else:  # scoring's fused softmax sums exp by vocabulary blocks, in place (no gradient)
        assert tree.detach().numpy() == pytest.approx(exact, abs=1e-4)
