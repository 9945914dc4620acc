"""nbest-rescore: rescore Kaldi-style N-best lists with corpus-level neural LMs.

Conventions used throughout the package:

* natural logarithms everywhere unless a name says otherwise (``log10``);
* a *cost* is a negated natural-log score (Kaldi convention, larger = worse);
* a *score* is a natural-log (log-likelihood) value (larger = better);
* tensors are batch-first: ``[B, T]`` token ids, ``[B, T, V]`` outputs.
"""

__version__ = "0.1.0"

# The public API (nbest_rescore.api) is re-exported lazily, so that ``nbest-rescore
# --help`` does not import torch: ``nbest_rescore.score`` is ``nbest_rescore.api.score``.
_API = ("AnalyzeJob", "ConvertJob", "ConvertResult", "KaldiScoreJob", "KaldiScoreResult", "LoadedLM", "NbestList", "NbestSet", "PerplexityJob",
        "PerplexityReport", "ScoreJob", "ScoreResult", "TrainJob", "TrainResult", "TuneJob", "TuneResult", "Weights",
        "WerReport", "compute_wer", "convert_nbest", "load_lm", "load_nbest", "load_references", "perplexity", "read_weights_file",
        "score", "train", "tune", "write_score_outputs", "write_tune_outputs")
__all__ = ["__version__", *_API]


def __getattr__(name):
    if name in _API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'nbest_rescore' has no attribute {name!r}")
