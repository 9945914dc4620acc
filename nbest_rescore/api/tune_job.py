"""The ``tune`` job: grid search of the interpolation weight lambda, the LM weight
(grammar scale) and the word insertion penalty by WER, on stored NN costs."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Mapping, Optional, Sequence, Tuple, Union

from ..evaluation.plots import plot_wer_heatmap
from ..evaluation.tuning import TuneResult, tune_grid
from ..evaluation.wer import check_references
from ..io.atomic import RUN_MARKER, atomic_dir, atomic_write, check_output_dir
from ..io.score_ark import read_cost_ark
from ..types import NbestSet
from .checks import check_float, check_grid, check_paths, parse_grid
from .inputs import PLAIN_PATHS, load_job_nbest, load_references

TUNE_OUTPUTS = ("tune.json", "tune_wer.png")
Grid = Union[str, Sequence[float]]


def tune(nbest: NbestSet, refs: Mapping[str, Sequence[str]], nn_cost: Optional[Mapping[str, float]] = None, *,
         interps: Sequence[float] = (0.0, 0.5, 1.0), lm_weights: Sequence[float] = (9.5,),
         word_ins_penalties: Optional[Sequence[float]] = None, acoustic_scale: float = 1.0) -> TuneResult:
    """WER (percent) at every grid point; the best point is ``result.best``.

    Args:
        nn_cost: hypothesis key -> NN cost (``ScoreResult.nn_costs()`` or a stored
            ``nn_cost`` ark); None searches ``interp = 1`` (n-gram only) alone.
        interps, lm_weights, word_ins_penalties: the grid (penalty None = the
            benchmark's first-pass value).
    Raises:
        DataError: an empty or non-finite grid, interp outside [0, 1], references
            missing or empty, NN costs missing for some hypotheses.
    """
    if nn_cost is None:
        interps = (1.0,)
    check_grid("interps", interps, 0.0, 1.0)
    check_grid("lm_weights", lm_weights)
    if word_ins_penalties is not None:
        check_grid("word_ins_penalties", word_ins_penalties)
    check_float("acoustic_scale", acoustic_scale)
    return tune_grid(nbest, refs, nn_cost, interps, lm_weights, word_ins_penalties, acoustic_scale)


def _score_run(nn_cost_path) -> dict:
    """Settings of the score run that wrote ``nn_cost_path`` (from its run marker), or {}."""
    try:
        with open(Path(nn_cost_path).parent / RUN_MARKER, encoding="utf-8") as f:
            return json.load(f).get("settings", {})
    except (OSError, ValueError):
        return {}


def plot_title(nbest_path, nn_cost_path=None) -> str:
    """``"<model> (<checkpoint>) on <lists>, history <policy>"`` for plots."""
    if nn_cost_path is None:
        return f"n-gram only on {nbest_path}"
    run = _score_run(nn_cost_path)
    model = f"{run.get('model', '?')} ({os.path.basename(str(run.get('lm', nn_cost_path)))})"
    return f"{model} on {nbest_path}, history {run.get('history', '?')}"


def write_tune_outputs(result: TuneResult, out_dir, title: Optional[str] = None) -> List[str]:
    """``tune.json`` and the WER heat map ``tune_wer.png`` (titled ``title``), written
    into ``out_dir`` as one set (see :func:`~nbest_rescore.io.atomic.atomic_dir`)."""
    with atomic_dir(out_dir, TUNE_OUTPUTS, settings={"title": title}) as tmp:
        with atomic_write(tmp / "tune.json") as f:
            json.dump({**result.to_dict(), "title": title}, f, indent=2)
        plot_wer_heatmap(result, tmp / "tune_wer.png", title=title)
    return [os.path.join(out_dir, n) for n in TUNE_OUTPUTS]


def _grid(option: str, value: Optional[Grid]) -> Optional[Tuple[float, ...]]:
    if value is None:
        return None
    return parse_grid(value, option) if isinstance(value, str) else tuple(float(v) for v in value)


@dataclass(frozen=True)
class TuneJob:
    """``nbest-rescore tune`` as a value; options checked on construction. Grids are
    ``"start:stop:step"``/``"x,y,z"`` strings or sequences of numbers."""

    nbest: str
    ref: str
    nn_cost: Optional[str] = None
    interps: Grid = "0:1:0.1"
    lm_weights: Grid = "5:14:0.5"
    word_ins_penalties: Optional[Grid] = None
    word_ins_penalty: float = -0.629606
    acoustic_scale: float = 1.0
    out: Optional[str] = None
    plain_ac: Optional[str] = None
    plain_ngram: Optional[str] = None
    plain_costs: bool = False
    plain_utt2doc: Optional[str] = None
    plain_utt_ids: Optional[str] = None

    def __post_init__(self):
        interps = _grid("interps", self.interps)
        check_grid("interps", interps, 0.0, 1.0)
        check_grid("lm_weights", _grid("lm_weights", self.lm_weights))
        wips = _grid("word_ins_penalties", self.word_ins_penalties)
        if wips is not None:
            check_grid("word_ins_penalties", wips)
        check_float("word_ins_penalty", self.word_ins_penalty)
        check_float("acoustic_scale", self.acoustic_scale)
        check_paths(self, ("nbest", "ref", "nn_cost", *PLAIN_PATHS))
        if self.out is not None:
            check_output_dir(self.out, TUNE_OUTPUTS)

    def run(self) -> TuneResult:
        """Read the lists, references and NN costs, search, and (with ``out``) write."""
        nbest = load_job_nbest(self)
        refs = load_references(self.ref)
        check_references(nbest, refs, self.ref)
        nn = read_cost_ark(self.nn_cost) if self.nn_cost else None
        wips = _grid("word_ins_penalties", self.word_ins_penalties) or (self.word_ins_penalty,)
        res = tune(nbest, refs, nn, interps=_grid("interps", self.interps), lm_weights=_grid("lm_weights", self.lm_weights),
                   word_ins_penalties=wips, acoustic_scale=self.acoustic_scale)
        if self.out is not None:
            write_tune_outputs(res, self.out, plot_title(self.nbest, self.nn_cost))
        return res
