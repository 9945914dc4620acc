"""What a weight search returns (:mod:`.tuning`): the searched points with their WER
(percent), the best, and the tables and tune.json blocks made of them."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, Optional, Tuple

from ..rescoring.combine import Weights


@dataclass(frozen=True)
class TunePoint:
    """One searched point: weights and the resulting WER (percent). ``interp`` is the
    n-gram weight w_0; ``nn_weights`` (w_1 .. w_K) is None for one neural LM (weight
    ``1 - interp``) or none."""

    interp: float
    lm_weight: float
    word_ins_penalty: float
    wer: float
    nn_weights: Optional[Tuple[float, ...]] = None

    def to_dict(self) -> Dict[str, object]:
        d = asdict(self)
        nn = d.pop("nn_weights")  # (the last field: the keys keep their order)
        return d if nn is None else {**d, "nn_weights": list(nn)}


@dataclass(frozen=True)
class TuneResult:
    """The searched points and the best (lowest WER, ties to the first).

    Grid: every point in grid order (interp, then the other NN weights, then lm_weight,
    then word_ins_penalty). Line search: the final point of every start (the start
    point, then the restarts). ``names``: the neural LMs (K of them; () for the n-gram
    alone); ``evaluations``: grid points or line minimisations; ``hypotheses``:
    hypotheses scored or visited by the envelope sweeps; ``seconds``: search time.
    (:func:`~.tune_report.assess` adds the report: :class:`~.tune_report.AssessedTune`.)
    """

    points: Tuple[TunePoint, ...]
    best: TunePoint
    acoustic_scale: float
    names: Tuple[str, ...] = ("nn",)
    search: str = "grid"
    evaluations: int = 0
    hypotheses: int = 0
    seconds: float = 0.0
    seed: Optional[int] = None

    @property
    def multi(self) -> bool:
        """Several neural LMs or a line search: the extended table and no heat map."""
        return len(self.names) > 1 or self.search != "grid"

    def best_weights(self) -> Weights:
        """The best point as :class:`Weights` (``nn_weights`` set for K >= 2 LMs)."""
        b = self.best
        return Weights(acoustic_scale=self.acoustic_scale, lm_weight=b.lm_weight, interp=b.interp,
                       word_ins_penalty=b.word_ins_penalty, nn_weights=b.nn_weights)

    def lm_weights_of(self, p: TunePoint) -> Tuple[float, ...]:
        """``(w_1 .. w_K)`` of a point (``(1 - interp,)`` for one LM, () for none)."""
        if p.nn_weights is not None:
            return p.nn_weights
        return (round(1.0 - p.interp, 12),) if self.names else ()

    def describe(self, p: TunePoint) -> str:
        """``"ngram 0.3, a 0.2, b 0.5, lm_weight 10.1, wip -0.63"`` for a point."""
        ws = ", ".join(f"{n} {w:.4g}" for n, w in zip(self.names, self.lm_weights_of(p)))
        return (f"ngram {p.interp:.4g}{', ' + ws if ws else ''}, lm_weight {p.lm_weight:.4g}, "
                f"wip {p.word_ins_penalty:.6g}")

    def table(self) -> str:
        """Printable text table of all points; the best row is marked ``*``."""
        if self.multi:
            return self._multi_table()
        lines = [f"acoustic scale {self.acoustic_scale:g}", f"{'interp':>8} {'lm_weight':>10} {'wip':>10} {'WER%':>8}"]
        for p, mark in self._marked():
            lines.append(f"{p.interp:>8.4g} {p.lm_weight:>10.4g} {p.word_ins_penalty:>10.6g} {p.wer:>8.2f}{mark}")
        b = self.best
        lines.append(f"best: interp {b.interp:g}, lm_weight {b.lm_weight:g}, "
                     f"wip {b.word_ins_penalty:g}, WER {b.wer:.2f}%")
        return "\n".join(lines)

    def _marked(self):
        """``(point, mark)`` per point: ``"  *"`` for the first equal to the best, else ``""``."""
        first = next((i for i, p in enumerate(self.points) if p == self.best), None)
        return [(p, "  *" if i == first else "") for i, p in enumerate(self.points)]

    def _multi_table(self) -> str:
        what = "start" if self.search == "line" else "point"
        seed = f", seed {self.seed}" if self.seed is not None else ""
        lines = [f"acoustic scale {self.acoustic_scale:g}; search {self.search}{seed}: {self.evaluations} "
                 f"{'line minimisations' if self.search == 'line' else 'points'}, {self.hypotheses} hypotheses "
                 f"visited, {self.seconds:.2f} s",
                 " ".join([f"{what:>6}", f"{'ngram':>8}", *[f"{n:>8}" for n in self.names],
                           f"{'lm_weight':>10}", f"{'wip':>10}", f"{'WER%':>8}"])]
        for i, (p, mark) in enumerate(self._marked()):
            ws = [f"{w:>8.4g}" for w in self.lm_weights_of(p)]
            lines.append(" ".join([f"{i:>6}", f"{p.interp:>8.4g}", *ws, f"{p.lm_weight:>10.4g}",
                                   f"{p.word_ins_penalty:>10.6g}", f"{p.wer:>8.2f}{mark}"]))
        lines.append(f"best: {self.describe(self.best)}, WER {self.best.wer:.2f}%")
        return "\n".join(lines)

    def weights_block(self) -> Dict[str, object]:
        """The ``"weights"`` block of ``tune.json`` (what ``score --weights`` reads)."""
        b = self.best
        return {"acoustic_scale": self.acoustic_scale, "lm_weight": b.lm_weight,
                "word_ins_penalty": b.word_ins_penalty, "ngram": b.interp,
                "nn": dict(zip(self.names, self.lm_weights_of(b)))}

    def to_dict(self) -> Dict[str, object]:
        """JSON-serialisable form: acoustic_scale, best, points (list of dicts), weights
        (:meth:`weights_block`), search, evaluations, hypotheses, seconds (and seed for
        the line search)."""
        d = {"acoustic_scale": self.acoustic_scale, "best": self.best.to_dict(),
             "points": [p.to_dict() for p in self.points], "weights": self.weights_block(),
             "search": self.search, "evaluations": self.evaluations, "hypotheses": self.hypotheses,
             "seconds": self.seconds}
        if self.seed is not None:
            d["seed"] = self.seed
        return d
