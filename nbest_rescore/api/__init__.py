"""The public Python API: one function per job, and each CLI command as a frozen
job value (``ScoreJob``, ``TuneJob``, ``PerplexityJob``, ``TrainJob``, ``AnalyzeJob``,
``KaldiScoreJob``, ``ConvertJob``, ``CurvesJob``, ``FinetuneJob``) whose options are checked on construction, before anything is read.
Example: docs/api.md (``examples/python_api.py``, run by the tests).

The names are imported from their modules when first used (PEP 562), so that a command
that only reads and writes lists (``split``, ``merge``, ``convert``, ``kaldi-score``)
does not import torch, which takes seconds: ``nbest_rescore.api.score`` is
``nbest_rescore.api.score_job.score``.
"""
from importlib import import_module

#: Module (relative to this package) -> the names it gives the API.
_EXPORTS = {
    "..evaluation.perplexity": ("PerplexityReport",),
    "..evaluation.report": ("format_wer_table", "model_row", "model_table", "wer_table"),
    "..evaluation.tune_result": ("TunePoint", "TuneResult"),
    "..evaluation.wer": ("WerReport", "compute_wer", "oracle_choice"),
    "..models": ("MODEL_REGISTRY",),
    "..rescoring.combine": ("Weights",),
    "..training.trainer": ("TrainResult",),
    "..types": ("NbestList", "NbestSet"),
    ".convert_job": ("ConvertJob", "ConvertResult", "convert_nbest"),
    ".curves_job": ("CurvesJob", "read_curve"),
    ".finetune_job": ("FinetuneJob",),
    ".inputs": ("load_nbest", "load_references", "read_weights_file"),
    ".kaldi_score_job": ("KaldiScoreJob", "KaldiScorePoint", "KaldiScoreResult"),
    ".lm_jobs": ("AnalyzeJob", "PerplexityJob", "PrepareTextJob", "TrainJob", "perplexity", "train"),
    ".lm_loading": ("LoadedLM", "load_lm"),
    ".score_job": ("ScoreJob", "ScoreResult", "score", "write_score_outputs"),
    ".tune_job": ("TuneJob", "tune", "write_tune_outputs"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name):
    """The exported ``name``, its module imported on first use; AttributeError for a
    name this package does not export."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    """The module's names and every exported name (imported or not yet)."""
    return sorted(set(globals()) | set(__all__))
