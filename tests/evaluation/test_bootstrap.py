"""Bootstrap intervals and improvement probabilities (evaluation.bootstrap) on dev 1-bests:
exactly a plain-Python loop over the same draws, and within Monte-Carlo error of Kaldi's
own compute-wer-bootci (when the real Kaldi is built)."""
from __future__ import annotations

import math
import re
import subprocess

import numpy as np
import pytest

from nbest_rescore.evaluation import bootstrap as bs
from nbest_rescore.rescoring.combine import Weights


@pytest.fixture(scope="module")
def two_systems(dev, own_argmax, edit_distance):
    """Dev: the first pass (rank 1) and the 1-best at LM weight 11 and the benchmark
    decoder's word insertion penalty -0.629606 (acoustic + n-gram; P(improve) near 0.63,
    a discriminating check), each as hypotheses by utterance and
    int64 [U] word errors; int64 [U] reference words."""
    nbest, refs = dev
    w = Weights(lm_weight=11.0, interp=1.0, word_ins_penalty=-0.629606)
    first = {u.utt_id: u.hyps[0] for u in nbest.utterances}
    other = {u.utt_id: u.hyps[own_argmax(u, w)] for u in nbest.utterances}

    def errors(hyps):
        return np.array([edit_distance(refs[u], h) for u, h in hyps.items()], dtype=np.int64)

    words = np.array([len(refs[u]) for u in first], dtype=np.int64)
    return refs, first, other, errors(first), errors(other), words


def _loop_bootstrap(errors, words, idx):
    """Plain loops over the drawn indices (rows of idx): mean, std, percentiles of the
    replications' WERs (percent) as the module documents them."""
    wers = []
    for row in idx.tolist():
        e = sum(int(errors[i]) for i in row)
        n = sum(int(words[i]) for i in row)
        wers.append(e / n * 100.0)
    r = len(wers)
    mean = sum(wers) / r
    std = math.sqrt(sum((w - mean) ** 2 for w in wers) / r)
    s = sorted(wers)

    def pct(p):  # linear interpolation between closest ranks (numpy's default)
        x = p / 100 * (r - 1)
        lo = math.floor(x)
        return s[lo] + (s[min(lo + 1, r - 1)] - s[lo]) * (x - lo)

    return mean, std, pct(2.5), pct(97.5)


def test_equals_a_python_loop_over_the_same_draws(two_systems, monkeypatch):
    _, _, _, ea, eb, words = two_systems
    r, seed = 400, 5
    idx = np.random.default_rng(seed).integers(0, len(words), size=(r, len(words)))
    monkeypatch.setattr(bs, "CHUNK_INDICES", 7 * len(words) + 3)  # several chunks of whole rows
    got = bs.bootstrap_wer(ea, words, r, seed)
    mean, std, lo, hi = _loop_bootstrap(ea, words, idx)
    assert got.mean == pytest.approx(mean, rel=1e-12) and got.std == pytest.approx(std, rel=1e-9)
    assert (got.low, got.high) == pytest.approx((mean - 1.96 * std, mean + 1.96 * std), rel=1e-9)
    assert (got.percentile_low, got.percentile_high) == pytest.approx((lo, hi), rel=1e-12)
    assert got.wer == pytest.approx(ea.sum() / words.sum() * 100, rel=1e-15)
    assert (got.replications, got.seed, got.utterances) == (r, seed, len(words))
    wins = sum(1 for row in idx.tolist() if sum(int(ea[i]) - int(eb[i]) for i in row) > 0)
    assert bs.improvement_probability(ea, eb, r, seed) == wins / r
    assert bs.improvement_probability(eb, ea, r, seed) <= 1 - wins / r  # ties count for neither
    monkeypatch.undo()
    assert bs.bootstrap_wer(ea, words, r, seed) == got  # the chunking does not change the draws


def test_bad_input():
    with pytest.raises(ValueError, match="one length"):
        bs.bootstrap_wer([1, 2], [3, 4, 5], 10)
    with pytest.raises(ValueError, match="no reference words"):
        bs.bootstrap_wer([1, 2], [0, 0], 10)
    with pytest.raises(ValueError, match="replications"):
        bs.improvement_probability([1], [2], 0)


def _kaldi_line(pattern, text):
    m = re.search(pattern, text)
    assert m, text
    return [float(x) for x in m.groups()]


def test_close_to_kaldi_compute_wer_bootci(two_systems, kaldi_real, tmp_path):
    """Kaldi's own draws differ (its RandInt), so: means within 0.1 absolute, interval
    half-widths within 10% relative, P(improve) within 0.03, at 10000 replications."""
    refs, first, other, ea, eb, words = two_systems
    for name, items in (("ref", {u: refs[u] for u in first}), ("a", first), ("b", other)):
        (tmp_path / name).write_text("".join(" ".join((u, *w)) + "\n" for u, w in items.items()))
    res = subprocess.run(["compute-wer-bootci", "--replications=10000", f"ark:{tmp_path / 'ref'}",
                          f"ark:{tmp_path / 'a'}", f"ark:{tmp_path / 'b'}"], env=kaldi_real.env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    num = r"([0-9.]+)"
    kaldi = {s: _kaldi_line(rf"{s}: %WER {num} 95% Conf Interval \[ {num}, {num} \]", res.stdout)
             for s in ("Set1", "Set2")}
    p_kaldi = _kaldi_line(rf"Probability of Set2 improving Set1: {num}", res.stdout)[0] / 100
    for s, e in (("Set1", ea), ("Set2", eb)):
        ours = bs.bootstrap_wer(e, words, 10000, 0)
        mean, lo, hi = kaldi[s]
        assert ours.mean == pytest.approx(mean, abs=0.1)
        assert (ours.high - ours.low) / 2 == pytest.approx((hi - lo) / 2, rel=0.1)
        assert ours.percentile_low == pytest.approx(lo, abs=0.2) and ours.percentile_high == pytest.approx(hi, abs=0.2)
    assert ea.sum() != eb.sum() and 0.5 < p_kaldi < 0.75
    assert bs.improvement_probability(ea, eb, 10000, 0) == pytest.approx(p_kaldi, abs=0.03)
