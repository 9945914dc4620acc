"""Writing the outputs of ``score``: ``text``, the NN cost arks and ``wer.json``."""
from __future__ import annotations

import json
import os
from typing import Callable, Iterable, List, Sequence

import numpy as np

from ..io.atomic import atomic_dir, atomic_write
from ..io.score_outputs import ScoreFilesWriter
from .score_result import SCORE_OUTPUTS, ScoreResult, cost_files


def write_score_outputs(result: ScoreResult, out_dir) -> List[str]:
    """Write ``text`` (new 1-best, Kaldi text), the NN costs (Kaldi text arks, reusable
    by :func:`~nbest_rescore.api.tune`: ``nn_cost`` for one LM, ``nn_cost.<name>`` per
    LM for several) and, with references, ``wer.json`` into ``out_dir`` as one set
    (:func:`~nbest_rescore.io.atomic.atomic_dir`: an older run's folder there is
    replaced as a whole; its run marker records the names, checkpoints, histories and
    weights).

    Returns:
        the paths written. Raises DataError when ``out_dir`` cannot be used.
    """
    files = cost_files(result.names)
    by_lm = [result.nn_costs_by_lm[n] for n in result.names] if len(files) > 1 else [result.nn_cost]
    return write_score_set(out_dir, result, files, result.one_best.items(), result.keys, by_lm)


def write_score_set(out_dir, result, files: Sequence[str], one_best: Iterable, keys: Sequence[str],
                    costs: Sequence[np.ndarray]) -> List[str]:
    """The one writer of a score output set (``score`` whole, and ``merge``): ``text``
    (``one_best``: (utterance id, words) pairs), the cost files ``files`` (float64 [H]
    ``costs`` per file over the hypothesis ``keys`` [H]) and, when ``result.wer`` is
    set, ``wer.json`` (``result.summary()``, also the run marker's settings) into
    ``out_dir`` as one set (:func:`~nbest_rescore.io.atomic.atomic_dir`).

    Returns:
        the paths written. Raises DataError when ``out_dir`` cannot be used.
    """
    with atomic_dir(out_dir, SCORE_OUTPUTS + tuple(files), settings=result.summary()) as tmp:
        with ScoreFilesWriter(tmp, files) as writer:
            writer.write(one_best, keys, costs)
        return [os.path.join(out_dir, n) for n in finish(tmp, result, files)]


def finish(tmp, result, files) -> List[str]:
    """Write ``wer.json`` (``result.summary()``, when ``result.wer`` is set: a
    :class:`ScoreResult` or a merge's result) beside the other outputs; their names."""
    names = ["text", *files]
    if result.wer is not None:
        with atomic_write(tmp / "wer.json") as f:
            json.dump(result.summary(), f, indent=2)
        names.append("wer.json")
    return names


def stream_score_outputs(out_dir, files: Sequence[str], run, spans: Iterable, result: Callable[[], ScoreResult]
                         ) -> ScoreResult:
    """Score ``spans`` one at a time with ``run`` (a :class:`~.score_spans._SpanRun`),
    writing each span's 1-best and NN costs (``files``: :func:`cost_files`) as it comes
    into the hidden folder that becomes ``out_dir`` at the end
    (:func:`~nbest_rescore.io.atomic.atomic_dir`), then ``wer.json`` and the run marker
    from ``result()``.

    Returns:
        ``result()``. Raises DataError when ``out_dir`` cannot be used, or from scoring.
    """
    marker: dict = {}  # the run marker's settings, filled in before the folder is committed
    with atomic_dir(out_dir, SCORE_OUTPUTS + tuple(files), settings=marker) as tmp:
        with ScoreFilesWriter(tmp, files) as writer:
            for span in spans:
                part = run.span(span)
                writer.write(part.one_best.items(), part.keys, part.costs_by_lm if len(files) > 1 else (part.nn_cost,))
        res = result()
        finish(tmp, res, files)
        marker.update(res.summary())
    return res
