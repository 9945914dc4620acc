"""The public Python API: one function per job, and each CLI command as a frozen
job value (``ScoreJob``, ``TuneJob``, ``PerplexityJob``, ``TrainJob``, ``AnalyzeJob``,
``KaldiScoreJob``)
whose options are checked on construction, before anything is read.

Example (a notebook; costs are negated natural logs, WER in percent)::

    import nbest_rescore as nr

    nbest = nr.load_nbest("../shared/data/abc-nbest/ci")          # Kaldi N-best dir
    refs = nr.load_references("../shared/data/abc-nbest/ci/ref.txt")
    lm = nr.load_lm("exp/gru.pt", device="cpu")
    res = nr.score(nbest, lm, refs=refs, lm_weight=10, interp=0.8, history="first-pass")
    print(res.wer["rescored"], res.one_best[nbest.utt_ids[0]])
    best = nr.tune(nbest, refs, res.nn_costs(), interps=[0.6, 0.8, 1.0], lm_weights=[9, 10, 11]).best
    nr.write_score_outputs(res, "exp/ci_gru")                      # text, nn_cost, wer.json
"""
from ..evaluation.perplexity import PerplexityReport
from ..evaluation.report import format_wer_table, model_row, model_table, wer_table
from ..evaluation.tuning import TunePoint, TuneResult
from ..evaluation.wer import WerReport, compute_wer, oracle_choice
from ..models import MODEL_REGISTRY
from ..rescoring.combine import Weights
from ..training.trainer import TrainResult
from ..types import NbestList, NbestSet
from .inputs import LoadedLM, load_lm, load_nbest, load_references, read_weights_file
from .kaldi_score_job import KaldiScoreJob, KaldiScorePoint, KaldiScoreResult
from .lm_jobs import AnalyzeJob, PerplexityJob, TrainJob, perplexity, train
from .score_job import ScoreJob, ScoreResult, score, write_score_outputs
from .tune_job import TuneJob, tune, write_tune_outputs

__all__ = [
    "AnalyzeJob", "KaldiScoreJob", "KaldiScorePoint", "KaldiScoreResult", "LoadedLM", "MODEL_REGISTRY", "NbestList",
    "NbestSet", "PerplexityJob", "PerplexityReport", "ScoreJob", "ScoreResult", "TrainJob", "TrainResult", "TuneJob",
    "TunePoint", "TuneResult", "Weights",
    "WerReport", "compute_wer", "format_wer_table", "load_lm", "load_nbest", "load_references", "model_row",
    "model_table", "oracle_choice", "perplexity", "read_weights_file", "score", "train", "tune", "wer_table",
    "write_score_outputs", "write_tune_outputs",
]
