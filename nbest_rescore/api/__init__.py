"""The public Python API: one function per job, and each CLI command as a frozen
job value (``ScoreJob``, ``TuneJob``, ``PerplexityJob``, ``TrainJob``, ``AnalyzeJob``,
``KaldiScoreJob``, ``ConvertJob``) whose options are checked on construction, before anything is read.
Example: docs/api.md (``examples/python_api.py``, run by the tests).
"""
from ..evaluation.perplexity import PerplexityReport
from ..evaluation.report import format_wer_table, model_row, model_table, wer_table
from ..evaluation.tuning import TunePoint, TuneResult
from ..evaluation.wer import WerReport, compute_wer, oracle_choice
from ..models import MODEL_REGISTRY
from ..rescoring.combine import Weights
from ..training.trainer import TrainResult
from ..types import NbestList, NbestSet
from .convert_job import ConvertJob, ConvertResult, convert_nbest
from .inputs import LoadedLM, load_lm, load_nbest, load_references, read_weights_file
from .kaldi_score_job import KaldiScoreJob, KaldiScorePoint, KaldiScoreResult
from .lm_jobs import AnalyzeJob, PerplexityJob, TrainJob, perplexity, train
from .score_job import ScoreJob, ScoreResult, score, write_score_outputs
from .tune_job import TuneJob, tune, write_tune_outputs

__all__ = sorted(n for n, v in globals().items() if not n.startswith("_") and not isinstance(v, type(inputs)))
