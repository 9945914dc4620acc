"""The MWER loss (nbest_rescore.training.mwer) on a hand-made list, against the
formula written out and its gradient derived by hand; and fine-tuning on the ci lists
lowers the expected word errors of the lists it trains on."""
import math

import numpy as np
import pytest
import torch

from nbest_rescore.models import load_model
from nbest_rescore.training.mwer import MwerOptions, finetune_mwer, hypothesis_costs, mwer_loss


def test_loss_and_gradient_on_a_hand_made_list():
    fixed = torch.tensor([-10.0, -11.0, -12.5, -9.0], dtype=torch.float64)
    errors = torch.tensor([2.0, 0.0, 1.0, 3.0], dtype=torch.float64)
    nn = torch.tensor([20.0, 19.0, 21.0, 22.5], dtype=torch.float64, requires_grad=True)
    c, alpha = 0.5, 0.7
    loss = mwer_loss(nn, fixed, c, errors, alpha)
    loss.backward()
    s = [f - c * n for f, n in zip(fixed.tolist(), nn.tolist())]
    z = sum(math.exp(alpha * x) for x in s)
    q = [math.exp(alpha * x) / z for x in s]
    mean = sum(errors.tolist()) / 4
    expected = sum(qi * ei for qi, ei in zip(q, errors.tolist()))
    assert float(loss.detach()) == pytest.approx(sum(qi * (ei - mean) for qi, ei in zip(q, errors.tolist())), rel=1e-12)
    grad = [-alpha * c * qi * (ei - expected) for qi, ei in zip(q, errors.tolist())]
    assert nn.grad.tolist() == pytest.approx(grad, rel=1e-9)
    assert nn.grad[3] < 0 < nn.grad[1]  # a descent step lowers the cost of the error-free hypothesis, raises the worst's


def test_gradcheck():
    fixed = torch.randn(6, dtype=torch.float64)
    errors = torch.tensor([0.0, 1, 2, 3, 1, 0], dtype=torch.float64)
    nn = torch.randn(6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: mwer_loss(x, fixed, 1.3, errors, 0.4), (nn,))


def test_hypothesis_costs_equal_one_forward_each(tiny_lm):
    model, vocab, _ = load_model(tiny_lm)
    seqs = [vocab.encode(s.split()) for s in ("the cat sat", "a", "", "news of the day today")]
    costs = hypothesis_costs(model, seqs, vocab.eos, model.init_state(1), [0] * len(seqs)).detach()
    for s, c in zip(seqs, costs.tolist()):
        x = torch.tensor([vocab.eos] + s + [vocab.eos])[None]
        with torch.no_grad():
            lp, _ = model.log_probs(x[:, :-1], x[:, 1:], model.init_state(1))
        assert c == pytest.approx(-float(lp.sum()), abs=1e-4)


def test_finetuning_lowers_the_expected_errors_of_its_lists(ci_nbest, tiny_lm, DATA):
    from nbest_rescore.api.finetune_job import first_pass_states, mwer_lists
    from nbest_rescore.api.inputs import load_references
    from nbest_rescore.rescoring.combine import Weights

    model, vocab, _ = load_model(tiny_lm)
    refs = load_references(DATA / "ci" / "ref.txt")
    w = Weights(lm_weight=9.5, interp=0.0, word_ins_penalty=-0.629606)
    lists = mwer_lists(ci_nbest, refs, vocab, w)
    assert lists.nn_scale == 9.5 and len(lists.seqs) == 6000
    before = dict(model.state_dict())
    before = {k: v.clone() for k, v in before.items()}
    hist = finetune_mwer(model, vocab.eos, lists, first_pass_states(ci_nbest, vocab, w),
                         MwerOptions(epochs=3, lr=3e-3, alpha=1 / 9.5, top_n=10, utts_per_step=6, ce_weight=0.0))
    assert [h["epoch"] for h in hist] == [1, 2, 3] and all(math.isnan(h["ce"]) for h in hist)
    assert hist[-1]["expected_errors"] < hist[0]["expected_errors"]
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not model.training  # left in eval mode, ready to score
    assert np.isfinite([h["expected_errors"] for h in hist]).all()


def test_posterior_costs_are_computed_without_dropout_by_default():
    """With dropout in the model, the default loss is that of the evaluation-mode costs
    (the same on every call, over every hypothesis of each list: ``top_n`` None), while
    ``posterior_dropout`` draws a mask per call; the model is left in training mode."""
    from dataclasses import replace

    from nbest_rescore.models import build_model
    from nbest_rescore.training.mwer import MwerLists, _step

    torch.manual_seed(0)
    model = build_model("gru", {"embedding_dim": 8, "hidden_size": 8, "dropout_emb": 0.5, "dropout_out": 0.5}, 30)
    seqs = [[1, 2, 3], [1, 2], [4, 5, 6, 7], [2], [3, 3], [9]]
    lists = MwerLists(seqs, np.array([0, 3, 6]), np.array([-1.0, -2.0, -1.5, -1.0, -3.0, -0.5]), 1.0,
                      np.array([0.0, 1.0, 2.0, 1.0, 0.0, 3.0]))
    states = model.init_state(2)
    model.eval()
    costs = hypothesis_costs(model, seqs, 0, states, [0, 0, 0, 1, 1, 1]).detach()
    expected = np.mean([float(mwer_loss(costs[a:b], torch.as_tensor(lists.fixed[a:b]), 1.0,
                                        torch.as_tensor(lists.errors[a:b]), 0.5)) for a, b in ((0, 3), (3, 6))])
    default = MwerOptions(alpha=0.5)
    model.train()
    for _ in range(2):
        loss, _, _ = _step(model, lists, [0, 1], states, 0, default, None)
        assert float(loss.detach()) == pytest.approx(expected, abs=1e-6) and model.training
    noisy = {round(float(_step(model, lists, [0, 1], states, 0, replace(default, posterior_dropout=True), None)[0]), 6)
             for _ in range(4)}
    assert len(noisy) > 1
