"""Grid search of the combination weights (LM weight, interpolation, word insertion penalty)
by the WER of the re-ranked N-best lists.

The score of every hypothesis is :func:`nbest_rescore.rescoring.combine.combine` (costs
are negated natural-log values); the per-hypothesis word errors are computed once, so a
grid point costs one vectorised ``combine`` + ``segment_argmax`` over all hypotheses.
WER is in percent.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import DataError, examples
from ..rescoring.combine import Weights, flat_scores, segment_argmax
from ..types import NbestSet
from .wer import nbest_errors

#: The benchmark's first-pass word insertion penalty at acoustic scale 1 (nats per word).
FIRST_PASS_WIP = -0.629606


@dataclass(frozen=True)
class TunePoint:
    """One grid point: weights and the resulting WER (percent)."""

    interp: float
    lm_weight: float
    word_ins_penalty: float
    wer: float

    def to_dict(self) -> Dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class TuneResult:
    """All grid points in grid order (interp, then lm_weight, then word_ins_penalty),
    the best point (lowest WER, ties to the first in grid order) and the fixed
    acoustic scale."""

    points: Tuple[TunePoint, ...]
    best: TunePoint
    acoustic_scale: float

    def best_weights(self) -> Weights:
        """The best point as :class:`Weights`."""
        return Weights(acoustic_scale=self.acoustic_scale, lm_weight=self.best.lm_weight,
                       interp=self.best.interp, word_ins_penalty=self.best.word_ins_penalty)

    def table(self) -> str:
        """Printable text table of all points in grid order; the best row is marked ``*``."""
        lines = [f"acoustic scale {self.acoustic_scale:g}",
                 f"{'interp':>8} {'lm_weight':>10} {'wip':>10} {'WER%':>8}"]
        marked = False
        for p in self.points:
            mark = ""
            if not marked and p == self.best:
                mark, marked = "  *", True
            lines.append(f"{p.interp:>8.4g} {p.lm_weight:>10.4g} {p.word_ins_penalty:>10.6g} "
                         f"{p.wer:>8.2f}{mark}")
        b = self.best
        lines.append(f"best: interp {b.interp:g}, lm_weight {b.lm_weight:g}, "
                     f"wip {b.word_ins_penalty:g}, WER {b.wer:.2f}%")
        return "\n".join(lines)

    def to_dict(self) -> Dict[str, object]:
        """JSON-serialisable form: acoustic_scale, best and points (list of dicts)."""
        return {"acoustic_scale": self.acoustic_scale, "best": self.best.to_dict(),
                "points": [p.to_dict() for p in self.points]}


def _floats(name: str, values) -> Tuple[float, ...]:
    vals = tuple(float(v) for v in np.atleast_1d(np.asarray(values, dtype=np.float64)))
    if not vals:
        raise ValueError(f"tune_grid: {name} is empty; give at least one value")
    if not all(np.isfinite(v) for v in vals):
        raise ValueError(f"tune_grid: {name} must be finite, got {vals}")
    return vals


def tune_grid(nbest: NbestSet, refs: Mapping[str, Sequence[str]],
              nn_cost: Optional[Mapping[str, float]],
              interps: Sequence[float], lm_weights: Sequence[float],
              word_ins_penalties: Optional[Sequence[float]] = None,
              acoustic_scale: float = 1.0) -> TuneResult:
    """WER of every (interp, lm_weight, word_ins_penalty) combination; pick the best.

    Args:
        nbest: the N-best lists (H hypotheses in all).
        refs: utterance id -> reference words.
        nn_cost: hypothesis key -> neural LM cost (negated natural log, ``</s>``
            included); must cover every hypothesis key. May be None only when every
            interp is 1 (n-gram only).
        interps: interpolation weights lambda of the n-gram, each in [0, 1].
        lm_weights: LM weights (grammar scale) delta.
        word_ins_penalties: per-word penalties (nats; negative penalises words). None
            means the benchmark's first-pass value scaled to ``acoustic_scale``:
            ``(-0.629606 * acoustic_scale,)``.
        acoustic_scale: fixed acoustic scale.
    Returns:
        TuneResult; WER in percent; best = lowest WER, ties to the first in grid order
        (interp outermost, word_ins_penalty innermost).
    Raises:
        DataError: missing references / empty references, nn_cost missing hypothesis
            keys (a few listed), or non-finite costs.
        ValueError: empty or non-finite grid values, interp outside [0, 1], or
            ``nn_cost`` None while some interp < 1.
    """
    interps_t = _floats("interps", interps)
    lms_t = _floats("lm_weights", lm_weights)
    if word_ins_penalties is None:
        word_ins_penalties = (FIRST_PASS_WIP * float(acoustic_scale),)
    wips_t = _floats("word_ins_penalties", word_ins_penalties)
    bad = [v for v in interps_t if not 0.0 <= v <= 1.0]
    if bad:
        raise ValueError(f"tune_grid: interps must lie in [0, 1], got {bad}")
    if nn_cost is None and any(v != 1.0 for v in interps_t):
        raise ValueError("tune_grid: nn_cost is needed when an interp (lambda) is < 1; "
                         "give neural LM costs or use interps=[1.0]")
    if len(nbest) == 0:
        raise DataError("tune_grid: the N-best set has no utterances")

    flat = nbest.flat()  # per-hypothesis arrays in set order, built once
    keys = flat.keys
    nn = None
    if nn_cost is not None:
        missing = [k for k in keys if k not in nn_cost]
        if missing:
            raise DataError(
                f"nn_cost lacks {len(missing)} of {len(keys)} hypothesis keys: "
                f"{examples(missing)}; score every hypothesis of the lists with the neural LM")
        nn = np.array([nn_cost[k] for k in keys], dtype=np.float64)
    for name, arr in (("nn_cost", nn), ("ac_cost", flat.ac_cost), ("lm_cost", flat.lm_cost),
                      ("graph_cost", flat.graph_cost)):
        if arr is not None and not np.all(np.isfinite(arr)):
            bad_keys = [k for k, v in zip(keys, arr) if not np.isfinite(v)]
            raise DataError(f"{name} has non-finite values for {examples(bad_keys)}")

    errors, offsets, ref_words = nbest_errors(nbest, refs, flat)

    points = []
    for lam in interps_t:
        for delta in lms_t:
            for wip in wips_t:
                w = Weights(acoustic_scale=float(acoustic_scale), lm_weight=delta,
                            interp=lam, word_ins_penalty=wip)
                scores = flat_scores(flat, w, nn)
                chosen = segment_argmax(scores, offsets)
                wer = float(errors[chosen].sum()) / ref_words * 100.0
                points.append(TunePoint(interp=lam, lm_weight=delta, word_ins_penalty=wip,
                                        wer=wer))
    best = min(points, key=lambda p: p.wer)  # min keeps the first of equal WERs
    return TuneResult(points=tuple(points), best=best, acoustic_scale=float(acoustic_scale))
