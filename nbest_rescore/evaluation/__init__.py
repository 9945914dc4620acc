"""Evaluation: WER (counted as Kaldi's compute-wer counts it), oracle choice, weight
tuning by grid search, its cross-validation by documents, bootstrap intervals and
improvement probabilities (as Kaldi's compute-wer-bootci), Kaldi's score_kaldi.sh sweep
over N-best lists, plots.

WER values are in percent; costs are negated natural-log values.
"""
from .bootstrap import BootstrapWer, bootstrap_wer, improvement_probability
from .edit_distance import kaldi_error_counts
from .folds import CrossValidation, cross_validate, document_folds
from .kaldi_scoring import KaldiWer, best_path_sweep, best_wer_line, kaldi_wers
from .plots import plot_wer_heatmap
from .tune_result import TunePoint, TuneResult
from .tuning import tune_grid
from .wer import WerReport, compute_wer, hyp_errors, nbest_errors, oracle_choice

__all__ = [
    "WerReport", "compute_wer", "hyp_errors", "nbest_errors", "oracle_choice",
    "TunePoint", "TuneResult", "tune_grid",
    "KaldiWer", "best_path_sweep", "best_wer_line", "kaldi_error_counts", "kaldi_wers",
    "plot_wer_heatmap", "BootstrapWer", "bootstrap_wer", "improvement_probability", "CrossValidation",
    "cross_validate", "document_folds",
]
