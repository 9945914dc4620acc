"""DNC specifics (seed 004, Graves et al. 2016): FMD/MD writes, allocation, links, a
naive per-slot reference step, zero-memory stability and the rescoring memory bound."""
import inspect

import pytest
import torch

from nbest_rescore.errors import DataError
from nbest_rescore.models import build_model
from nbest_rescore.models.dnc import (EPS, allocation_weighting, fmd_retention, update_link,
                                      write_memory)
from nbest_rescore.rescoring.scorer import NnScorer
from nbest_rescore.vocab import Vocabulary

CFG = {"embedding_dim": 6, "hidden_size": 7, "memory_slots": 4, "memory_width": 3, "read_heads": 2}
V = 20


def make(**kw):
    torch.manual_seed(3)
    return build_model("dnc", {**CFG, **kw}, V).eval()


# -- pure functions -----------------------------------------------------------------------
def test_fmd_zeroes_only_the_first_argmin_of_retention():
    torch.manual_seed(0)
    psi = torch.rand(5, 7)
    psi[3] = torch.tensor([0.5, 0.2, 0.9, 0.2, 0.7, 0.2, 0.3])  # ties: index 1 is cleared
    psi[4] = 1.0  # all tied (document start): slot 0
    out = fmd_retention(psi)
    for b in range(5):
        row = psi[b].tolist()
        i_min = row.index(min(row))
        for i in range(7):
            assert out[b, i] == (0.0 if i == i_min else row[i])
    assert out[3].tolist()[1] == 0 and out[3, 3] == out[3, 5] == psi[3, 3]


def test_write_modes_on_hand_made_example():
    memory = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])
    write = torch.tensor([[0.5, 0.0]])
    erase = torch.tensor([[1.0, 0.5]])
    value = torch.tensor([[10.0, 20.0]])
    psi = torch.tensor([[0.5, 0.8]])
    # row 0: [1, 2] * (1 - 0.5 [1, 0.5]) = [0.5, 1.5], then * psi, then + 0.5 [10, 20]
    none = write_memory(memory, write, erase, value, None)
    md = write_memory(memory, write, erase, value, psi)
    fmd = write_memory(memory, write, erase, value, fmd_retention(psi))
    assert torch.allclose(none, torch.tensor([[[5.5, 11.5], [3.0, 4.0]]]))
    assert torch.allclose(md, torch.tensor([[[5.25, 10.75], [2.4, 3.2]]]))
    assert torch.allclose(fmd, torch.tensor([[[5.0, 10.0], [2.4, 3.2]]]))


def naive_allocation(u):
    """a[phi_j] = (1 - u[phi_j]) prod_{i<j} u[phi_i], phi: ascending usage, stable."""
    phi = sorted(range(len(u)), key=lambda i: u[i])
    a = [0.0] * len(u)
    for j, slot in enumerate(phi):
        prod = 1.0
        for i in phi[:j]:
            prod *= u[i]
        a[slot] = (1.0 - u[slot]) * prod
    return a


def test_allocation_equals_naive_sorted_usage_formula():
    torch.manual_seed(1)
    usage = torch.rand(4, 6, dtype=torch.float64)
    usage[2] = torch.tensor([0.3, 0.1, 0.3, 0.9, 0.1, 0.0], dtype=torch.float64)
    usage[3] = 0.0
    got = allocation_weighting(usage)
    for b in range(4):
        assert torch.allclose(got[b], torch.tensor(naive_allocation(usage[b].tolist()), dtype=torch.float64))
    assert got[3].tolist() == [1.0, 0, 0, 0, 0, 0]


def naive_link(link, prec, w):
    n = len(w)
    new = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i != j:
                new[i][j] = (1 - w[i] - w[j]) * link[i][j] + w[i] * prec[j]
    return new, [(1 - sum(w)) * prec[i] + w[i] for i in range(n)]


def test_link_update_equals_naive_loop():
    torch.manual_seed(2)
    link = torch.rand(3, 5, 5, dtype=torch.float64) / 5
    prec = torch.softmax(torch.randn(3, 5, dtype=torch.float64), -1) * 0.7
    w = torch.softmax(torch.randn(3, 5, dtype=torch.float64), -1) * 0.9
    got_l, got_p = update_link(link, prec, w)
    for b in range(3):
        ref_l, ref_p = naive_link(link[b].tolist(), prec[b].tolist(), w[b].tolist())
        assert torch.allclose(got_l[b], torch.tensor(ref_l, dtype=torch.float64))
        assert torch.allclose(got_p[b], torch.tensor(ref_p, dtype=torch.float64))


# -- whole model against a per-slot reference ------------------------------------------------
def _cos_softmax(mem, key, beta):
    kn = (sum(k * k for k in key) + EPS) ** 0.5
    scores = [beta * sum(a * b for a, b in zip(row, key)) / (kn * (sum(a * a for a in row) + EPS) ** 0.5)
              for row in mem]
    return torch.softmax(torch.tensor(scores, dtype=torch.float64), 0).tolist()


def reference_dnc(m, tokens):
    """One row at a time, slot by slot, from the zero state: features float64
    [B, T, D] (the model must be float64)."""
    c = m.config
    hs, wd, r = c.memory_slots, c.memory_width, c.read_heads
    sig = lambda z: 1 / (1 + torch.exp(-torch.tensor(z, dtype=torch.float64))).item()  # noqa: E731
    onep = lambda z: 1 + torch.nn.functional.softplus(torch.tensor(z, dtype=torch.float64)).item()  # noqa: E731
    feats = []
    for row in tokens:
        h = torch.zeros(c.hidden_size, dtype=torch.float64)
        cell = torch.zeros(c.hidden_size, dtype=torch.float64)
        mem = [[0.0] * wd for _ in range(hs)]
        usage, prec, ww = [0.0] * hs, [0.0] * hs, [0.0] * hs
        link = [[0.0] * hs for _ in range(hs)]
        rw = [[0.0] * hs for _ in range(r)]
        rv = [[0.0] * wd for _ in range(r)]
        out = []
        for tok in row.tolist():
            x = m.embedding.weight[tok]
            inp = torch.cat([h, torch.tensor(sum(rv, []), dtype=torch.float64)])
            gates = m.ctrl_x.weight @ x + m.ctrl_x.bias + m.ctrl_hr.weight @ inp
            i, f, g, o = gates.chunk(4)
            cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(cell)
            xi = (m.interface.weight @ h + m.interface.bias).tolist()
            pos = 0

            def take(n):
                nonlocal pos
                pos += n
                return xi[pos - n:pos]

            k_r = [take(wd) for _ in range(r)]
            beta_r = [onep(z) for z in take(r)]
            k_w, beta_w = take(wd), onep(take(1)[0])
            erase, value = [sig(z) for z in take(wd)], take(wd)
            free = [sig(z) for z in take(r)]
            g_a, g_w = sig(take(1)[0]), sig(take(1)[0])
            modes = [torch.softmax(torch.tensor(take(3)), 0).tolist() for _ in range(r)]
            psi = [1.0] * hs
            for j in range(hs):
                for k in range(r):
                    psi[j] *= 1 - free[k] * rw[k][j]
            usage = [(usage[j] + ww[j] - usage[j] * ww[j]) * psi[j] for j in range(hs)]
            alloc = naive_allocation([EPS + (1 - EPS) * u for u in usage])
            cw = _cos_softmax(mem, k_w, beta_w)
            ww = [g_w * (g_a * alloc[j] + (1 - g_a) * cw[j]) for j in range(hs)]
            keep = {"none": [1.0] * hs, "md": psi}.get(c.deallocation)
            if keep is None:  # fmd
                keep = list(psi)
                keep[psi.index(min(psi))] = 0.0
            mem = [[mem[j][k] * (1 - ww[j] * erase[k]) * keep[j] + ww[j] * value[k] for k in range(wd)]
                   for j in range(hs)]
            link, prec = naive_link(link, prec, ww)
            new_rw = []
            for k in range(r):
                fwd = [sum(link[i][j] * rw[k][j] for j in range(hs)) for i in range(hs)]
                bwd = [sum(link[j][i] * rw[k][j] for j in range(hs)) for i in range(hs)]
                cr = _cos_softmax(mem, k_r[k], beta_r[k])
                pb, pc, pf = modes[k]
                new_rw.append([pb * bwd[i] + pc * cr[i] + pf * fwd[i] for i in range(hs)])
            rw = new_rw
            rv = [[sum(rw[k][j] * mem[j][d] for j in range(hs)) for d in range(wd)] for k in range(r)]
            out.append(h.tolist() + sum(rv, []))
        feats.append(out)
    return torch.tensor(feats, dtype=torch.float64)


@pytest.mark.parametrize("mode", ["none", "md", "fmd"])
def test_model_equals_per_slot_reference(mode):
    m = make(deallocation=mode).double()  # float64: FMD's argmin of near-tied psi agrees
    with torch.no_grad():
        m.interface.weight.mul_(4)  # sharper addressing
    x = torch.randint(0, V, (2, 6))
    with torch.no_grad():
        out = m(x, m.init_state(2))
        ref = reference_dnc(m, x)
    assert out.features.shape == (2, 6, 7 + 2 * 3)
    assert torch.allclose(out.features, ref, atol=1e-10)


@pytest.mark.parametrize("mode", ["none", "md", "fmd"])
def test_zero_memory_gives_finite_values_and_gradients(mode):
    m = make(deallocation=mode).train()
    x = torch.randint(0, V, (3, 5))
    logp, st = m.log_probs(x[:, :-1], x[:, 1:], m.init_state(3))
    logp.sum().backward()
    assert torch.isfinite(logp).all() and all(torch.isfinite(s).all() for s in st)
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


def test_bad_config_raises():
    with pytest.raises(DataError, match="deallocation"):
        build_model("dnc", {"deallocation": "zero"}, V)
    with pytest.raises(DataError, match="memory_slots"):
        build_model("dnc", {"memory_slots": 0}, V)


# -- rescoring memory bound ---------------------------------------------------------------------
def test_state_budget_caps_scorer_batch_and_keeps_costs():
    m = make(memory_slots=8)
    row_bytes = sum(s.numel() * s.element_size() for s in m.init_state(1))
    budget = 10 * 4 * row_bytes + 7  # 10 rows with their 4 working copies
    assert m.max_batch_rows(budget) == 10
    assert m.max_batch_rows(1) == 1
    vocab = Vocabulary(["</s>", "<unk>"] + [f"w{i}" for i in range(V - 2)])
    torch.manual_seed(4)
    hyps = [tuple(f"w{int(i)}" for i in torch.randint(0, V - 2, (int(n),))) for n in torch.randint(0, 6, (37,))]
    rows = [i % 3 for i in range(37)]
    history = [("w1", "w2"), ("w3",), ()]
    # the padded path expands start states per batch; other modes (if any) must agree too
    modes = [{}] + ([{"mode": "padded"}] if "mode" in inspect.signature(NnScorer).parameters else [])
    for kw in modes:
        capped = NnScorer(m, vocab, batch_size=256, state_budget_bytes=budget, **kw)
        roomy = NnScorer(m, vocab, batch_size=256, **kw)
        assert capped.batch_size == 10 and roomy.batch_size == 256
        states = roomy.advance(roomy.initial_state(3), history)
        capped_states = capped.advance(capped.initial_state(3), history)
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(states, capped_states))
        assert torch.allclose(torch.from_numpy(capped.costs(states, rows, hyps)),
                              torch.from_numpy(roomy.costs(states, rows, hyps)), atol=1e-5)
