"""Grid tuning and heat-map tests on the real ci N-best data."""
from __future__ import annotations

import os

import numpy as np
import pytest

from nbest_rescore.errors import DataError
from nbest_rescore.options import SearchOptions
from nbest_rescore.evaluation.plots import plot_wer_heatmap
from nbest_rescore.evaluation.tune_result import TunePoint, TuneResult
from nbest_rescore.evaluation.tune_data import tune_data
from nbest_rescore.evaluation.tuning import tune_grid, tune_line
from nbest_rescore.evaluation.wer import compute_wer
from nbest_rescore.rescoring.combine import Weights, combine


def grid_of(nbest, refs, nn_cost, **options):
    """:func:`tune_grid` of the lists, references and NN costs at ``options``."""
    return tune_grid(tune_data(nbest, refs, nn_cost), SearchOptions(**options))


def line_of(nbest, refs, nn_cost, **options):
    """:func:`tune_line` of the lists, references and NN costs at ``options``."""
    return tune_line(tune_data(nbest, refs, nn_cost), SearchOptions(**options))


@pytest.fixture(scope="module")
def nn_cost(ci):
    nbest, _ = ci
    rng = np.random.default_rng(1234)
    out = {}
    for u in nbest.utterances:
        noise = rng.normal(0.0, 2.0, size=len(u))
        for k, c, e in zip(u.keys, u.lm_cost, noise):
            out[k] = float(c * 0.9 + e)
    return out


def _loop_choice(nbest, weights, nn_cost=None):
    """Explicit per-utterance re-ranking, first maximum wins."""
    out = {}
    for u in nbest.utterances:
        nn = None if nn_cost is None else np.array([nn_cost[k] for k in u.keys])
        s = combine(u.ac_cost, u.lm_cost, u.num_words, weights, nn_cost=nn,
                    graph_cost=u.graph_cost)
        best = max(range(len(u)), key=lambda i: (s[i], -i))
        out[u.utt_id] = u.hyps[best]
    return out


def test_first_pass_point(ci, edit_distance):
    nbest, refs = ci
    res = grid_of(nbest, refs, None, interps=[1.0], lm_weights=[9.5],
                    word_ins_penalties=[-0.629606], acoustic_scale=1.0)
    assert len(res.points) == 1 and res.best == res.points[0]
    dp = sum(edit_distance(refs[u.utt_id], u.hyps[0]) for u in nbest.utterances)
    ref_words = sum(len(refs[u.utt_id]) for u in nbest.utterances)
    assert res.best.wer == pytest.approx(dp / ref_words * 100, abs=1e-12)
    # the same ranking with every weight divided by 9.5 (acoustic scale 1/9.5, delta 1)
    res2 = grid_of(nbest, refs, None, interps=[1.0], lm_weights=[1.0], word_ins_penalties=[-0.629606 / 9.5],
                     acoustic_scale=1 / 9.5)
    assert res2.best.wer == pytest.approx(res.best.wer, abs=1e-12)
    # the default penalty is 0, not the benchmark's
    default = grid_of(nbest, refs, None, interps=[1.0], lm_weights=[9.5])
    assert default.best.word_ins_penalty == 0.0
    assert default.best.wer == grid_of(nbest, refs, None, interps=[1.0], lm_weights=[9.5],
                                         word_ins_penalties=[0.0]).best.wer


def test_lm_weight_sweep_matches_loop(ci):
    nbest, refs = ci
    lws = np.arange(0.0, 20.01, 0.5)
    res = grid_of(nbest, refs, None, interps=[1.0], lm_weights=lws,
                    word_ins_penalties=[-0.629606])
    assert [p.lm_weight for p in res.points] == pytest.approx(list(lws))
    for p in res.points:
        w = Weights(acoustic_scale=1.0, lm_weight=p.lm_weight, interp=1.0,
                    word_ins_penalty=-0.629606)
        assert p.wer == pytest.approx(compute_wer(refs, _loop_choice(nbest, w)).wer, abs=1e-9)
    assert res.best.wer == min(p.wer for p in res.points)
    first_min = next(p for p in res.points if p.wer == res.best.wer)
    assert res.best is first_min or res.best == first_min
    # lw 0 (acoustic only) is worse than the tuned point
    assert res.points[0].wer >= res.best.wer


def test_synthetic_nn_best_matches_loop(ci, nn_cost):
    nbest, refs = ci
    res = grid_of(nbest, refs, nn_cost, interps=[0.0, 0.25, 0.5, 0.75, 1.0],
                    lm_weights=[6.0, 8.0, 9.5, 11.0, 13.0],
                    word_ins_penalties=[-1.5, -0.629606, 0.0])
    assert len(res.points) == 5 * 5 * 3
    # grid order: interp outermost, wip innermost
    assert [(p.interp, p.lm_weight, p.word_ins_penalty) for p in res.points[:4]] == [
        (0.0, 6.0, -1.5), (0.0, 6.0, -0.629606), (0.0, 6.0, 0.0), (0.0, 8.0, -1.5)]
    b = res.best
    w = Weights(acoustic_scale=1.0, lm_weight=b.lm_weight, interp=b.interp,
                word_ins_penalty=b.word_ins_penalty)
    assert res.best_weights() == w
    assert b.wer == pytest.approx(compute_wer(refs, _loop_choice(nbest, w, nn_cost)).wer,
                                  abs=1e-9)
    # a couple of non-best points too
    for p in (res.points[0], res.points[37]):
        wp = Weights(acoustic_scale=1.0, lm_weight=p.lm_weight, interp=p.interp,
                     word_ins_penalty=p.word_ins_penalty)
        assert p.wer == pytest.approx(
            compute_wer(refs, _loop_choice(nbest, wp, nn_cost)).wer, abs=1e-9)
    table = res.table()
    assert "*" in table and len(table.splitlines()) == len(res.points) + 3
    d = res.to_dict()
    assert d["best"]["wer"] == b.wer and len(d["points"]) == len(res.points)


def test_tune_grid_errors(ci, nn_cost):
    nbest, refs = ci
    with pytest.raises(DataError, match="NN costs are needed"):
        grid_of(nbest, refs, None, interps=[0.5], lm_weights=[9.5])
    partial = dict(nn_cost)
    gone = nbest.utterances[3].keys[:2]
    for k in gone:
        del partial[k]
    with pytest.raises(DataError, match=gone[0]):
        grid_of(nbest, refs, partial, interps=[0.5], lm_weights=[9.5])
    with pytest.raises(DataError, match=r"--interps must be a finite number in \[0, 1\], got 1.5"):
        grid_of(nbest, refs, nn_cost, interps=[1.5], lm_weights=[9.5])
    with pytest.raises(DataError, match="--lm-weights: the grid is empty"):
        grid_of(nbest, refs, None, interps=[1.0], lm_weights=[])


def test_heatmap_png(ci, nn_cost, tmp_path):
    nbest, refs = ci
    res = grid_of(nbest, refs, nn_cost, interps=[0.0, 0.5, 1.0], lm_weights=[7.0, 9.5, 12.0],
                    word_ins_penalties=[-0.629606, 0.0])
    out = tmp_path / "heat.png"
    ret = plot_wer_heatmap(res, out)
    assert os.fspath(ret) == os.fspath(out)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    assert os.listdir(tmp_path) == ["heat.png"]
    # overwrite in place, still no leftovers
    plot_wer_heatmap(res, str(out))
    assert os.listdir(tmp_path) == ["heat.png"]
    # a hand-made result with a missing cell
    pts = (TunePoint(1.0, 9.5, 0.0, 30.0), TunePoint(0.5, 11.0, 0.0, 29.0))
    plot_wer_heatmap(TuneResult(points=pts, best=pts[1], acoustic_scale=1.0), out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


HEAT_TITLE = "gru.pt on dev/, history first-pass"


def _hand_made_result():
    pts = (TunePoint(1.0, 9.5, 0.0, 30.0), TunePoint(0.5, 11.0, 0.0, 29.0), TunePoint(0.5, 9.5, 0.0, 29.5))
    return TuneResult(points=pts, best=pts[1], acoustic_scale=1.0)


def test_heatmap_title_names_model_and_data(tmp_path, monkeypatch):
    """No data needed: the written figure's title starts with the caller's line (model
    and data), then says what it shows; without ``title`` only the latter."""
    from nbest_rescore.evaluation import plots

    drawn = []
    build = plots.wer_heatmap_figure
    monkeypatch.setattr(plots, "wer_heatmap_figure", lambda *a, **k: drawn.append(build(*a, **k)) or drawn[-1])
    out = tmp_path / "tune_wer.png"
    assert plots.plot_wer_heatmap(_hand_made_result(), out, title=HEAT_TITLE) == str(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and os.listdir(tmp_path) == ["tune_wer.png"]
    lines = drawn[-1].axes[0].get_title().splitlines()
    assert lines[0] == HEAT_TITLE
    assert lines[1].startswith("WER (%) at word insertion penalty 0") and "best (red): lambda 0.5" in lines[2]
    untitled = plots.wer_heatmap_figure(_hand_made_result()).axes[0].get_title().splitlines()
    assert untitled == lines[1:]


# --- several neural LMs, line search; one-LM output frozen -----------------------------

def _noisy(nbest, seed, scale=0.9, sigma=2.0):
    rng = np.random.default_rng(seed)
    return {k: float(c * scale + e) for u in nbest.utterances
            for k, c, e in zip(u.keys, u.lm_cost, rng.normal(0.0, sigma, size=len(u)))}


def test_one_lm_grid_output_frozen(ci, nn_cost):
    """Table and tune.json points/best of the one-LM grid as computed by the code before
    multi-LM tuning (sha256 frozen then)."""
    import hashlib
    import json

    nbest, refs = ci
    res = grid_of(nbest, refs, nn_cost, interps=[round(0.1 * i, 10) for i in range(11)],
                    lm_weights=[5.0, 7.5, 9.5, 12.0], word_ins_penalties=[-1.0, -0.629606, 0.0])
    assert hashlib.sha256(res.table().encode()).hexdigest() == (
        "389543d72d9a004d82f70a2ec6f1baa661e7284c8f7b901f136f7e3a7c6fb0a1")
    d = res.to_dict()
    old = {k: d[k] for k in ("acoustic_scale", "best", "points")}
    assert d["best"] == {"interp": 1.0, "lm_weight": 9.5, "word_ins_penalty": -1.0, "wer": 31.327433628318584}
    assert hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest() == (
        "c81f5575c2cdad9bba9d4a85932c1d08d9346261ff2ca755a8685ad67f7c5db9")
    assert d["weights"] == {"acoustic_scale": 1.0, "lm_weight": 9.5, "word_ins_penalty": -1.0, "ngram": 1.0,
                            "nn": {"nn": 0.0}}
    assert d["search"] == "grid" and d["evaluations"] == 132 and "seed" not in d


@pytest.mark.parametrize("k", [1, 2])
def test_line_search_at_least_as_good_as_grid(ci, nn_cost, k):
    nbest, refs = ci
    costs = [nn_cost, _noisy(nbest, 99, 0.95, 1.5)][:k]
    grid = grid_of(nbest, refs, costs, interps=[round(0.1 * i, 10) for i in range(11)],
                     lm_weights=np.arange(5.0, 14.01, 0.5), word_ins_penalties=[-0.629606])
    line = line_of(nbest, refs, costs, restarts=3, seed=0)
    assert line.best.wer <= grid.best.wer
    assert line.search == "line" and line.seed == 0 and len(line.points) == 4 and line.evaluations > 0
    # the reported WER is the combination's at the reported (normalised) weights
    w = line.best_weights()
    loop = compute_wer(refs, _loop_choice(nbest, w, costs[0]) if k == 1 else _loop_choice_multi(nbest, w, costs)).wer
    assert line.best.wer == pytest.approx(loop, abs=1e-9)
    if k == 2:
        assert len(grid.points) == 66 * 19  # (w0, w1) on the 0.1 simplex x 19 LM weights
        assert all(abs(p.interp + sum(p.nn_weights) - 1) < 1e-9 for p in grid.points)
        assert line.weights_block()["nn"].keys() == {"nn", "nn_2"}


def _loop_choice_multi(nbest, weights, costs):
    out = {}
    for u in nbest.utterances:
        nn = [np.array([c[k] for k in u.keys]) for c in costs]
        s = combine(u.ac_cost, u.lm_cost, u.num_words, weights, nn_cost=nn, graph_cost=u.graph_cost)
        out[u.utt_id] = u.hyps[int(np.argmax(s))]
    return out
