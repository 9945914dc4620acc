"""AMN specifics (thesis 000 chapter 4): attention, annealing, dropout modes, ITL."""
import math
import pytest
import torch

from nbest_rescore.models import build_model

CFG = {"embedding_dim": 8, "hidden_size": 6, "num_memcells": 4}


def reference_amn_step_by_step(m, x):
    """Straightforward AMN: one torch GRUCell per memcell and controller, a Python loop
    over memcells, independent of the batched implementation."""
    h = m.config.hidden_size
    k1 = m.config.num_memcells + 1
    cells = gru_cells(m)
    emb = m.embedding(x)
    if m.input_proj is not None:  # the shared input projection (issue 26 shape b)
        emb = emb @ m.input_proj.weight.T + m.input_proj.bias
    b, t = x.shape
    states = [torch.zeros(b, h) for _ in range(k1)]
    outs, alphas = [], []
    for step in range(t):
        states = [cells[k](emb[:, step], states[k]) for k in range(k1)]
        u = states[0]
        beta = torch.stack([(states[k] * u).sum(-1) for k in range(1, k1)], -1)
        alpha = torch.softmax(beta / m.temperature, -1)
        o = sum(alpha[:, k - 1:k] * states[k] for k in range(1, k1))
        outs.append(o)
        alphas.append(alpha)
    return torch.stack(outs, 1), torch.stack(alphas, 1)


def gru_cells(m):
    """The controller's and the memcells' GRUs as K + 1 ``torch.nn.GRUCell`` copies."""
    cells = []
    for k in range(m.config.num_memcells + 1):
        c = torch.nn.GRUCell(m.config.input_size, m.config.hidden_size)
        with torch.no_grad():
            c.weight_ih.copy_(m.w_ih[k].T)
            c.weight_hh.copy_(m.w_hh[k].T)
            c.bias_ih.copy_(m.b_ih[k])
            c.bias_hh.copy_(m.b_hh[k])
        cells.append(c)
    return cells


def test_batched_amn_equals_straightforward_version():
    torch.manual_seed(1)
    m = build_model("amn", {**CFG, "anneal_t0": 3.0}, 30).eval()
    x = torch.randint(0, 30, (2, 7))
    out = m(x, m.init_state(2))
    ref, _ = reference_amn_step_by_step(m, x)
    assert torch.allclose(out.features, ref, atol=1e-5)


def test_annealing_schedule_reaches_one():
    m = build_model("amn", {**CFG, "anneal_t0": 250.0, "anneal_gamma": 0.15}, 30)
    temps = []
    for epoch in range(1, 6):
        m.on_epoch_end(epoch)
        temps.append(float(m.temperature))
    assert abs(temps[0] - 37.5) < 1e-4 and abs(temps[1] - 5.625) < 1e-4 and temps[2:] == [1.0, 1.0, 1.0]


def test_high_temperature_gives_uniform_attention():
    torch.manual_seed(0)
    m = build_model("amn", {**CFG, "anneal_t0": 1e6}, 30).eval()
    _, alpha = reference_amn_step_by_step(m, torch.randint(0, 30, (2, 5)))
    assert torch.allclose(alpha, torch.full_like(alpha, 0.25), atol=1e-4)


def test_dropout_modes_touch_only_their_cells():
    torch.manual_seed(0)
    x = torch.randn(2, 3, CFG["embedding_dim"])
    for mode, dropped in (("contr", {0}), ("mem", {1, 2, 3, 4}), ("all", {0, 1, 2, 3, 4}), ("none", set()),
                           ("mem-vector", set())):
        m = build_model("amn", {**CFG, "dropout_mode": mode, "dropout": 0.5}, 30).train()
        xs = m._input_masks(x)
        for k in range(5):
            same = torch.equal(xs[:, :, k], x)
            assert same == (k not in dropped), (mode, k)
        m.eval()
        assert torch.equal(m._input_masks(x)[:, :, 0], x)


def test_mem_vector_dropout_masks_what_attention_and_output_read(monkeypatch):
    """``dropout_mode: mem-vector`` (eq. 4.26-4.28): with a given mask z, beta = u . (m z),
    alpha = softmax(beta / T), o = sum_i alpha_i (m_i z_i), computed here from the
    unmasked states of the step-by-step reference; the recurrences (the returned state)
    are those of the model without dropout, and evaluation is unmasked."""
    torch.manual_seed(3)
    p = 0.4
    m = build_model("amn", {**CFG, "anneal_t0": 2.0, "dropout_mode": "mem-vector", "dropout": p}, 30)
    x = torch.randint(0, 30, (2, 5))
    k, h = CFG["num_memcells"], CFG["hidden_size"]
    z = (torch.rand(k, 2, 5, h) > p).float()  # the mask the model will draw: [K, B, T, H]
    monkeypatch.setattr(torch, "bernoulli", lambda probs: z.clone())
    m.eval()
    plain = m(x, m.init_state(2))
    m.train()
    out = m(x, m.init_state(2))
    assert torch.equal(out.state[0], plain.state[0])  # the recurrences read unmasked states
    ref_states = reference_states(m, x)  # [K+1, B, T, H]
    u, cells = ref_states[0], ref_states[1:] * z / (1 - p)
    alpha = torch.softmax((cells * u).sum(-1) / m.temperature, 0)  # [K, B, T]
    o = (alpha.unsqueeze(-1) * cells).sum(0)
    assert torch.allclose(out.features, o, atol=1e-5)
    assert not torch.allclose(out.features, plain.features, atol=1e-3)


def reference_states(m, x):
    """Controller and memcell states of a straightforward AMN: float [K + 1, B, T, H]."""
    emb = m.embedding(x)
    out = []
    for c in gru_cells(m):
        s, seq = torch.zeros(x.shape[0], m.config.hidden_size), []
        for t in range(x.shape[1]):
            s = c(emb[:, t], s)
            seq.append(s)
        out.append(torch.stack(seq, 1))
    return torch.stack(out)


def reference_segment_loss(m, inp, tgt, mask, reset, h0):
    """Training loss of one segment by a straightforward AMN: per step, rows starting a
    document are reset, then one ``GRUCell`` call per controller/memcell (run by
    ``functional_call`` on slices of the AMN's own weights, so the gradients reach the
    same parameters), attention, softmax cross-entropy and ITL. Returns (loss, h [B, K+1, H])."""
    from torch.func import functional_call

    k1 = m.config.num_memcells + 1
    cell = torch.nn.GRUCell(m.config.embedding_dim, m.config.hidden_size)
    params = [{"weight_ih": m.w_ih[k].T, "weight_hh": m.w_hh[k].T, "bias_ih": m.b_ih[k], "bias_hh": m.b_hh[k]}
              for k in range(k1)]
    states = list(h0.unbind(1))
    emb = m.embedding(inp)
    nll, itl = [], []
    for t in range(inp.shape[1]):
        states = [torch.where(reset[:, t:t + 1], torch.zeros_like(s), s) for s in states]
        states = [functional_call(cell, params[k], (emb[:, t], states[k])) for k in range(k1)]
        beta = torch.stack([(states[k] * states[0]).sum(-1) for k in range(1, k1)], -1)
        alpha = torch.softmax(beta / m.temperature, -1)
        o = sum(alpha[:, k - 1:k] * states[k] for k in range(1, k1))
        logp = torch.log_softmax(m.decoder(o), -1)
        nll.append(-logp.gather(-1, tgt[:, t:t + 1]).squeeze(-1))
        itl.append(sum(alpha[:, k - 1] * ((o - states[k]) ** 2).sum(-1) for k in range(1, k1)).mean())
    loss = torch.stack(nll, 1)[mask].mean() + m.config.itl_weight * torch.stack(itl).mean()
    return loss, torch.stack(states, 1)


def test_training_loss_and_gradients_equal_straightforward_version(DATA):
    """The trainer's loss (run_segment + segment_loss) of the batched AMN and its
    gradients equal those of the straightforward version on ci text, over two BPTT
    segments with document resets, carried state and the ITL."""
    from nbest_rescore.io.references import read_references
    from nbest_rescore.corpus import encode_document, run_segment, segments
    from stream_columns import make_streams
    from nbest_rescore.training.step import segment_loss
    from nbest_rescore.vocab import Vocabulary

    refs = list(read_references(DATA / "ci" / "ref.txt").values())
    vocab = Vocabulary(["</s>", "<unk>"] + sorted({w for s in refs for w in s})[:100])
    streams = make_streams([encode_document(refs[i:i + 1], vocab) for i in range(24)], 3)
    assert int(streams.reset[:, 1:30].sum()) > 0  # documents start inside the segments
    torch.manual_seed(0)
    m = build_model("amn", {**CFG, "anneal_t0": 3.0, "itl_weight": 0.5, "itl_reduction": "sum-token"},
                    len(vocab)).train()
    grads = []
    for impl in ("batched", "reference"):
        m.zero_grad()
        h, losses = m.init_state(3)[0], []
        for inp, tgt, mask, reset in list(segments(streams, 15))[:2]:
            if impl == "batched":
                feats, (h,), aux = run_segment(m, (h.detach(),), inp, reset)
                loss = segment_loss(m, feats, tgt, mask, aux).loss
            else:
                loss, h = reference_segment_loss(m, inp, tgt, mask, reset, h.detach())
            loss.backward()
            losses.append(float(loss.detach()))
        grads.append({n: p.grad.clone() for n, p in m.named_parameters()})
        if impl == "batched":
            batched_losses = losses
    assert torch.allclose(torch.tensor(batched_losses), torch.tensor(losses), atol=1e-5)
    for n in grads[0]:
        assert torch.allclose(grads[0][n], grads[1][n], rtol=1e-4, atol=1e-6), n


def _reference_itl_terms(m, x):
    """[K, B, T] of alpha_i * (o - m_i)^2 summed (or not) later: the straightforward
    memcell loop, returning alpha [B, T, K], o [B, T, H] and memcells [B, T, K, H]."""
    h, k1 = m.config.hidden_size, m.config.num_memcells + 1
    emb = m.embedding(x)
    b, t = x.shape
    st = torch.zeros(k1, b, h)
    alphas, outs, cells = [], [], []
    for step in range(t):
        gi = torch.einsum("be,keg->kbg", emb[:, step], m.w_ih) + m.b_ih[:, None]
        gh = torch.einsum("kbh,khg->kbg", st, m.w_hh) + m.b_hh[:, None]
        r = torch.sigmoid(gi[..., :h] + gh[..., :h])
        z = torch.sigmoid(gi[..., h:2 * h] + gh[..., h:2 * h])
        n = torch.tanh(gi[..., 2 * h:] + r * gh[..., 2 * h:])
        st = (1 - z) * n + z * st
        alpha = torch.softmax((st[1:] * st[0]).sum(-1) / m.temperature, 0)  # [K, B]
        alphas.append(alpha.T)
        outs.append((alpha[..., None] * st[1:]).sum(0))
        cells.append(st[1:].transpose(0, 1))
    return torch.stack(alphas, 1), torch.stack(outs, 1), torch.stack(cells, 1)


def test_itl_reductions_match_their_definitions():
    import pytest

    torch.manual_seed(3)
    x = torch.randint(0, 30, (3, 5))
    for reduction in ("sum-token", "mean-token", "sum-sequence", "mean-sequence"):
        torch.manual_seed(0)
        m = build_model("amn", {**CFG, "itl_weight": 0.5, "itl_reduction": reduction}, 30).train()
        aux = m(x, m.init_state(3)).aux_loss
        with torch.no_grad():
            alpha, o, cells = _reference_itl_terms(m, x)
            sq = (o.unsqueeze(2) - cells) ** 2  # [B, T, K, H]
            dist = sq.sum(-1) if reduction.startswith("sum") else sq.mean(-1)
            per_pos = (alpha * dist).sum(-1)  # [B, T]
            want = per_pos.mean() if reduction.endswith("token") else per_pos.sum(1).mean()
        assert float(aux.detach()) == pytest.approx(0.5 * float(want), rel=1e-4), reduction


def test_anneal_fraction_follows_the_planned_training():
    m = build_model("amn", {**CFG, "anneal_t0": 250.0, "anneal_fraction": 0.3}, 30)
    temps = []
    for p in (0.0, 0.1, 0.15, 0.3, 0.5, 1.0):
        m.on_progress(p)
        temps.append(float(m.temperature))
    # T = T0^(1 - p / f): 250, 250^(2/3), 250^(1/2), then 1
    assert temps == pytest.approx([250.0, 250.0 ** (2 / 3), 250.0 ** 0.5, 1.0, 1.0, 1.0], rel=1e-6)
    # at the epoch boundaries of a 20-epoch plan, the per-epoch factor T0^(-1 / (f E)) of the thesis
    for epoch in range(1, 7):
        m.on_progress(epoch / 20)
        assert float(m.temperature) == pytest.approx(250.0 * (250.0 ** (-1 / 6)) ** epoch, rel=1e-5)
    m.on_epoch_end(6)  # no per-epoch factor on top of the plan
    assert float(m.temperature) == 1.0


def test_epoch_annealing_without_a_fraction():
    m = build_model("amn", {**CFG, "anneal_t0": 9.0, "anneal_gamma": 1 / 3}, 30)
    m.on_progress(0.5)  # no anneal_fraction: progress leaves T alone
    temps = []
    for epoch in range(1, 4):
        m.on_epoch_end(epoch)
        temps.append(float(m.temperature))
    assert temps == pytest.approx([3.0, 1.0, 1.0])


def test_itl_warm_start_ramps_after_annealing():
    m = build_model("amn", {**CFG, "anneal_t0": 9.0, "anneal_fraction": 0.4, "itl_weight": 1.0,
                            "itl_ramp_fraction": 0.2}, 30)
    scales = []
    for p in (0.0, 0.2, 0.4, 0.5, 0.6, 0.9):
        m.on_progress(p)
        scales.append(float(m.itl_scale))
    # off while T > 1 (p < 0.4), then linear over the next 0.2 of the plan
    assert scales == pytest.approx([0.0, 0.0, 0.0, 0.5, 1.0, 1.0])
    assert "itl_scale" in m.state_dict()  # resumed with the run
    m.on_progress(0.5)
    fresh = build_model("amn", {**CFG, "anneal_t0": 9.0, "anneal_fraction": 0.4, "itl_weight": 1.0,
                                "itl_ramp_fraction": 0.2}, 30)
    fresh.load_state_dict(m.state_dict())
    assert float(fresh.itl_scale) == 0.5 and fresh._scheduled == (1.0, 0.5)
    no_anneal = build_model("amn", {**CFG, "itl_weight": 1.0, "itl_ramp_fraction": 0.5}, 30)
    no_anneal.on_progress(0.25)
    assert float(no_anneal.itl_scale) == pytest.approx(0.5)  # the ramp starts at p = 0
    plain = build_model("amn", {**CFG, "itl_weight": 1.0}, 30)
    assert float(plain.itl_scale) == 1.0 and "itl_scale" not in plain.state_dict()  # old checkpoints load


def test_memcell_health_equals_a_direct_computation():
    import pytest

    torch.manual_seed(2)
    m = build_model("amn", {**CFG, "anneal_t0": 2.0}, 30).eval()
    xs = [torch.randint(0, 30, (2, 6)), torch.randint(0, 30, (3, 4))]
    m.begin_diagnostics()
    with torch.inference_mode():
        for x in xs:
            m(x, m.init_state(x.shape[0]))
    health = m.end_diagnostics()
    assert m.end_diagnostics() is None  # accumulation stopped
    alphas, cos, ent = [], [], []
    with torch.no_grad():
        for x in xs:
            alpha, _, cells = _reference_itl_terms(m, x)
            a = alpha.reshape(-1, 4)
            alphas.append(a)
            ent.append(-(a * torch.log2(a)).sum(-1))
            c = torch.nn.functional.normalize(cells.reshape(-1, 4, 6), dim=-1)
            gram = c @ c.transpose(1, 2)
            cos.append((gram.sum((1, 2)) - 4) / 12)
    a = torch.cat(alphas)
    assert health["mean_attention"] == pytest.approx(a.mean(0).tolist(), abs=1e-4)
    assert health["attention_entropy_bits"] == pytest.approx(float(torch.cat(ent).mean()), abs=1e-4)
    assert health["memcell_cosine"] == pytest.approx(float(torch.cat(cos).mean()), abs=1e-4)


def test_trainer_stores_memcell_health_per_validation(tmp_path, example_config):
    import yaml

    from nbest_rescore.api import TrainJob
    from nbest_rescore.models import load_model

    cfg = yaml.safe_load(open(example_config("tiny")))
    cfg["model"], cfg["model_config"] = "amn", {"embedding_dim": 16, "hidden_size": 8, "num_memcells": 3,
                                               "anneal_t0": 4.0, "anneal_fraction": 0.5}
    cfg.setdefault("optim", {})["max_epochs"] = 2
    cfg["data"]["max_valid_words"] = 500  # the health is stored per validation, whatever the sizes
    conf = tmp_path / "amn.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    TrainJob(config=str(conf), out=str(tmp_path / "amn.pt"), max_words=1500).run(progress=False)
    _, _, info = load_model(tmp_path / "amn.pt")
    hist = info["history"]
    assert len(hist) == 2 and all(len(h["memcells"]["mean_attention"]) == 3 for h in hist)
    assert all(abs(sum(h["memcells"]["mean_attention"]) - 1) < 1e-3 for h in hist)
    assert all(0 <= h["memcells"]["attention_entropy_bits"] <= 1.585 + 1e-6 for h in hist)


def test_equal_parameter_recipe_configs():
    # conf/{gpu,cpu}-equal: GRU, LSTM and AMN within 1.5% of each other in parameters
    # without embeddings, and the counts their headers state
    import re
    from pathlib import Path

    import yaml

    conf = Path(__file__).resolve().parents[2] / "recipes" / "abc-nbest" / "conf"
    for conf_set in ("gpu-equal", "cpu-equal"):
        counts = {}
        for name in ("gru", "lstm", "amn"):
            path = conf / conf_set / f"{name}.yaml"
            cfg = yaml.safe_load(path.read_text())
            mc = dict(cfg["model_config"])
            if mc.get("output") == "adaptive":
                mc["adaptive_cutoffs"] = [2943, 14651]  # the defaults for the 43k vocabulary
            counts[name] = build_model(cfg["model"], mc, 43050).num_parameters()["without_embeddings"]
            stated = re.search(rf"(?:\| |#   ){name.upper()} [^|\n]*? (\d{{1,3}}(?:,\d{{3}})+)", path.read_text()).group(1)
            assert int(stated.replace(",", "")) == counts[name], (conf_set, name)
        assert max(counts.values()) / min(counts.values()) < 1.015, (conf_set, counts)


def test_itl_value_and_gradient_by_hand_two_memcells():
    from nbest_rescore.models.amn import implicit_target_loss

    # K = 2 memcells, H = 2: m1 = (1, 0), m2 = (0, 2), alpha = (0.25, 0.75), o = (0.25, 1.5)
    # ||o - m1||^2 = 0.75^2 + 1.5^2 = 2.8125, ||o - m2||^2 = 0.25^2 + 0.5^2 = 0.3125
    # ITL = 0.25 * 2.8125 + 0.75 * 0.3125 = 0.9375 (sum over H), 0.46875 (mean over H)
    def terms():
        alpha = torch.tensor([0.25, 0.75]).view(2, 1, 1).requires_grad_()
        cells = torch.tensor([[1.0, 0.0], [0.0, 2.0]]).view(2, 1, 1, 2).requires_grad_()
        o = torch.tensor([0.25, 1.5]).view(1, 1, 2).requires_grad_()
        return alpha, o, cells

    alpha, o, cells = terms()
    loss = implicit_target_loss(alpha, o, cells, "sum-token")
    assert float(loss.detach()) == pytest.approx(0.9375)
    loss.backward()
    # d/d alpha_i = ||o - m_i||^2; d/d m_i = -2 alpha_i (o - m_i); d/d o = 2 sum_i alpha_i (o - m_i) = 0
    assert alpha.grad.flatten().tolist() == pytest.approx([2.8125, 0.3125])
    assert cells.grad.view(2, 2).tolist() == [pytest.approx([0.375, -0.75]), pytest.approx([-0.375, 0.75])]
    assert o.grad.flatten().tolist() == pytest.approx([0.0, 0.0])
    alpha, o, cells = terms()
    loss = implicit_target_loss(alpha, o, cells, "mean-token")
    assert float(loss.detach()) == pytest.approx(0.46875)
    loss.backward()
    assert alpha.grad.flatten().tolist() == pytest.approx([1.40625, 0.15625])
    # two identical time steps: per token the mean (unchanged), per sequence the sum (doubled)
    alpha, o, cells = terms()
    two = (alpha.expand(2, 1, 2), o.expand(1, 2, 2), cells.expand(2, 1, 2, 2))
    assert float(implicit_target_loss(*two, "sum-token")) == pytest.approx(0.9375)
    assert float(implicit_target_loss(*two, "sum-sequence")) == pytest.approx(1.875)
    assert float(implicit_target_loss(*two, "mean-sequence")) == pytest.approx(0.9375)
    with pytest.raises(ValueError, match="itl reduction"):
        implicit_target_loss(*two, "sum-word")


def test_memcell_health_of_a_collapsed_and_a_spread_model():
    from nbest_rescore.models.amn import memcell_health_sums

    x = torch.randint(0, 30, (2, 6))
    collapsed = build_model("amn", CFG, 30).eval()
    collapsed.force_memcell = 2  # one-hot attention on memcell 2
    collapsed.begin_diagnostics()
    with torch.inference_mode():
        collapsed(x, collapsed.init_state(2))
    h = collapsed.end_diagnostics()
    assert h["mean_attention"] == [0.0, 0.0, 1.0, 0.0] and h["attention_entropy_bits"] == 0.0
    spread = build_model("amn", {**CFG, "anneal_t0": 1e9}, 30).eval()  # T -> inf: uniform attention
    spread.begin_diagnostics()
    with torch.inference_mode():
        spread(x, spread.init_state(2))
    h = spread.end_diagnostics()
    assert h["mean_attention"] == pytest.approx([0.25] * 4, abs=1e-4)
    assert h["attention_entropy_bits"] == pytest.approx(2.0, abs=1e-4)  # log2 K
    # cosine: identical memcells 1 (collapsed states), orthogonal ones 0
    same = torch.ones(3, 5, 4)
    orth = torch.eye(3, 4).unsqueeze(1).expand(3, 5, 4)
    uniform = torch.full((3, 5), 1 / 3)
    for cells, want in ((same, 1.0), (orth, 0.0)):
        attn, ent, cos, n = memcell_health_sums(uniform, cells)
        assert float(n) == 5 and float(cos) / 5 == pytest.approx(want, abs=1e-9)
        assert float(ent) / 5 == pytest.approx(math.log2(3))


def test_memcell_health_leaves_padding_out():
    torch.manual_seed(4)
    m = build_model("amn", {**CFG, "anneal_t0": 3.0}, 30).eval()
    x = torch.randint(0, 30, (2, 6))
    mask = torch.tensor([[1.0] * 6, [1.0, 1.0, 0, 0, 0, 0]])  # row 2: 2 real tokens, then padding
    m.begin_diagnostics()
    m.token_mask(mask)
    with torch.inference_mode():
        state = m(x[:, :4], m.init_state(2)).state  # two calls cover the mask's columns in order
        m(x[:, 4:], state)
    masked = m.end_diagnostics()
    want = []  # the real tokens alone: row 1 whole, row 2's first two
    m.begin_diagnostics()
    with torch.inference_mode():
        m(x[:1], m.init_state(1))
        m(x[1:, :2], m.init_state(1))
    want = m.end_diagnostics()
    assert masked["mean_attention"] == pytest.approx(want["mean_attention"], abs=2e-4)
    assert masked["attention_entropy_bits"] == pytest.approx(want["attention_entropy_bits"], abs=2e-4)
    assert masked["memcell_cosine"] == pytest.approx(want["memcell_cosine"], abs=2e-4)


def test_checkpoints_with_the_retired_epoch_ramp_option_still_load():
    # itl_ramp_epochs (replaced by itl_ramp_fraction) was written into checkpoints; 0 = off loads
    from nbest_rescore.errors import DataError

    m = build_model("amn", {**CFG, "itl_ramp_epochs": 0}, 30)
    assert m.config.itl_ramp_fraction == 0.0
    with pytest.raises(DataError, match="itl_ramp_epochs"):
        build_model("amn", {**CFG, "itl_ramp_epochs": 2}, 30)


def test_shared_input_projection_equals_the_straightforward_version():
    torch.manual_seed(5)
    m = build_model("amn", {**CFG, "input_projection": 3, "anneal_t0": 2.0}, 30).eval()
    assert tuple(m.w_ih.shape) == (5, 3, 18)  # each GRU reads the 3-unit projection
    x = torch.randint(0, 30, (2, 6))
    ref, _ = reference_amn_step_by_step(m, x)
    assert torch.allclose(m(x, m.init_state(2)).features, ref, atol=1e-5)
    plain = build_model("amn", CFG, 30).num_parameters()["without_embeddings"]
    proj = m.num_parameters()["without_embeddings"]
    assert plain - proj == 5 * (8 - 3) * 18 - (8 * 3 + 3)  # smaller input weights, one projection


def test_itl_and_balance_leave_padding_out():
    from nbest_rescore.models.amn import balance_loss

    torch.manual_seed(6)
    x = torch.randint(0, 30, (2, 6))
    mask = torch.tensor([[True] * 6, [True, True, True, False, False, False]])
    m = build_model("amn", {**CFG, "itl_weight": 0.5, "itl_reduction": "sum-token", "balance_weight": 2.0},
                    30).train()
    m.token_mask(mask)
    aux = float(m(x, m.init_state(2)).aux_loss.detach())
    with torch.no_grad():
        alpha, o, cells = _reference_itl_terms(m, x)  # alpha [B, T, K]
        per_pos = (alpha * ((o.unsqueeze(2) - cells) ** 2).sum(-1)).sum(-1)  # [B, T]
        itl = per_pos[mask].mean()  # real tokens only
        abar = alpha[mask].mean(0)  # [K]
        balance = 4 * (abar ** 2).sum() - 1
    assert aux == pytest.approx(0.5 * float(itl) + 2.0 * float(balance), rel=1e-4)
    one_hot = torch.zeros(4, 1, 3)
    one_hot[1] = 1.0
    assert float(balance_loss(one_hot)) == pytest.approx(3.0)  # one memcell takes it all: K - 1
    assert float(balance_loss(torch.full((4, 2, 3), 0.25))) == pytest.approx(0.0, abs=1e-6)


def test_trainer_passes_the_padding_mask_to_the_model():
    from nbest_rescore.training.step import segment_forward

    torch.manual_seed(7)
    m = build_model("amn", {**CFG, "itl_weight": 1.0, "itl_reduction": "sum-token"}, 30).train()
    x = torch.randint(0, 30, (2, 5))
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    reset = torch.zeros(2, 5, dtype=torch.bool)
    _, loss = segment_forward(m, m.init_state(2), x, x, mask, reset, aligned=True)
    m.token_mask(mask)
    masked_aux = m(x, m.init_state(2)).aux_loss
    m.token_mask(None)
    unmasked_aux = m(x, m.init_state(2)).aux_loss
    feats = m(x, m.init_state(2)).features
    nll = -m.target_log_probs(feats[mask], x[mask]).mean()
    assert float(loss.loss) == pytest.approx(float(nll + masked_aux), rel=1e-5)
    assert float(masked_aux) != pytest.approx(float(unmasked_aux), rel=1e-3)


def test_itl_with_detached_attention_does_not_train_the_controller():
    torch.manual_seed(8)
    x = torch.randint(0, 30, (2, 5))
    grads = {}
    for detach in (False, True):
        torch.manual_seed(0)
        m = build_model("amn", {**CFG, "itl_weight": 1.0, "itl_detach_attention": detach}, 30).train()
        aux = m(x, m.init_state(2)).aux_loss
        aux.backward()
        grads[detach] = (float(aux), m.w_hh.grad[0].abs().sum().item(), m.w_hh.grad[1:].abs().sum().item())
    assert grads[True][0] == pytest.approx(grads[False][0])  # the same value
    # the controller only moves alpha (through o the ITL's gradient is sum_i alpha_i 2 (o - m_i) = 0)
    assert grads[False][1] > 0 and grads[True][1] < 1e-6 * grads[False][1]
    assert grads[True][2] > 0  # the memcells still get the ITL's gradient


def test_annealing_floor_above_one():
    from nbest_rescore.errors import DataError

    m = build_model("amn", {**CFG, "anneal_t0": 250.0, "anneal_fraction": 0.3, "anneal_floor": 2.0}, 30)
    m.on_progress(0.15)
    assert float(m.temperature) == pytest.approx(250.0 ** 0.5)
    m.on_progress(0.9)
    assert float(m.temperature) == 2.0
    e = build_model("amn", {**CFG, "anneal_t0": 9.0, "anneal_gamma": 1 / 3, "anneal_floor": 1.5}, 30)
    for epoch in (1, 2, 3):
        e.on_epoch_end(epoch)
    assert float(e.temperature) == 1.5
    with pytest.raises(DataError, match="anneal_floor"):
        build_model("amn", {**CFG, "anneal_t0": 2.0, "anneal_floor": 3.0}, 30)


@pytest.mark.parametrize("field, value, expected", [("anneal_floor", 0.5, ">= 1"), ("input_projection", -3, ">= 0"),
                                                    ("balance_weight", -0.1, ">= 0"),
                                                    ("itl_detach_attention", "yes", "true or false"),
                                                    ("itl_form", "mixture", "experts")])
def test_new_options_refuse_bad_values_by_name(field, value, expected):
    from nbest_rescore.errors import DataError

    with pytest.raises(DataError, match=f"model_config.{field} must be") as err:
        build_model("amn", {**CFG, field: value}, 30)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_thesis_epoch_annealing_values():
    """000 section 6.3.1: T0 = 250, x0.15 per epoch, floor 1 (anneal_fraction unset)."""
    m = build_model("amn", {**CFG, "anneal_t0": 250.0, "anneal_gamma": 0.15}, 30)
    temps = [float(m.temperature)]
    for epoch in range(1, 5):
        m.on_epoch_end(epoch)
        temps.append(float(m.temperature))
    assert temps == pytest.approx([250.0, 37.5, 5.625, 1.0, 1.0])


def test_experts_itl_equals_its_definition_and_trains_the_controller():
    """itl_form experts: itl_weight * mean over real tokens of sum_i alpha_i * -log P(w | m_i),
    P through the shared output layer, computed here from the recorded memcells and attention."""
    torch.manual_seed(5)
    m = build_model("amn", {**CFG, "itl_weight": 0.7, "itl_form": "experts"}, 30).train()
    x, y = torch.randint(0, 30, (3, 6)), torch.randint(0, 30, (3, 6))
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[1, 4:] = False  # padding leaves nothing
    m.record_memcells = m.record_attention = True
    m.token_mask(mask)
    out = m(x, m.init_state(3))
    assert out.aux_loss is None  # the experts form needs the targets: not in the forward's aux
    loss = m.target_aux_loss(y)
    cells, alpha = m.recorded_memcells[0], m.recorded_attention[0]  # [B, T, K, H], [B, T, K]
    w, b = m.decoder.weight, m.decoder.bias
    logp = torch.log_softmax(cells @ w.T + b, -1).gather(-1, y[:, :, None, None].expand(3, 6, 4, 1)).squeeze(-1)
    per_token = -(alpha * logp).sum(-1)  # [B, T]
    expected = 0.7 * per_token[mask].mean()
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    assert m.target_aux_loss(y) is None  # used once per segment
    loss.backward()
    assert m.w_hh.grad[0].abs().sum() > 0  # the controller learns the gating through alpha
    m.eval()
    m.token_mask(mask)
    m(x, m.init_state(3))
    assert m.target_aux_loss(y) is None  # not in evaluation


def test_trainer_adds_the_experts_itl_to_the_loss():
    from nbest_rescore.training.step import segment_forward

    torch.manual_seed(2)
    x, y = torch.randint(0, 30, (2, 5)), torch.randint(0, 30, (2, 5))
    mask, reset = torch.ones(2, 5, dtype=torch.bool), torch.zeros(2, 5, dtype=torch.bool)
    losses = {}
    for weight in (0.0, 1.5):
        torch.manual_seed(0)
        m = build_model("amn", {**CFG, "itl_weight": weight, "itl_form": "experts"}, 30).train()
        _, step = segment_forward(m, m.init_state(2), x, y, mask, reset, True)
        losses[weight] = step
    assert losses[0.0].aux is None
    ce = float(losses[0.0].loss)
    assert float(losses[1.5].loss) == pytest.approx(ce + float(losses[1.5].aux) / 10, rel=1e-6)
    assert float(losses[1.5].aux) > 0
