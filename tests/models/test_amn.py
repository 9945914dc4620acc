"""AMN specifics (thesis 000 chapter 4): attention, annealing, dropout modes, ITL."""
import torch

from nbest_rescore.models import build_model

CFG = {"embedding_dim": 8, "hidden_size": 6, "num_memcells": 4}


def reference_amn_step_by_step(m, x):
    """Straightforward AMN: one torch GRUCell per memcell and controller, a Python loop
    over memcells, independent of the batched implementation."""
    h = m.config.hidden_size
    k1 = m.config.num_memcells + 1
    cells = []
    for k in range(k1):
        c = torch.nn.GRUCell(m.config.embedding_dim, h)
        with torch.no_grad():
            c.weight_ih.copy_(m.w_ih[k].T)
            c.weight_hh.copy_(m.w_hh[k].T)
            c.bias_ih.copy_(m.b_ih[k])
            c.bias_hh.copy_(m.b_hh[k])
        cells.append(c)
    emb = m.embedding(x)
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
    for mode, dropped in (("contr", {0}), ("mem", {1, 2, 3, 4}), ("all", {0, 1, 2, 3, 4}), ("none", set())):
        m = build_model("amn", {**CFG, "dropout_mode": mode, "dropout": 0.5}, 30).train()
        xs = m._input_masks(x)
        for k in range(5):
            same = torch.equal(xs[:, :, k], x)
            assert same == (k not in dropped), (mode, k)
        m.eval()
        assert torch.equal(m._input_masks(x)[:, :, 0], x)


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
    from nbest_rescore.training.streams import encode_document, make_streams, run_segment, segments
    from nbest_rescore.training.trainer import segment_loss
    from nbest_rescore.vocab import Vocabulary

    refs = list(read_references(DATA / "ci" / "ref.txt").values())
    vocab = Vocabulary(["</s>", "<unk>"] + sorted({w for s in refs for w in s})[:100])
    streams = make_streams([encode_document(refs[i:i + 1], vocab) for i in range(24)], 3)
    assert int(streams.reset[:, 1:30].sum()) > 0  # documents start inside the segments
    torch.manual_seed(0)
    m = build_model("amn", {**CFG, "anneal_t0": 3.0, "itl_weight": 0.5}, len(vocab)).train()
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


def test_anneal_fraction_reaches_one_at_that_share_of_the_planned_epochs():
    m = build_model("amn", {**CFG, "anneal_t0": 250.0, "anneal_fraction": 0.3}, 30)
    m.plan_training(20)  # T = 1 after round(0.3 * 20) = 6 epochs
    temps = []
    for epoch in range(1, 9):
        m.on_epoch_end(epoch)
        temps.append(float(m.temperature))
    assert all(t > 1.0 for t in temps[:5]) and temps[5:] == [1.0, 1.0, 1.0]
    assert abs(temps[0] - 250.0 ** (5 / 6)) < 1e-3  # T0 * T0^(-1/6)


def test_itl_warm_start_ramps_after_annealing():
    m = build_model("amn", {**CFG, "anneal_t0": 9.0, "anneal_gamma": 1 / 3, "itl_weight": 1.0,
                            "itl_ramp_epochs": 2}, 30)
    scales = [float(m.itl_scale)]
    for epoch in range(1, 6):
        m.on_epoch_end(epoch)
        scales.append(float(m.itl_scale))
    # T: 9 -> 3 -> 1 (after epoch 2): off for epochs 1-2, then 1/2, then full
    assert scales == [0.0, 0.0, 0.5, 1.0, 1.0, 1.0]
    assert "itl_scale" in m.state_dict()  # resumed with the run
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
    conf = tmp_path / "amn.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    TrainJob(config=str(conf), out=str(tmp_path / "amn.pt"), max_words=3000).run(progress=False)
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
