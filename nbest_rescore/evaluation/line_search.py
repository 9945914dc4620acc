"""Exact line search for minimum-error-rate tuning (Och 2003, "Minimum Error Rate
Training in Statistical Machine Translation", section 6).

The score of every hypothesis is linear in the parameters ``x`` [M]:
``s = base + F @ x`` (natural log, larger = better). Along a line ``x = p + t * d`` each
hypothesis' score is ``c + t * g``; per utterance the chosen hypothesis as ``t`` varies
is given by the upper envelope of its lines, so the corpus error count is piecewise
constant in ``t`` with breakpoints where the envelopes change. :func:`line_minimize`
finds the exact minimum over ``[t_lo, t_hi]``; :func:`och_search` runs it along the
coordinate directions and seeded random ones, from a start point and random restarts.

The envelopes of all utterances are swept together (numpy over all hypotheses): each
sweep step moves every unfinished utterance to the next line that overtakes its
current one (the steepest at the nearest crossing), so a line minimisation costs about
(largest envelope size) x H operations.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

import numpy as np

from ..rescoring.combine import segment_argmax


@dataclass(frozen=True)
class LinearScores:
    """Scores linear in the parameters, with the word errors of every hypothesis.

    ``base`` float64 [H], ``features`` float64 [H, M]: score = base + features @ x
    (natural log, larger = better); ``offsets`` int64 [U + 1] (utterance u owns rows
    ``offsets[u]:offsets[u + 1]``, every one non-empty); ``errors`` int64 [H] word errors.
    """

    base: np.ndarray
    features: np.ndarray
    offsets: np.ndarray
    errors: np.ndarray

    def choice(self, x) -> np.ndarray:
        """int64 [U]: the chosen row of every utterance at ``x`` (ties: earliest)."""
        return segment_argmax(self.base + self.features @ np.asarray(x, dtype=np.float64), self.offsets)

    def errors_at(self, x) -> int:
        """Corpus word errors of the 1-best at parameters ``x`` [M]."""
        return int(self.errors[self.choice(x)].sum())


@dataclass(frozen=True)
class LineMin:
    """Result of one line minimisation: ``t`` (inside the best interval ``[lo, hi]``),
    its corpus ``errors`` and the hypotheses visited by the sweep (``visited``)."""

    t: float
    errors: int
    lo: float
    hi: float
    visited: int


def _first_max(keys: Tuple[np.ndarray, ...], seg: np.ndarray, loc: np.ndarray) -> np.ndarray:
    """Per segment (starts ``seg``, each row's segment ``loc``), the row with the
    lexicographically largest ``keys``, ties to the earliest row (int64, local rows)."""
    keep = np.ones(loc.size, dtype=bool)
    for key in keys:
        k = np.where(keep, key, -np.inf)
        keep &= k == np.maximum.reduceat(k, seg)[loc]
    return np.minimum.reduceat(np.where(keep, np.arange(loc.size), loc.size), seg)


def upper_envelopes(c, g, offsets, t_lo: float, t_hi: float):
    """The 1-best of every utterance along ``t`` in ``[t_lo, t_hi]``, for scores ``c + t g``.

    Args:
        c, g: float64 [H] intercepts and slopes; offsets: int64 [U + 1].
    Returns:
        ``(first, bt, bu, b_from, b_to, visited)``: first int64 [U] the row chosen just
        after ``t_lo``; for every breakpoint (B of them, in sweep order per utterance)
        its position ``bt`` float64 [B], utterance ``bu``, the row before ``b_from`` and
        after ``b_to``; ``visited`` the hypotheses looked at. Between breakpoints the
        chosen row is the one ``segment_argmax`` picks (ties to the earliest row).
    """
    c = np.asarray(c, dtype=np.float64)
    g = np.asarray(g, dtype=np.float64)
    n_utt = len(offsets) - 1
    lengths = np.diff(offsets)
    cur = _first_max((c + g * t_lo, g), offsets[:-1], np.repeat(np.arange(n_utt), lengths))
    first = cur.copy()
    t_cur = np.full(n_utt, float(t_lo))
    active = np.arange(n_utt)
    # (breakpoints, utterances, rows before, rows after) per sweep step; none to start with
    out: List[Tuple[np.ndarray, ...]] = [(np.empty(0), *(np.empty(0, np.int64) for _ in range(3)))]
    visited = 0
    while active.size:
        rows = np.flatnonzero(np.repeat(np.isin(np.arange(n_utt), active), lengths))
        loc = np.repeat(np.arange(active.size), lengths[active])
        visited += rows.size
        ci, gi, tc = c[cur[active]][loc], g[cur[active]][loc], t_cur[active][loc]
        up = g[rows] > gi
        with np.errstate(divide="ignore", invalid="ignore"):
            tj = np.where(up, (ci - c[rows]) / (g[rows] - gi), np.inf)
        tj = np.where(up, np.maximum(tj, tc), np.inf)
        seg = np.r_[0, np.cumsum(lengths[active])[:-1]]
        t_next = np.minimum.reduceat(tj, seg)
        go = t_next < t_hi
        # the steepest (then earliest) of the lines crossing at t_next
        at = np.where(up & (tj == t_next[loc]) & go[loc], g[rows], -np.inf)
        pick = _first_max((at,), seg, loc)
        moving = active[go]
        new = rows[pick[go]]
        out.append((t_next[go], moving, cur[moving], new))
        cur[moving] = new
        t_cur[moving] = t_next[go]
        active = moving
    bt, bu, bf, bto = (np.concatenate(a) for a in zip(*out))
    return first, bt, bu, bf, bto, visited


def line_minimize(problem: LinearScores, p, d, t_lo: float, t_hi: float) -> LineMin:
    """Exact minimum of the corpus errors on ``x = p + t d``, ``t`` in ``[t_lo, t_hi]``.

    The errors are piecewise constant in ``t``; of the intervals with the fewest errors
    the one holding ``t = 0`` is kept (``t = 0`` returned: no move), else the one whose
    midpoint is nearest to 0, and its midpoint is returned. Intervals narrower than
    ``1e-9 * (t_hi - t_lo)`` (rounding slivers) are passed over.

    Raises:
        ValueError: ``t_lo >= t_hi`` or not finite.
    """
    if not (np.isfinite(t_lo) and np.isfinite(t_hi) and t_lo < t_hi):
        raise ValueError(f"line_minimize: need finite t_lo < t_hi, got [{t_lo}, {t_hi}]")
    p = np.asarray(p, dtype=np.float64)
    d = np.asarray(d, dtype=np.float64)
    c = problem.base + problem.features @ p
    g = problem.features @ d
    first, bt, _, bf, bto, visited = upper_envelopes(c, g, problem.offsets, t_lo, t_hi)
    err = problem.errors
    e0 = int(err[first].sum())
    order = np.argsort(bt, kind="stable")
    bt, change = bt[order], (err[bto] - err[bf])[order]
    if bt.size:
        uniq, start = np.unique(bt, return_index=True)
        steps = np.add.reduceat(change, start)
    else:
        uniq, steps = np.empty(0), np.empty(0, np.int64)
    edges = np.r_[t_lo, uniq, t_hi]
    counts = e0 + np.r_[0, np.cumsum(steps)]
    wide = np.diff(edges) > 1e-9 * (t_hi - t_lo)
    best = counts[wide].min()
    cand = np.flatnonzero(wide & (counts == best))
    lo, hi = edges[cand], edges[cand + 1]
    home = np.flatnonzero((lo < 0.0) & (0.0 < hi))
    if home.size:
        k, t = cand[home[0]], 0.0
    else:
        mid = 0.5 * (lo + hi)
        j = int(np.argmin(np.abs(mid)))
        k, t = cand[j], float(mid[j])
    return LineMin(t=t, errors=int(best), lo=float(edges[k]), hi=float(edges[k + 1]), visited=int(visited))


def t_range(x, d, lower, upper) -> Tuple[float, float]:
    """The ``t`` with ``lower <= x + t d <= upper`` (every coordinate), as ``(lo, hi)``."""
    lo, hi = -np.inf, np.inf
    for xi, di, a, b in zip(x, d, lower, upper):
        if di > 0:
            lo, hi = max(lo, (a - xi) / di), min(hi, (b - xi) / di)
        elif di < 0:
            lo, hi = max(lo, (b - xi) / di), min(hi, (a - xi) / di)
    return float(lo), float(hi)


@dataclass(frozen=True)
class SearchRun:
    """One start of :func:`och_search`: the final parameters and their errors."""

    x: Tuple[float, ...]
    errors: int


@dataclass(frozen=True)
class SearchResult:
    """All starts (the given point first, then the restarts), the index of the best
    (fewest errors, ties to the first), line minimisations and hypotheses visited."""

    runs: Tuple[SearchRun, ...]
    best: int
    line_minimizations: int
    visited: int


def och_search(problem: LinearScores, x0, lower, upper, *, restarts: int = 5, seed: int = 0,
               spread=None, max_passes: int = 30) -> SearchResult:
    """Powell-style search by exact line minimisation (Och 2003, section 6).

    From ``x0`` (then ``restarts`` points drawn around it: ``x0 + spread * N(0, 1)``,
    clipped to the bounds) it minimises along every coordinate direction and as many
    seeded random unit directions, moving whenever the errors fall, until a pass over
    all directions gives no improvement (at most ``max_passes`` passes).

    Args:
        x0: float [M] start; lower, upper: float [M] bounds (finite, lower <= upper).
        spread: float [M] scale of the restart perturbation (default: 1 everywhere).
        seed: seeds the restarts and the random directions (numpy ``default_rng``).
    Returns:
        SearchResult.
    """
    lower, upper = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
    x0 = np.clip(np.asarray(x0, np.float64), lower, upper)
    m = x0.size
    spread = np.ones(m) if spread is None else np.asarray(spread, np.float64)
    rng = np.random.default_rng(seed)
    starts = [x0] + [np.clip(x0 + spread * rng.normal(size=m), lower, upper) for _ in range(restarts)]
    runs, n_lines, visited = [], 0, 0
    for x in starts:
        err = problem.errors_at(x)
        for _ in range(max_passes):
            rand = rng.normal(size=(m, m))
            dirs = np.vstack([np.eye(m), rand / np.linalg.norm(rand, axis=1, keepdims=True)])
            improved = False
            for d in dirs:
                lo, hi = t_range(x, d, lower, upper)
                if not hi - lo > 1e-12:
                    continue
                res = line_minimize(problem, x, d, lo, hi)
                n_lines, visited = n_lines + 1, visited + res.visited
                if res.errors < err and res.t != 0.0:
                    x_new = np.clip(x + res.t * d, lower, upper)
                    e_new = problem.errors_at(x_new)
                    if e_new < err:
                        x, err, improved = x_new, e_new, True
            if not improved:
                break
        runs.append(SearchRun(x=tuple(float(v) for v in x), errors=int(err)))
    best = min(range(len(runs)), key=lambda i: runs[i].errors)
    return SearchResult(runs=tuple(runs), best=best, line_minimizations=n_lines, visited=visited)


def initial_point(k: int, lm_weight: float, word_ins_penalty: float) -> np.ndarray:
    """``[a_0 .. a_K, wip]`` with ``a_k = lm_weight / (K + 1)`` (equal LM weights)."""
    return np.r_[np.full(k + 1, lm_weight / (k + 1)), word_ins_penalty]


def split_point(x, k: int) -> Tuple[float, Tuple[float, ...], float]:
    """``(delta, (w_0 .. w_K), wip)`` from ``x = [a_0 .. a_K, wip]``: ``delta = sum a``,
    ``w = a / delta`` (``w_0 = 1`` when delta is 0)."""
    a = np.asarray(x[:k + 1], dtype=np.float64)
    delta = float(a.sum())
    w = a / delta if delta > 0 else np.r_[1.0, np.zeros(k)]
    return delta, tuple(float(v) for v in w), float(x[k + 1])


def box(k: int, limit: float) -> Tuple[np.ndarray, np.ndarray]:
    """Bounds of ``[a_0 .. a_K, wip]``: ``0 <= a_k <= limit``, ``|wip| <= limit``."""
    return np.r_[np.zeros(k + 1), -limit], np.full(k + 2, float(limit))


__all__ = ["LinearScores", "LineMin", "SearchResult", "SearchRun", "box", "initial_point", "line_minimize",
           "och_search", "split_point", "t_range", "upper_envelopes"]
