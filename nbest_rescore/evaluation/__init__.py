"""Evaluation: WER, oracle choice, weight tuning by grid search, plots.

WER values are in percent; costs are negated natural-log values.
"""
from .plots import plot_wer_heatmap
from .tuning import FIRST_PASS_WIP, TunePoint, TuneResult, tune_grid
from .wer import WerReport, compute_wer, hyp_errors, nbest_errors, oracle_choice

__all__ = [
    "WerReport", "compute_wer", "hyp_errors", "nbest_errors", "oracle_choice",
    "TunePoint", "TuneResult", "tune_grid", "FIRST_PASS_WIP",
    "plot_wer_heatmap",
]
