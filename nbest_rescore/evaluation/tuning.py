"""Search of the combination weights (LM weight, the n-gram and K neural LM weights, word
insertion penalty) by the WER of the re-ranked N-best lists: an exhaustive grid
(:func:`tune_grid`) or Och's exact line search (:func:`tune_line`).

The score of every hypothesis is :func:`nbest_rescore.rescoring.combine.combine` (costs
are negated natural-log values); the per-hypothesis word errors are computed once, so a
grid point costs one vectorised ``combine`` + ``segment_argmax`` over all hypotheses.
WER is in percent.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from itertools import product
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import DataError, examples
from ..names import unique_names
from ..rescoring.combine import Weights, flat_scores, overflow_error, segment_argmax
from ..types import NbestSet
from .line_search import LinearScores, box, initial_point, och_search, split_point
from .wer import nbest_errors, utterance_ref_words

if TYPE_CHECKING:
    from .tune_report import TuneReport

#: Bound of the line search: ``0 <= delta * w_k <= LINE_LIMIT`` and ``|wip| <= LINE_LIMIT``.
LINE_LIMIT = 100.0

NnCosts = Union[None, Mapping[str, float], Sequence[Mapping[str, float]]]


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
    ``report``: per-utterance errors, cross-validation and bootstrap
    (:class:`~.tune_report.TuneReport`, added by :func:`~.tune_report.assess`), or None.
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
    report: Optional["TuneReport"] = field(default=None, compare=False, repr=False)

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
        the line search), then the :attr:`report`'s blocks (cross_validation,
        bootstrap, utterance_errors) when there is one."""
        d = {"acoustic_scale": self.acoustic_scale, "best": self.best.to_dict(),
             "points": [p.to_dict() for p in self.points], "weights": self.weights_block(),
             "search": self.search, "evaluations": self.evaluations, "hypotheses": self.hypotheses,
             "seconds": self.seconds}
        if self.seed is not None:
            d["seed"] = self.seed
        if self.report is not None:
            d.update(self.report.to_dict())
        return d


def _floats(name: str, values) -> Tuple[float, ...]:
    vals = tuple(float(v) for v in np.atleast_1d(np.asarray(values, dtype=np.float64)))
    if not vals:
        raise ValueError(f"tune_grid: {name} is empty; give at least one value")
    if not all(np.isfinite(v) for v in vals):
        raise ValueError(f"tune_grid: {name} must be finite, got {vals}")
    return vals


@dataclass(frozen=True)
class TuneData:
    """What the weight search needs of every hypothesis, and nothing of its words: H
    hypotheses of U utterances, in set order.

    Attributes:
        offsets: int64 [U + 1]; utterance u owns rows ``offsets[u]:offsets[u + 1]``.
        ac_cost, lm_cost, graph_cost: float64 [H] acoustic, n-gram and graph costs
            (negated natural logs; the names of :class:`~nbest_rescore.types.FlatNbest`,
            so :func:`~nbest_rescore.rescoring.combine.flat_scores` takes it).
        num_words: int64 [H] words per hypothesis (``</s>`` not counted).
        nn: float64 [K, H] the NN costs of the K neural LMs, or None (K = 0).
        errors: int64 [H] word errors of each hypothesis against its reference
            (edit distance).
        ref_words: reference words of all the utterances.
        names: the K LM names.
        doc_index: int64 [U] the document of each utterance, numbered 0, 1, ... in
            first-seen order over the whole set (:meth:`subset` keeps the numbers).
        utt_ref_words: int64 [U] reference words of each utterance (sum = ``ref_words``).
        utt_ids: the U utterance ids, in set order.
    """

    offsets: np.ndarray
    ac_cost: np.ndarray
    lm_cost: np.ndarray
    graph_cost: np.ndarray
    num_words: np.ndarray
    nn: Optional[np.ndarray]
    errors: np.ndarray
    ref_words: int
    names: Tuple[str, ...]
    doc_index: np.ndarray
    utt_ref_words: np.ndarray
    utt_ids: Tuple[str, ...]

    @classmethod
    def of(cls, nbest: NbestSet, refs, nn: Optional[np.ndarray], names: Tuple[str, ...],
           part: bool = False) -> "TuneData":
        """The data of the lists ``nbest`` with the NN costs ``nn`` [K, H] (or None).
        ``part``: ``nbest`` is a span of a set (its references may all be empty;
        :func:`~.wer.nbest_errors`)."""
        flat = nbest.flat()
        errors, offsets, ref_words = nbest_errors(nbest, refs, flat, part=part)
        doc_index = np.empty(len(nbest), dtype=np.int64)
        for d, utts in enumerate(nbest.documents()):
            doc_index[utts] = d
        return cls(offsets, flat.ac_cost, flat.lm_cost, flat.graph_cost, flat.num_words, nn, errors, ref_words,
                   tuple(names), doc_index, utterance_ref_words(nbest.utt_ids, refs), tuple(nbest.utt_ids))

    @classmethod
    def concat(cls, parts: Sequence["TuneData"], names: Tuple[str, ...]) -> "TuneData":
        """The parts (spans of whole documents of one set, in order) as one; the
        documents are renumbered over the whole set."""
        def cat(name):
            return np.concatenate([getattr(p, name) for p in parts])

        ends = np.cumsum([0] + [int(p.offsets[-1]) for p in parts])
        offsets = np.concatenate([[0]] + [p.offsets[1:] + e for p, e in zip(parts, ends[:-1])]).astype(np.int64)
        nn = None if parts[0].nn is None else np.concatenate([p.nn for p in parts], axis=1)
        docs = np.cumsum([0] + [int(p.doc_index.max()) + 1 if len(p.doc_index) else 0 for p in parts])
        doc_index = np.concatenate([p.doc_index + d for p, d in zip(parts, docs[:-1])]).astype(np.int64)
        return cls(offsets, cat("ac_cost"), cat("lm_cost"), cat("graph_cost"), cat("num_words"), nn, cat("errors"),
                   sum(p.ref_words for p in parts), tuple(names), doc_index, cat("utt_ref_words"),
                   tuple(u for p in parts for u in p.utt_ids))

    def subset(self, utt_mask) -> "TuneData":
        """The utterances where ``utt_mask`` (bool [U]) is True, in set order, with all
        their hypotheses; document numbers are kept. Raises ValueError for a mask of
        another length or one that keeps no utterance."""
        mask = np.asarray(utt_mask, dtype=bool)
        if mask.shape != (self.num_utts,) or not mask.any():
            raise ValueError(f"TuneData.subset: expected a bool [{self.num_utts}] mask keeping >= 1 utterance, "
                             f"got shape {mask.shape} with {int(mask.sum())} kept")
        keep = np.flatnonzero(mask)
        sizes = np.diff(self.offsets)[keep]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        rows = np.repeat(self.offsets[keep] - offsets[:-1], sizes) + np.arange(offsets[-1])
        return TuneData(offsets, self.ac_cost[rows], self.lm_cost[rows], self.graph_cost[rows],
                        self.num_words[rows], None if self.nn is None else self.nn[:, rows], self.errors[rows],
                        int(self.utt_ref_words[keep].sum()), self.names, self.doc_index[keep],
                        self.utt_ref_words[keep], tuple(self.utt_ids[u] for u in keep))

    @property
    def num_utts(self) -> int:
        """U, the number of utterances."""
        return len(self.offsets) - 1

    def nn_arg(self):
        """The NN costs as :func:`~nbest_rescore.rescoring.combine.flat_scores` takes
        them: None (K = 0), float64 [H] (K = 1) or the K rows of [K, H]."""
        k = len(self.names)
        return None if k == 0 or self.nn is None else (self.nn[0] if k == 1 else list(self.nn))

    def one_best(self, weights: Weights) -> np.ndarray:
        """int64 [U] flat indices of each utterance's best hypothesis at ``weights``
        (ties to the earliest rank)."""
        return segment_argmax(flat_scores(self, weights, self.nn_arg()), self.offsets)

    def first_pass(self) -> np.ndarray:
        """int64 [U] flat indices of the rank-1 hypotheses (the decoder's 1-best)."""
        return self.offsets[:-1].copy()

    def __len__(self) -> int:
        return len(self.errors)


def _nn_list(nn_cost: NnCosts) -> List[Mapping[str, float]]:
    if nn_cost is None:
        return []
    return [nn_cost] if isinstance(nn_cost, Mapping) else list(nn_cost)


def cost_labels(names: Sequence[str], labels: Optional[Sequence[str]]) -> List[str]:
    """How error messages name each NN cost map: ``labels``, else ``nn_cost`` for one
    LM and ``nn_cost <name>`` for several."""
    if labels is not None:
        return list(labels)
    return ["nn_cost"] if len(names) == 1 else [f"nn_cost {n}" for n in names]


def missing_keys_error(label: str, missing: Sequence[str], total: int) -> DataError:
    """The error for NN costs that lack hypotheses of the lists."""
    return DataError(f"{label} lacks {len(missing)} of {total} hypothesis keys: "
                     f"{examples(missing)}; score every hypothesis of the lists with the neural LM")


def non_finite_error(name: str, bad_keys: Sequence[str]) -> DataError:
    """The error for costs (``name``) that are NaN or infinite for ``bad_keys``."""
    return DataError(f"{name} has non-finite values for {examples(bad_keys)}")


def tune_data(nbest, refs, nn_cost: NnCosts = None, names: Optional[Sequence[str]] = None,
              labels: Optional[Sequence[str]] = None) -> TuneData:
    """What the searches need of the lists ``nbest`` (an :class:`NbestSet`; a
    :class:`TuneData` is returned as it is) with references ``refs`` and NN costs
    ``nn_cost`` (as :func:`tune_grid` takes them): flat arrays, NN costs [K, H] in key
    order, per-hypothesis errors.

    Raises:
        DataError: as :func:`tune_grid` (no utterances, references or NN costs
            missing, non-finite costs).
    """
    if isinstance(nbest, TuneData):
        return nbest
    if len(nbest) == 0:
        raise DataError("tune: the N-best set has no utterances")
    costs = _nn_list(nn_cost)
    names = unique_names(names if names is not None else ["nn"] * len(costs))
    if len(names) != len(costs):
        raise ValueError(f"tune: {len(costs)} NN cost maps but {len(names)} names")
    labels = cost_labels(names, labels)
    flat = nbest.flat()  # per-hypothesis arrays in set order, built once
    keys = flat.keys
    rows = []
    for cost, label in zip(costs, labels):
        missing = [k for k in keys if k not in cost]
        if missing:
            raise missing_keys_error(label, missing, len(keys))
        rows.append(np.array([cost[k] for k in keys], dtype=np.float64))
    for name, arr in (*zip(labels, rows), *((n, getattr(flat, n)) for n in ("ac_cost", "lm_cost", "graph_cost"))):
        if not np.all(np.isfinite(arr)):
            raise non_finite_error(name, [k for k, v in zip(keys, arr) if not np.isfinite(v)])
    return TuneData.of(nbest, refs, np.vstack(rows) if rows else None, names)


def _simplex(interps: Tuple[float, ...], k: int):
    """``(w_0, (w_1 .. w_K))`` with w_0 .. w_{K-1} from ``interps`` and
    ``w_K = 1 - sum >= 0``, in lexicographic grid order (K >= 2)."""
    for head in product(interps, repeat=k):
        rest = round(1.0 - sum(head), 10)
        if rest >= -1e-9:
            yield head[0], (*head[1:], max(rest, 0.0))


def tune_grid(nbest: NbestSet, refs: Mapping[str, Sequence[str]], nn_cost: NnCosts,
              interps: Sequence[float], lm_weights: Sequence[float],
              word_ins_penalties: Optional[Sequence[float]] = None,
              acoustic_scale: float = 1.0, *, names: Optional[Sequence[str]] = None,
              labels: Optional[Sequence[str]] = None) -> TuneResult:
    """WER of every grid point; pick the best.

    One neural LM (or none): every (interp, lm_weight, word_ins_penalty). K >= 2 LMs:
    the weights ``(w_0 .. w_{K-1})`` each from ``interps`` with ``w_K = 1 - sum >= 0``
    (the simplex at that spacing), times lm_weights, times penalties.

    Args:
        nbest: the N-best lists (H hypotheses), or their :class:`TuneData` (then
            ``refs``, ``nn_cost``, ``names`` and ``labels`` are not used).
        refs: utterance id -> reference words.
        nn_cost: hypothesis key -> neural LM cost (negated natural log, ``</s>``
            included), or K such maps, each covering every key; None only when
            every interp is 1.
        interps: n-gram weights lambda (w_0) in [0, 1]; lm_weights: delta.
        word_ins_penalties: nats per word (negative penalises words); None: the
            default penalty of :class:`~nbest_rescore.rescoring.combine.Weights` (0).
        names: the LM names (default ``nn``, ``nn_2``, ...); labels: how error
            messages name each cost map (default from the names).
    Returns:
        TuneResult; WER in percent; best = lowest WER, ties to the first in grid order
        (interp outermost, word_ins_penalty innermost).
    Raises:
        DataError: missing references / empty references, nn_cost missing hypothesis
            keys (a few listed), or non-finite costs.
        ValueError: empty or non-finite grid values, interp outside [0, 1], or
            ``nn_cost`` None while some interp < 1.
    """
    t0 = time.perf_counter()
    no_nn = nbest.nn is None if isinstance(nbest, TuneData) else nn_cost is None
    interps_t, lms_t, wips_t = _grid_values(interps, lm_weights, word_ins_penalties, acoustic_scale, no_nn)
    prep = tune_data(nbest, refs, nn_cost, names, labels)
    k = len(prep.names)
    weights = list(_simplex(interps_t, k)) if k >= 2 else [(lam, None) for lam in interps_t]
    points = [_grid_point(prep, Weights(acoustic_scale=float(acoustic_scale), lm_weight=delta, interp=lam,
                                        word_ins_penalty=wip, nn_weights=ws))
              for lam, ws in weights for delta in lms_t for wip in wips_t]
    best = min(points, key=lambda p: p.wer)  # min keeps the first of equal WERs
    return TuneResult(points=tuple(points), best=best, acoustic_scale=float(acoustic_scale),
                      names=prep.names, search="grid", evaluations=len(points),
                      hypotheses=len(points) * len(prep.errors), seconds=time.perf_counter() - t0)


def _grid_values(interps, lm_weights, word_ins_penalties, acoustic_scale: float, no_nn: bool):
    """(interps, lm_weights, word_ins_penalties) of :func:`tune_grid` as float tuples,
    the penalty defaulting to :class:`Weights`'s. Raises ValueError as it says."""
    interps_t = _floats("interps", interps)
    lms_t = _floats("lm_weights", lm_weights)
    if word_ins_penalties is None:
        word_ins_penalties = (Weights.word_ins_penalty,)
    wips_t = _floats("word_ins_penalties", word_ins_penalties)
    bad = [v for v in interps_t if not 0.0 <= v <= 1.0]
    if bad:
        raise ValueError(f"tune_grid: interps must lie in [0, 1], got {bad}")
    if no_nn and any(v != 1.0 for v in interps_t):
        raise ValueError("tune_grid: nn_cost is needed when an interp (lambda) is < 1; "
                         "give neural LM costs or use interps=[1.0]")
    return interps_t, lms_t, wips_t


def _grid_point(prep: TuneData, w: Weights) -> TunePoint:
    """The WER (percent) of the 1-best under ``w`` as a :class:`TunePoint`."""
    wer = float(prep.errors[prep.one_best(w)].sum()) / prep.ref_words * 100.0
    return TunePoint(interp=w.interp, lm_weight=w.lm_weight, word_ins_penalty=w.word_ins_penalty, wer=wer,
                     nn_weights=w.nn_weights)


def linear_scores(flat, nn: Optional[np.ndarray], errors, offsets, acoustic_scale: float) -> LinearScores:
    """The scores as ``base + F @ [a_0 .. a_K, wip]`` with ``a_k = delta * w_k``:
    base = -acoustic_scale * ac_cost, F = [-ngram - graph, -nn_k - graph, num_words]
    (equal to :func:`~nbest_rescore.rescoring.combine.combine` up to rounding).
    Raises DataError when a score inside the search's box could overflow float64."""
    graph = np.asarray(flat.graph_cost, dtype=np.float64)
    cols = [-np.asarray(flat.lm_cost, np.float64) - graph]
    cols += [-c - graph for c in (nn if nn is not None else [])]
    cols.append(np.asarray(flat.num_words, dtype=np.float64))
    with np.errstate(over="ignore", invalid="ignore"):
        base, features = -float(acoustic_scale) * np.asarray(flat.ac_cost, np.float64), np.column_stack(cols)
        reach = np.abs(base).max(initial=0) + LINE_LIMIT * np.abs(features).max(axis=0, initial=0).sum()
    if not reach < 1e300:  # (the largest score any point in the search's box can give)
        raise overflow_error(f"a score of the line search (weights up to {LINE_LIMIT:g})", flat.ac_cost, flat.lm_cost)
    return LinearScores(base=base, features=features, offsets=np.asarray(offsets), errors=np.asarray(errors))


def tune_line(nbest: NbestSet, refs: Mapping[str, Sequence[str]], nn_cost: NnCosts, *,
              lm_weight: float = Weights.lm_weight, word_ins_penalty: Optional[float] = None,
              acoustic_scale: float = Weights.acoustic_scale,
              restarts: int = 5, seed: int = 0, names: Optional[Sequence[str]] = None,
              labels: Optional[Sequence[str]] = None) -> TuneResult:
    """Exact line search (Och 2003) of ``a_k = delta * w_k`` (k = 0 .. K) and the
    penalty at a fixed acoustic scale, from ``delta = lm_weight``, equal weights
    ``w_k = 1 / (K + 1)`` and ``word_ins_penalty`` (None: the default of :class:`Weights`,
    0), plus ``restarts`` seeded random starts around it (``a_k``
    spread by ``delta / (K + 1)``, the penalty by 1 nat). Bounds: ``0 <= a_k <=
    LINE_LIMIT``, ``|wip| <= LINE_LIMIT``.

    Returns:
        TuneResult with ``search="line"``: one point per start (WER in percent, weights
        normalised: ``lm_weight = delta = sum a``, ``interp = w_0``), the best, the line
        minimisations (``evaluations``), hypotheses visited and seconds.
    ``nbest``: the lists or their :class:`TuneData`, as :func:`tune_grid`.

    Raises:
        DataError: as :func:`tune_grid`. ValueError: restarts < 0.
    """
    t0 = time.perf_counter()
    if restarts < 0:
        raise ValueError(f"tune_line: restarts must be >= 0, got {restarts}")
    prep = tune_data(nbest, refs, nn_cost, names, labels)
    k = len(prep.names)
    wip0 = Weights.word_ins_penalty if word_ins_penalty is None else float(word_ins_penalty)
    problem = linear_scores(prep, prep.nn, prep.errors, prep.offsets, acoustic_scale)
    x0 = initial_point(k, float(lm_weight), wip0)
    lower, upper = box(k, LINE_LIMIT)
    spread = np.r_[np.full(k + 1, float(lm_weight) / (k + 1)), 1.0]
    res = och_search(problem, x0, lower, upper, restarts=restarts, seed=seed, spread=spread)
    points = []
    for run in res.runs:
        delta, w, wip = split_point(run.x, k)
        points.append(TunePoint(interp=w[0], lm_weight=delta, word_ins_penalty=wip,
                                wer=run.errors / prep.ref_words * 100.0,
                                nn_weights=tuple(w[1:]) if k >= 2 else None))
    return TuneResult(points=tuple(points), best=points[res.best], acoustic_scale=float(acoustic_scale),
                      names=prep.names, search="line", evaluations=res.line_minimizations,
                      hypotheses=res.visited, seconds=time.perf_counter() - t0, seed=int(seed))
