"""The ``tune`` job: search of the n-gram and neural LM weights, the LM weight (grammar
scale) and the word insertion penalty by WER, on stored NN costs of K >= 0 neural LMs:
an exhaustive grid or Och's exact line search."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import DataError
from ..evaluation.plots import plot_wer_heatmap
from ..evaluation.folds import document_folds
from ..evaluation.history_orders import OrderCosts
from ..evaluation.tune_data import NnCosts, TuneData, missing_keys_error, tune_data
from ..evaluation.tune_report import AssessedTune, assess
from ..evaluation.tune_result import TuneResult
from ..evaluation.tuning import tune_grid, tune_line
from ..evaluation.wer import check_references
from ..io.atomic import atomic_dir, atomic_write
from ..io.output_checks import check_output_dir, check_outside_inputs
from ..io.cost_column import CostColumn
from ..io.spans import NbestSource
from ..names import unique_names
from ..types import NbestSet
from ..options import SPAN_HYPS, SearchOptions, TuneOptions
from ..validation import check_option, check_paths
from .inputs import job_inputs, load_references, open_job_nbest, run_settings

TUNE_OUTPUTS = ("tune.json", "tune_wer.png")


def default_search(k: int) -> str:
    """``grid`` for up to two neural LMs, ``line`` for three or more."""
    return "grid" if k <= 2 else "line"


def tune(nbest: Union[NbestSet, TuneData], refs: Mapping[str, Sequence[str]], nn_cost: NnCosts = None, *,
         interps: Sequence[float] = (0.0, 0.5, 1.0), lm_weights: Sequence[float] = (9.5,),
         names: Optional[Sequence[str]] = None, labels: Optional[Sequence[str]] = None,
         total_scores: Optional[bool] = None, order_costs: Optional[OrderCosts] = None, **options) -> AssessedTune:
    """Search the weights by WER (percent), the keyword form of :func:`search_weights`:
    the best point is ``result.best``, and ``result.report``
    (:class:`~nbest_rescore.evaluation.tune_report.TuneReport`) holds the per-utterance
    errors, the cross-validation and the bootstrap.

    Options (``interps``, ``lm_weights`` and ``**options``): the fields of
    :class:`~nbest_rescore.options.SearchOptions`, grids as sequences of numbers or text
    (``word_ins_penalties`` None: ``word_ins_penalty`` alone); with K >= 2 LMs the
    weights run over the simplex at the ``interps`` spacing.

    Args:
        nbest: the lists, or their :class:`~nbest_rescore.evaluation.tune_data.TuneData`
            (:func:`read_tune_data`; then ``refs``, ``nn_cost``, ``names`` and
            ``labels`` are not used).
        nn_cost: hypothesis key -> NN cost (``ScoreResult.nn_costs()`` or a stored
            ``nn_cost`` ark), or a sequence of K such maps (one per neural LM); None
            searches ``interp = 1`` (n-gram only) alone.
        names: the LM names (for tune.json's weights block); default ``nn``, ``nn_2`` ...
        total_scores: one total score per hypothesis, no n-gram term (None: the set's
            flag): the grid of one LM fixes ``interp`` at 0 (docs/scoring.md).
        order_costs: history merging (``--order-cost``, with ``order_budget``): the one
            LM's costs at several ``score --max-ngram-order`` values, aligned with
            ``nbest`` (a TuneData; :func:`~nbest_rescore.evaluation.history_orders.tune_order`).
    Raises:
        DataError: an option out of its declared range (an empty or non-finite grid,
            interp outside [0, 1], an unknown search ...), more folds than documents,
            references missing or empty, NN costs missing for some hypotheses, a
            ``skip_budget`` without NN costs or folds, an ``order_budget`` without
            ``order_costs`` of one LM or folds (:func:`check_search`).
    """
    options = SearchOptions(interps=interps, lm_weights=lm_weights, **options)
    if isinstance(nbest, TuneData):  # k: the number of neural LMs with NN costs
        k = 0 if nbest.nn is None else len(nbest.names)
    else:
        k = 0 if nn_cost is None else 1 if isinstance(nn_cost, Mapping) else len(nn_cost)
    check_search(options, k, () if order_costs is None else order_costs.orders)
    data = tune_data(nbest, refs, nn_cost, names, labels)
    total = getattr(nbest, "total_scores", False) if total_scores is None else total_scores
    return search_weights(data, options, total, order_costs)


def search_weights(data: TuneData, options: SearchOptions, total_scores: bool = False,
                   order_costs: Optional[OrderCosts] = None) -> AssessedTune:
    """The search of ``options`` (``grid`` or ``line``, default :func:`default_search`)
    over ``data``, assessed (:func:`~nbest_rescore.evaluation.tune_report.assess`).
    Checks nothing: ``options`` are checked on construction, against the data by
    :func:`check_search`. ``total_scores``: lists of one total score per hypothesis."""
    k = len(data.names)
    if (options.search or default_search(k)) == "line":
        run = partial(tune_line, options=options)
    else:  # interp 1 without NN costs (the first pass alone); 0 for one LM on lists of total scores (no n-gram
        # cost: lambda would only rescale the NN weight, which the LM weight grid already does)
        interps = (1.0,) if data.nn is None else (0.0,) if total_scores and k == 1 else options.interps
        run = partial(tune_grid, options=options, interps=interps)
    return assess(run(data), data, run, options, order_costs)


def check_search(options: SearchOptions, k: int, orders: Sequence[int]) -> None:
    """The options that need something of the data: ``--order-budget`` and
    ``--order-cost`` come together, with the NN costs of one LM (``k`` LMs) and folds;
    ``--skip-budget`` needs NN costs and folds; the seed is an integer >= 0 where it
    is used (a line search, a bootstrap). Raises DataError."""
    budget, folds = options.order_budget, options.folds
    if options.replications or (options.search or default_search(k)) == "line":
        check_option("seed", options.seed, "int", ">= 0")
    if budget is None and orders:
        raise DataError("--order-cost is read for --order-budget B (the WER budget of the history-merging order): "
                        "add e.g. --order-budget 0.05 --folds 2")
    if budget is not None and (not orders or k != 1 or folds < 2):
        need = ("--order-cost K=PATH (the costs of 'score --max-ngram-order K')" if not orders else
                "exactly one --nn-cost (the exact costs of the LM scored with --max-ngram-order)" if k != 1 else
                "--folds K >= 2")
        raise DataError(f"--order-budget {budget:g} needs {need}: the order is chosen on the other folds of "
                        f"each fold; e.g. --nn-cost exact/nn_cost --order-cost 4=k4/nn_cost --folds 2")
    if options.skip_budget is not None and (k == 0 or folds < 2):
        need = "--nn-cost (the costs of 'score' without --skip-confident)" if k == 0 else "--folds K >= 2"
        raise DataError(f"--skip-budget {options.skip_budget:g} needs {need}: the threshold is chosen on the other "
                        f"folds of each fold; e.g. --folds 2")


def parse_order_costs(items: Sequence[str]) -> Tuple[Tuple[int, str], ...]:
    """``--order-cost K=PATH`` items as ((K, PATH), ...) sorted by K. Raises DataError
    for an item that is not ``K=PATH`` with an integer K >= 2, or a K given twice."""
    out = {}
    for item in items:
        order, sep, path = str(item).partition("=")
        if not sep or not path or not order.strip().isdigit() or int(order) < 2:
            raise DataError(f"--order-cost {item}: expected K=PATH, K the integer >= 2 of 'score --max-ngram-order K' "
                            f"and PATH its nn_cost file, e.g. --order-cost 4=exp/score_k4/nn_cost")
        if int(order) in out:
            raise DataError(f"--order-cost: the order {int(order)} is given twice ({out[int(order)]} and {path}); "
                            f"give one cost file per order")
        out[int(order)] = path
    return tuple(sorted(out.items()))


def read_tune_data(source: NbestSource, refs: Mapping[str, Sequence[str]], cost_paths: Sequence[str],
                   names: Sequence[str], labels: Sequence[str], span_hyps: Optional[int] = SPAN_HYPS) -> TuneData:
    """What the weight search needs of the lists of ``source``, read one span of whole
    documents at a time (:mod:`nbest_rescore.io.spans`): each hypothesis reduced at
    once to its costs, word count and word errors against the reference
    (:class:`~nbest_rescore.evaluation.tune_data.TuneData`), its words dropped. The NN
    cost files (``cost_paths``, one per LM) are read alongside, in lock-step while they
    list the hypotheses in the lists' order (as ``score`` writes them), else whole and
    looked up by key (:class:`~nbest_rescore.io.cost_column.CostColumn`).

    Args:
        source: the lists (:func:`~nbest_rescore.api.inputs.open_nbest`).
        refs: utterance id -> reference words (checked by the caller).
        cost_paths, names, labels: the NN cost files, their LM names and how errors
            name them (e.g. ``--nn-cost PATH``).
        span_hyps: hypotheses per span (:func:`~nbest_rescore.io.spans.plan_spans`).
    Raises:
        DataError: a malformed cost file or a repeated key (file and line), or costs
            missing for some hypotheses (the file, the count and examples). Costs read
            from files are finite (the readers refuse NaN and infinity).
    """
    names = tuple(names)
    if not len(source.index):
        raise DataError("tune: the N-best set has no utterances")
    columns = [CostColumn(p) for p in cost_paths]
    missing: List[List[str]] = [[] for _ in columns]
    parts, total = [], 0
    for span in source.spans(span_hyps):
        keys = [k for u in span.utterances for k in u.keys]
        rows = None  # float64 [K, h] the values of keys in each cost file
        if columns:
            rows = np.array([[column.take(key) for key in keys] for column in columns], dtype=np.float64)
            for i, j in zip(*np.nonzero(np.isnan(rows))):  # None became NaN (costs read from files are finite)
                missing[i].append(keys[j])
        parts.append(TuneData.of(span, refs, rows, names, part=True))
        total += len(keys)
    for column in columns:
        column.extra()  # keys after the lists' keys are fine, a repeated key is not
    for label, keys in zip(labels, missing):
        if keys:
            raise missing_keys_error(label, keys, total)
    return TuneData.concat(parts, names)


def cost_file_names(paths: Sequence[str]) -> Tuple[str, ...]:
    """The LM name of each cost file: the part after ``nn_cost.`` in its file name, else
    ``nn``; repeated names get ``_2``, ``_3``, ..."""
    bases = [os.path.basename(str(p)) for p in paths]
    return unique_names([b[len("nn_cost."):] if b.startswith("nn_cost.") and len(b) > 8 else "nn" for b in bases])


def plot_title(nbest_path, nn_cost_path=None) -> str:
    """``"<model> (<checkpoint>) on <lists>, history <policy>"`` for plots (several
    cost files: ``"<K> neural LMs on <lists>"``)."""
    if nn_cost_path is None:
        return f"n-gram only on {nbest_path}"
    if not isinstance(nn_cost_path, (str, os.PathLike)):
        if len(nn_cost_path) != 1:
            return f"{len(nn_cost_path)} neural LMs on {nbest_path}"
        nn_cost_path = nn_cost_path[0]
    run = run_settings(Path(nn_cost_path).parent)  # of the score run that wrote it
    model = f"{run.get('model', '?')} ({os.path.basename(str(run.get('lm', nn_cost_path)))})"
    return f"{model} on {nbest_path}, history {run.get('history', '?')}"


def write_tune_outputs(result: TuneResult, out_dir, title: Optional[str] = None) -> List[str]:
    """``tune.json`` and, for one LM (or none) searched on a grid (not ``result.multi``;
    a lambda x delta map does not fit several LMs or a line search), the WER heat map
    ``tune_wer.png`` (titled ``title``), written into ``out_dir`` as one set (see
    :func:`~nbest_rescore.io.atomic.atomic_dir`). Returns the paths written."""
    names = TUNE_OUTPUTS[:1] if result.multi else TUNE_OUTPUTS
    with atomic_dir(out_dir, TUNE_OUTPUTS, settings={"title": title}) as tmp:
        with atomic_write(tmp / "tune.json") as f:
            json.dump({**result.to_dict(), "title": title}, f, indent=2)
        if not result.multi:
            plot_wer_heatmap(result, tmp / "tune_wer.png", title=title)
    return [os.path.join(out_dir, n) for n in names]


@dataclass(frozen=True, kw_only=True)
class TuneJob(TuneOptions):
    """``nbest-rescore tune`` as a value; options checked on construction (DataError).
    Fields: :class:`~nbest_rescore.options.TuneOptions`; grids may also be sequences of
    numbers, ``nn_cost`` one path or a sequence of paths (one per neural LM; names from
    :func:`cost_file_names`)."""

    @property
    def order_paths(self) -> Tuple[Tuple[int, str], ...]:
        """The ``--order-cost`` files by order, ascending (:func:`parse_order_costs`)."""
        return parse_order_costs(self.order_cost)

    @property
    def cost_paths(self) -> Tuple[str, ...]:
        """The NN cost files, in order."""
        return (self.nn_cost,) if isinstance(self.nn_cost, (str, os.PathLike)) else tuple(self.nn_cost or ())

    def __post_init__(self):
        super().__post_init__()
        check_paths(self)
        orders = self.order_paths
        for order, path in orders:
            if not os.path.exists(path):
                raise DataError(f"--order-cost {order}={path}: no such file or folder")
        check_search(self, len(self.cost_paths), [k for k, _ in orders])
        if self.out is not None:
            check_outside_inputs(self.out, job_inputs(self) + [("--order-cost", p) for _, p in orders])
            check_output_dir(self.out, TUNE_OUTPUTS)

    def run(self) -> AssessedTune:
        """Read the lists, references and NN costs (:func:`read_tune_data`: each
        hypothesis reduced to what the search needs as it is read), search, and
        (with ``out``) write."""
        source = open_job_nbest(self)
        refs = load_references(self.ref)
        check_references(source.index, refs, self.ref)
        if self.folds >= 2:  # too many folds: said before the costs are read
            document_folds(len(source.index.doc_bounds()) - 1, self.folds, self.fold_seed)
        paths, orders = self.cost_paths, self.order_paths
        data = read_tune_data(source, refs, paths + tuple(p for _, p in orders),
                              cost_file_names(paths) + tuple(f"order_{k}" for k, _ in orders),
                              [f"--nn-cost {p}" for p in paths] + [f"--order-cost {k}={p}" for k, p in orders])
        order_costs = None
        if orders:
            order_costs = OrderCosts(tuple(k for k, _ in orders), data.nn[len(paths):])
            data = replace(data, nn=data.nn[:len(paths)], names=data.names[:len(paths)])
        res = search_weights(data, self, source.index.total_scores, order_costs)
        if self.out is not None:
            write_tune_outputs(res, self.out, plot_title(self.nbest, self.cost_paths or None))
        return res
