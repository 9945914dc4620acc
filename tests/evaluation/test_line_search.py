"""Exact line search (Och 2003): the minimum along a line equals a brute-force scan of
the errors (dense samples plus every breakpoint +- epsilon), and the returned ``t``
achieves it; the envelope sweep agrees with ``segment_argmax`` between breakpoints."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nbest_rescore.evaluation.line_search import (  # noqa: E402
    LinearScores, box, line_minimize, och_search, split_point, t_range)
from nbest_rescore.rescoring.combine import segment_argmax  # noqa: E402

T_LO, T_HI = -5.0, 5.0


def _problem(seed, n_utt, max_len, m, integer):
    """Random lists: integer data gives exact ties (parallel/identical lines, lines
    meeting in one point), float data the generic case."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, max_len + 1, size=n_utt)
    off = np.r_[0, np.cumsum(lens)].astype(np.int64)
    h = int(off[-1])
    draw = (lambda *s: rng.integers(-3, 4, size=s).astype(float)) if integer else (lambda *s: rng.normal(size=s))
    prob = LinearScores(base=draw(h), features=draw(h, m), offsets=off, errors=rng.integers(0, 6, size=h))
    p, d = draw(m), draw(m)
    if not d.any():
        d[0] = 1.0
    return prob, p, d


def _errors_along(prob, c, g, ts):
    return np.array([prob.errors[segment_argmax(c + t * g, prob.offsets)].sum() for t in ts])


@settings(max_examples=60, deadline=None, database=None)
@given(seed=st.integers(0, 2**32 - 1), n_utt=st.integers(1, 6), max_len=st.integers(1, 7),
       m=st.integers(1, 3), integer=st.booleans())
def test_line_minimum_is_exact(seed, n_utt, max_len, m, integer):
    prob, p, d = _problem(seed, n_utt, max_len, m, integer)
    res = line_minimize(prob, p, d, T_LO, T_HI)
    c, g = prob.base + prob.features @ p, prob.features @ d
    # every pairwise crossing of lines of one utterance (a superset of the breakpoints)
    bps = []
    for u in range(n_utt):
        s = slice(prob.offsets[u], prob.offsets[u + 1])
        cu, gu = c[s], g[s]
        dg = gu[None, :] - gu[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (cu[:, None] - cu[None, :]) / dg
        bps.append(t[(dg != 0) & (t > T_LO) & (t < T_HI)])
    bps = np.unique(np.concatenate(bps))
    eps = 1e-7
    ts = np.r_[np.linspace(T_LO, T_HI, 1001), bps - eps, bps + eps]
    ts = ts[(ts > T_LO) & (ts < T_HI)]
    if bps.size:  # off the breakpoints themselves (there ties pick by index, a single point)
        ts = ts[np.min(np.abs(ts[:, None] - bps[None, :]), axis=1) > 1e-9]
    brute = _errors_along(prob, c, g, ts)
    assert res.errors == brute.min()
    assert T_LO <= res.lo < res.t < res.hi <= T_HI or res.t == 0.0
    assert _errors_along(prob, c, g, [res.t])[0] == res.errors
    # the whole interval reported has that error count
    inner = np.linspace(res.lo, res.hi, 7)[1:-1]
    inner = inner if not bps.size else inner[np.min(np.abs(inner[:, None] - bps[None, :]), axis=1) > 1e-9]
    assert np.all(_errors_along(prob, c, g, inner) == res.errors)


def test_search_never_worse_than_start_and_respects_bounds():
    prob, _, _ = _problem(7, 40, 8, 3, False)
    lower, upper = box(1, 10.0)
    x0 = np.array([1.0, 1.0, 0.0])
    res = och_search(prob, x0, lower, upper, restarts=2, seed=3)
    assert len(res.runs) == 3 and res.line_minimizations > 0 and res.visited > 0
    assert res.runs[0].errors <= prob.errors_at(x0)
    for run in res.runs:
        x = np.array(run.x)
        assert np.all(x >= lower) and np.all(x <= upper) and prob.errors_at(x) == run.errors
    assert res.runs[res.best].errors == min(r.errors for r in res.runs)
    again = och_search(prob, x0, lower, upper, restarts=2, seed=3)
    assert again == res  # seeded: the same search


def test_helpers():
    assert t_range([1.0, 0.0], [1.0, -2.0], [0.0, -1.0], [3.0, 1.0]) == (-0.5, 0.5)
    delta, w, wip = split_point([2.0, 6.0, -0.5], 1)
    assert (delta, w, wip) == (8.0, (0.25, 0.75), -0.5)
    assert split_point([0.0, 0.0, 1.0], 1)[1] == (1.0, 0.0)
    with pytest.raises(ValueError, match="t_lo < t_hi"):
        line_minimize(_problem(1, 2, 2, 1, True)[0], [0.0], [1.0], 1.0, 1.0)
