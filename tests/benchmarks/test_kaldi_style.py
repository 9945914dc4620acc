"""benchmarks/kaldi_style.py, the baseline of ``rescore_speed.py --vs-kaldi-style``: a
plain-PyTorch copy of Kaldi's N-best scorer. Its costs, computed by its own modules
(time-major padded batches, ``nn.CrossEntropyLoss`` over the full vocabulary), equal
the toolkit's on the ci lists: with the state carried, those of ``--history
first-pass``; without, those of ``--history none``. And the carried state changes the
costs (so the comparison really covers it)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
from benchmarks.kaldi_style import KaldiStyleScorer


@pytest.fixture(scope="module")
def lists(ci_nbest):
    """The first 12 ci utterances (several per document), 15-best."""
    from dataclasses import replace

    from nbest_rescore.types import NbestSet

    utts = tuple(replace(u, keys=u.keys[:15], hyps=u.hyps[:15], ac_cost=u.ac_cost[:15], lm_cost=u.lm_cost[:15],
                         graph_cost=u.graph_cost[:15]) for u in ci_nbest.utterances[:12])
    return NbestSet(utts, ci_nbest.doc_source, ci_nbest.source)


def toolkit_costs(lm_path, lists, history):
    from nbest_rescore.models import load_model
    from nbest_rescore.rescoring.combine import Weights
    from nbest_rescore.rescoring.history import rescore
    from nbest_rescore.rescoring.scorer import NnScorer

    model, vocab, _ = load_model(lm_path)
    return rescore(lists, NnScorer(model, vocab, torch.device("cpu")), Weights(), history).nn_cost


def test_costs_equal_the_toolkit_with_and_without_the_carried_state(tiny_lm, lists, one_thread):
    from nbest_rescore.models import load_model

    assert max(len(d) for d in lists.documents()) > 1  # a state is carried somewhere
    model, vocab, _ = load_model(tiny_lm)
    carried = KaldiStyleScorer(model, vocab, torch.device("cpu"), carry=True).costs(lists)
    fresh = KaldiStyleScorer(model, vocab, torch.device("cpu"), carry=False).costs(lists)
    np.testing.assert_allclose(carried, toolkit_costs(tiny_lm, lists, "first-pass"), atol=1e-4, rtol=0)
    np.testing.assert_allclose(fresh, toolkit_costs(tiny_lm, lists, "none"), atol=1e-4, rtol=0)
    assert np.abs(carried - fresh).max() > 0.1
    first = [d[0] for d in lists.documents()]  # document starts read no history either way
    offsets = np.cumsum([0] + [len(u) for u in lists.utterances])
    for u in first:
        np.testing.assert_allclose(carried[offsets[u]:offsets[u + 1]], fresh[offsets[u]:offsets[u + 1]], atol=1e-5)
    pad = KaldiStyleScorer.positions(lists, carry=False)
    assert pad == sum(len(u) * (1 + max(len(h) for h in u.hyps)) for u in lists.utterances)
    assert KaldiStyleScorer.positions(lists) == pad + sum(1 + len(u.hyps[0]) for u in lists.utterances)


def test_refuses_a_model_it_cannot_copy(tiny_lm, tmp_path):
    from nbest_rescore.models import build_model, load_model

    _, vocab, _ = load_model(tiny_lm)
    adaptive = build_model("gru", {"hidden_size": 16, "embedding_dim": 16, "output": "adaptive",
                                   "adaptive_cutoffs": [100]}, len(vocab))
    with pytest.raises(ValueError, match="full softmax"):
        KaldiStyleScorer(adaptive, vocab, torch.device("cpu"))
    amn = build_model("amn", {}, len(vocab))
    with pytest.raises(ValueError, match="RNN/GRU/LSTM"):
        KaldiStyleScorer(amn, vocab, torch.device("cpu"))


@pytest.mark.slow
def test_rescore_speed_vs_kaldi_style_on_ci(DATA, tiny_lm, tmp_path):
    out = tmp_path / "vs.json"
    base = [sys.executable, "-m", "benchmarks.rescore_speed", "--lm", str(tiny_lm),
            "--nbest", str(DATA / "ci"), "--max-utts", "6", "--nbest-size", "10", "--repeat", "1", "--threads", "1"]
    res = subprocess.run(base + ["--vs-kaldi-style", "--json", str(out)], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    d = json.loads(out.read_text())
    assert d["history"] == "first-pass" and set(d["paths"]) == {"kaldi_style", "default", "default_plain_softmax"}
    assert d["paths"]["kaldi_style"]["max_abs_diff_vs_default"] <= 1e-4
    assert d["paths"]["kaldi_style"]["lm_positions"] > d["paths"]["default"]["lm_positions"]
    # the fused output layer and the plain log_softmax path give the same exact costs
    assert d["paths"]["default_plain_softmax"]["max_abs_diff_vs_default"] <= 1e-5
    assert set(d["speedup_words_per_s"]) == {"default/kaldi_style", "default_plain_softmax/kaldi_style",
                                             "default/default_plain_softmax"}
    res = subprocess.run(base + ["--history", "first-pass", "--paths", "one_at_a_time,default"],
                         capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 2 and "initial state" in res.stderr
    res = subprocess.run(base + ["--paths", "default_adaptive"], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 2 and "--vs-kaldi-style --output adaptive" in res.stderr
