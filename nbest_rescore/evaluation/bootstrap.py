"""Bootstrap confidence intervals of the WER and the probability that one system improves
on another, by resampling utterances (Bisani & Ney 2004), as Kaldi's
``compute-wer-bootci`` computes them; the statistics and the draws (rows of
``numpy.random.default_rng(seed).integers(0, U, size=(R, U))``, drawn here in chunks of
whole rows) are described in docs/evaluation.md. Interval: ``mean -+ 1.96 * std``
(population std); percentiles by numpy's linear interpolation. WERs are in percent,
probabilities in [0, 1].
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, Iterator, Tuple

import numpy as np

from ..options import REPLICATIONS  # the default of --replications, defined once there
#: Most drawn indices held at once (rows of U indices per chunk: this // U).
CHUNK_INDICES = 1 << 20
#: The normal quantile of Kaldi's interval.
Z95 = 1.96


@dataclass(frozen=True)
class BootstrapWer:
    """The bootstrap of one system's WER (all WERs in percent).

    Attributes:
        wer: the WER of the utterances themselves (``sum e / sum n``).
        mean, std: mean and population standard deviation of the replications' WERs.
        low, high: ``mean -+ 1.96 * std`` (``compute-wer-bootci``'s interval).
        percentile_low, percentile_high: the 2.5 % and 97.5 % points.
        replications: R; seed: the draws' seed; utterances: U.
    """

    wer: float
    mean: float
    std: float
    low: float
    high: float
    percentile_low: float
    percentile_high: float
    replications: int
    seed: int
    utterances: int

    def to_dict(self) -> Dict[str, float]:
        """All fields, JSON-ready."""
        return asdict(self)

    def interval(self) -> str:
        """``"[11.80, 12.90]"``: the interval ``mean -+ 1.96 std``."""
        return f"[{self.low:.2f}, {self.high:.2f}]"

    def percentile(self) -> str:
        """``"[11.81, 12.88]"``: the 2.5 / 97.5 % percentile interval."""
        return f"[{self.percentile_low:.2f}, {self.percentile_high:.2f}]"

    def describe(self) -> str:
        """One line: WER, bootstrap mean, both intervals."""
        return f"WER {self.wer:.2f}%, mean {self.mean:.2f}, 95% {self.interval()}, percentile {self.percentile()}"


def _check(*vectors) -> Tuple[np.ndarray, ...]:
    """The per-utterance vectors as int64 [U] (same U, >= 1 utterance, counts >= 0)."""
    arrays = tuple(np.asarray(a, dtype=np.int64) for a in vectors)
    n = arrays[0].shape
    if len(n) != 1 or n[0] == 0 or any(a.shape != n for a in arrays) or any((a < 0).any() for a in arrays):
        raise ValueError(f"bootstrap: expected non-negative int vectors [U] of one length U >= 1, got shapes "
                         f"{[a.shape for a in arrays]}")
    return arrays


def replications_of(num_utts: int, replications: int, seed: int) -> Iterator[np.ndarray]:
    """The drawn utterance indices, int64 [r, U] chunks of whole replications (rows of
    ``default_rng(seed).integers(0, U, size=(R, U))``, in order).

    Raises ValueError for ``replications < 1`` or ``num_utts < 1``."""
    if replications < 1 or num_utts < 1:
        raise ValueError(f"bootstrap: need replications >= 1 and utterances >= 1, got {replications}, {num_utts}")
    rng = np.random.default_rng(seed)
    rows = max(1, CHUNK_INDICES // num_utts)
    for start in range(0, replications, rows):
        yield rng.integers(0, num_utts, size=(min(rows, replications - start), num_utts))


def replicated_sums(values: np.ndarray, replications: int, seed: int) -> np.ndarray:
    """Sums of ``values`` (int64 [V, U]: V per-utterance vectors) over the drawn
    utterances of each replication: int64 [V, R]."""
    values = np.atleast_2d(np.asarray(values, dtype=np.int64))
    parts = [values[:, idx].sum(axis=2) for idx in replications_of(values.shape[1], replications, seed)]
    return np.concatenate(parts, axis=1)


def bootstrap_wer(errors, ref_words, replications: int = REPLICATIONS, seed: int = 0) -> BootstrapWer:
    """The :class:`BootstrapWer` (percent) of ``errors`` int [U] word errors over
    ``ref_words`` int [U] (not all 0), ``replications`` R >= 1 drawn with ``seed``.

    Raises ValueError: vectors of different lengths, empty, negative counts, no
    reference word at all, or ``replications < 1``."""
    errors, ref_words = _check(errors, ref_words)
    if ref_words.sum() == 0:
        raise ValueError("bootstrap_wer: no reference words (every reference is empty): the WER is undefined")
    sums = replicated_sums(np.vstack([errors, ref_words]), replications, seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        wers = np.where(sums[1] > 0, sums[0] / np.maximum(sums[1], 1) * 100.0, np.nan)
    wers = wers[np.isfinite(wers)]  # (a replication that drew no reference word: only with empty references)
    mean, std = float(wers.mean()), float(wers.std())
    lo, hi = np.percentile(wers, [2.5, 97.5])
    return BootstrapWer(wer=float(errors.sum() / ref_words.sum() * 100.0), mean=mean, std=std, low=mean - Z95 * std,
                        high=mean + Z95 * std, percentile_low=float(lo), percentile_high=float(hi),
                        replications=replications, seed=seed, utterances=len(errors))


def improvement_probability(errors_a, errors_b, replications: int = REPLICATIONS, seed: int = 0) -> float:
    """P(B better than A) in [0, 1] (docs/evaluation.md): the share of replications with
    ``sum(e_A - e_B) > 0``; ``errors_a``, ``errors_b`` int [U] on the same utterances.

    Raises ValueError: vectors of different lengths, empty or negative, or
    ``replications < 1``."""
    errors_a, errors_b = _check(errors_a, errors_b)
    diff = errors_a - errors_b  # may be negative: not checked as a count
    return float((replicated_sums(diff, replications, seed)[0] > 0).mean())
