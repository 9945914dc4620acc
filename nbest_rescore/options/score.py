"""The options of ``score`` (and the groups ``tune``, ``ppl`` and ``train`` share), each
declared once: the N-best input, the combination weights, the device, the scorer's
knobs, the neural cache."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional, Sequence, Tuple, Union

from ..errors import DataError
from .base import Options, option
from .parse import parse_nn_weights

#: ``--scoring``: how the costs are computed (:class:`~nbest_rescore.rescoring.scorer.NnScorer`).
SCORING_MODES = ("tree", "padded", "single")
#: ``--output``: exact softmax or the target logit as the log-probability.
OUTPUTS = ("softmax", "self-normalized")
#: ``--quantize``.
QUANTIZE = ("none", "int8")
#: ``score --dtype``: the weights' type for scoring.
DTYPES = ("float32", "bfloat16", "float16")
#: ``--softmax-impl`` (:mod:`nbest_rescore.models.fused_output`).
SOFTMAX_IMPLS = ("fused", "plain")
#: ``--history`` (:mod:`nbest_rescore.rescoring.history`).
HISTORY_MODES = ("first-pass", "rescored", "interpolated", "none")
#: Hypotheses per span of whole documents that ``score`` reads, scores and writes at a
#: time (a larger document is a span of its own): about 20 MB of lists.
SPAN_HYPS = 10_000

_FILE = {"exists": True, "dir_okay": False}
#: ``--nbest``: a file or folder, or a stream (click type: :class:`nbest_rescore.cli_options.NbestPath`).
NBEST_PATH = {"stream": True}
#: ``--lm``: a checkpoint file, or ``hf:PATH`` (click type: :class:`nbest_rescore.cli_options.LmPath`).
LM_PATH = {"lm": True}
#: ``--context-tokens`` by default: the history tokens an hf: LM reads before an utterance
#: (a model trained by ``train``: its training window less :data:`HYP_ROOM`).
CONTEXT_TOKENS = 512
#: Positions left for a hypothesis after the context of a model trained on short windows.
HYP_ROOM = 32
#: How far ``w_0 + sum_k w_k`` (``--interp`` and ``--nn-weights``) may be from 1.
WEIGHT_SUM_TOL = 1e-6


@dataclass(frozen=True, kw_only=True)
class NbestOptions(Options):
    """Where the N-best lists are and how plain-format lists are read."""

    nbest: str = option(help="A Kaldi N-best directory (text | words_text | words + words.txt; ac_cost | acwt; lm_cost "
                        "| lmwt.*; utt2doc or utt2spk for documents), an ESPnet N-best directory (1best_recog/, "
                        "2best_recog/ ...), a JSON Lines file (NAME.jsonl, or any file starting with '{': one "
                        "utterance per line), a NeMo beams file (NAME.tsv, or a first line with a tab; with "
                        "--nemo-manifest), or a plain N-best file (lines '<utterance-index> w1 w2 ... <eos>') with its "
                        "score files NAME.ac and NAME.ngram beside it (or --plain-ac/--plain-ngram). JSON Lines may "
                        "also come from standard input (-) or a command's output ('gunzip -c x.jsonl.gz |').",
                        path=NBEST_PATH)
    plain_ac: Optional[str] = option(None, "Plain format: acoustic log-likelihood scores, one per hypothesis line "
                                           "(default: NAME.ac beside the list).", path=_FILE)
    plain_ngram: Optional[str] = option(None, "Plain format: n-gram log-probability scores, one per hypothesis "
                                              "line (default: NAME.ngram beside the list).", path=_FILE)
    plain_costs: bool = option(False, "Plain format: the score files hold costs (-log, larger = worse), not "
                                      "scores.", is_flag=True)
    plain_utt2doc: Optional[str] = option(
        None, "Plain format: '<utterance> <document>' lines, so the 1-best history stops at document boundaries "
              "(default: the whole file is one document).", path=_FILE)
    plain_utt_ids: Optional[str] = option(
        None, "Plain format: '<utterance-index> <utterance-id>' lines; references are then keyed by utterance id "
              "(default: by the utterance index).", path=_FILE)
    nemo_manifest: Optional[str] = option(
        None, "NeMo beams file (--nbest BEAMS.tsv, 'text<TAB>score' lines): its manifest (JSON Lines with "
              "audio_filepath, text), which gives the utterance ids (audio file names) and order.", path=_FILE)


@dataclass(frozen=True, kw_only=True)
class DecoderWeights(Options):
    """The weights of the first pass that every job combining scores uses."""

    acoustic_scale: float = option(1.0, "Multiplies the acoustic log-likelihood (-ac_cost).", kind="float")
    word_ins_penalty: float = option(0.0, "Added per word, in nats (negative = penalty). Default 0, as Kaldi's "
                                     "lattice best path; set your first pass's value (the abc-nbest benchmark's: "
                                     "-0.629606).", kind="float", unit="nats per word")


@dataclass(frozen=True, kw_only=True)
class WeightOptions(DecoderWeights):
    """The combination weights of ``score``, each checked here once (for every source of
    weights: the options, :class:`~nbest_rescore.rescoring.combine.Weights`, a tune.json),
    with their sum (:func:`check_weight_sum`; not with ``weights_file``, which replaces
    them). ``nn_weights`` given as text is parsed on construction. The count of NN
    weights against the LMs: :func:`~nbest_rescore.api.score_weights.score_weights`.

    Raises:
        DataError: a weight not finite or out of range, or weights not summing to 1.
    """

    lm_weight: float = option(9.5, "LM weight (grammar scale) delta: multiplies the interpolated LM "
                                   "log-probability.", kind="float")
    interp: float = option(0.5, "Interpolation weight lambda (w_0) of the n-gram (1 = n-gram only, 0 = NN only).",
                           kind="float", range="[0, 1]")
    nn_weights: Union[None, str, Sequence[float]] = option(
        None, "Weights w_1..w_K of the --lm models, comma-separated in --lm order, each in [0, 1], with --interp "
              "summing to 1 (e.g. --interp 0.5 --nn-weights 0.3,0.2). Default: 1 - interp split equally.",
        parse=parse_nn_weights, kind="float", range="[0, 1]")
    weights_file: Optional[str] = option(None, "tune.json (its 'weights' block: acoustic_scale, lm_weight, "
                                         "word_ins_penalty, ngram and nn weights by LM name, names matching the --lm "
                                         "ones): replaces the weight options.", flag="--weights", path=_FILE)

    def __post_init__(self):
        super().__post_init__()
        if self.weights_file is None and self.nn_weights is not None:
            check_weight_sum(self.interp, self.nn_weights)


def nn_weights_example(interp: float, k: int) -> str:
    """``1 - interp`` split in ``k`` weights of 4 decimals that sum to it."""
    each = [round((1.0 - interp) / k, 4)] * (k - 1)
    return ",".join(f"{w:g}" for w in each + [round(1.0 - interp - sum(each), 4)])


def check_weight_sum(interp: float, nn_weights: Sequence[float], ngram_name: str = "--interp",
                     nn_name: str = "--nn-weights", fix: Optional[str] = None) -> None:
    """The n-gram weight ``interp`` and the NN weights sum to 1 (within
    :data:`WEIGHT_SUM_TOL`); the message names them ``ngram_name`` and ``nn_name``
    and ends with ``fix`` (default: a valid ``--nn-weights``).

    Raises:
        DataError: ``--interp 0.5 (the n-gram weight) and --nn-weights 0.3,0.3 must sum
            to 1, they sum to 1.1; e.g. --nn-weights 0.25,0.25, ...``.
    """
    total = interp + sum(nn_weights)
    if abs(total - 1.0) > WEIGHT_SUM_TOL:
        fix = fix or (f"e.g. {nn_name} {nn_weights_example(interp, len(nn_weights))}, or leave {nn_name} out to split "
                      f"1 - interp equally")
        shown = ",".join(f"{w:g}" for w in nn_weights)
        raise DataError(f"{ngram_name} {interp:g} (the n-gram weight) and {nn_name} {shown} must sum to 1, they "
                        f"sum to {total:g}; {fix}")


@dataclass(frozen=True, kw_only=True)
class DeviceOption(Options):
    """The torch device."""

    device: str = option("cpu", "cpu, cuda or cuda:N.")


@dataclass(frozen=True, kw_only=True)
class ThreadsOption(Options):
    """CPU threads for torch."""

    threads: Optional[int] = option(
        None, "CPU threads for torch (default: OMP_NUM_THREADS or MKL_NUM_THREADS when set, else the cores this "
              "process may use; one per job when jobs share a machine).", kind="int", range=">= 1")


@dataclass(frozen=True, kw_only=True)
class ScorerOptions(Options):
    """The knobs of :class:`~nbest_rescore.rescoring.scorer.NnScorer` (the device/dtype
    combinations: :func:`~nbest_rescore.rescoring.scorer.check_inference_options`)."""

    batch_size: int = option(256, "Most hypotheses per forward pass.", kind="int", range=">= 1", unit="hypotheses")
    max_tokens: int = option(8192, "Most padded tokens (rows x length) per forward pass; bounds memory.",
                             kind="int", range=">= 1", unit="tokens")
    scoring: str = option("tree", "tree: each distinct prefix read once (fastest); padded: length-sorted padded "
                          "batches; single: one hypothesis at a time. All give the same costs.", choices=SCORING_MODES)
    output: str = option("softmax", "self-normalized: the target word's logit is its log-probability (no softmax; "
                         "faster, approximate; for models trained with optim.self_norm_weight > 0).", choices=OUTPUTS)
    quantize: str = option("none", "int8: dynamic int8 quantisation of the linear/LSTM/GRU layers (CPU only; "
                                   "approximate).", choices=QUANTIZE)
    dtype: str = option("float32", "Weights cast to this type for scoring (float16: CUDA only; approximate).",
                        choices=DTYPES)
    softmax_impl: str = option(
        "fused", "The exact full softmax: fused = in vocabulary blocks with an online log-sum-exp (no [positions, V] "
                 "matrix); plain = log_softmax of the whole product (for comparison; the same costs to about 1e-6 "
                 "nats). Adaptive-softmax models ignore it.", choices=SOFTMAX_IMPLS)
    max_ngram_order: Optional[int] = option(
        None, "History merging (Kaldi's --max-ngram-order of lmrescore_rnnlm_lat.sh): within a list, prefixes whose "
              "last K - 1 words agree share one LM state, as lattice rescoring merges RNN LM histories; fewer LM "
              "positions, approximate costs. Recurrent LMs with --scoring tree only. tune --order-budget picks K. "
              "0 (as in Kaldi) or unset: exact scoring (0 also overrides the K of score --weights tune.json).",
        kind="int", range=">= 0 (0 = exact; else K >= 2)", example=4)

    def __post_init__(self):
        super().__post_init__()
        if self.max_ngram_order == 1:
            raise DataError("--max-ngram-order 1 would score every word from the list's start state alone (a "
                            "history of no word): give K >= 2 (Kaldi's lattice rescoring uses 4), or 0 for exact "
                            "scoring")


@dataclass(frozen=True, kw_only=True)
class ScoringOptions(ScorerOptions, DeviceOption, ThreadsOption):
    """How ``score`` runs: the scorer's knobs, the device, threads, the history policy
    and the span size."""

    history: Union[str, Tuple[str, ...]] = option(
        ("first-pass",), "Which 1-best of the previous utterances of the document conditions the NN LM: first-pass "
        "(acoustic + n-gram), rescored (acoustic + NN), interpolated (full score), none. Once for every --lm, or once "
        "per --lm in the same order; with several LMs the rescored / interpolated 1-best of each is its own (as if "
        "scored alone).", choices=HISTORY_MODES, multiple=True)
    skip_confident: Optional[float] = option(
        None, "Selective rescoring: leave an utterance whose first-pass 1-best has a first-pass posterior of at least "
              "P (softmax of the first-pass score / LM weight over its list, as Kaldi's lattice posteriors) to that "
              "1-best, without running the NN LM on its list; its NN costs are written as its n-gram costs. tune "
              "--skip-budget finds P. Default: score every list.", kind="float", range="(0, 1]", example=0.9)
    prune_mass: Optional[float] = option(
        None, "Selective rescoring within a list: score only its posterior beam, the hypotheses of highest first-pass "
              "posterior that hold 1 - E of it (the 1-best always); each hypothesis left out gets its n-gram cost "
              "shifted by its list's mean NN - n-gram cost difference. tune --skip-budget finds E. Default: score "
              "every hypothesis.", kind="float", range="(0, 1)", example=0.02)
    span_hyps: Optional[int] = option(
        SPAN_HYPS, "The lists are read, scored and written one span of whole documents at a time, of at most this many "
        "hypotheses (a larger document is a span of its own); bounds memory. 0: the whole set at once. The outputs do "
        "not depend on it (on the CPU, byte for byte).", kind="int", range=">= 0", unit="hypotheses", nullable=True)


@dataclass(frozen=True, kw_only=True)
class CacheOptions(Options):
    """The neural cache (:mod:`nbest_rescore.models.cache`)."""

    cache_size: int = option(0, "Neural cache: last M (features, next word) pairs kept; 0 = no cache.",
                             kind="int", range=">= 0", unit="pairs")
    cache_theta: float = option(0.3, "Neural cache: theta in exp(theta h_t . h_i) (flatness of the cache "
                                     "distribution).", kind="float")
    cache_lambda: float = option(0.1, "Neural cache: weight lambda of p_cache in (1 - lambda) p_model + lambda "
                                      "p_cache.", kind="float", range="[0, 0.999999]")

    def cache_kwargs(self) -> dict:
        """The cache options as :func:`~nbest_rescore.api.lm_loading.load_lm` takes them."""
        return {f.name: getattr(self, f.name) for f in fields(CacheOptions)}


@dataclass(frozen=True, kw_only=True)
class HfOptions(Options):
    """Hugging Face LMs (``--lm hf:PATH``, :mod:`nbest_rescore.models.hf`)."""

    context_tokens: Optional[int] = option(
        None, f"hf: LMs: the last N tokens of the document's 1-best history (and its start token) are the context of "
              f"each utterance. Default: {CONTEXT_TOKENS}, or for a model trained by 'train', its training window less "
              f"{HYP_ROOM} tokens (room for the hypothesis).", kind="int", range=">= 1", unit="tokens")
    trust_remote_code: bool = option(False, "hf: LMs: let transformers run the Python code shipped with the model "
                                     "(only for a model whose source you trust).", is_flag=True)
    allow_pickle: bool = option(False, "hf: LMs: load pickled weights (pytorch_model.bin, which can run code) when "
                                "the directory has no safetensors (only from a source you trust).", is_flag=True)

    def hf_kwargs(self) -> dict:
        """The hf: options as :func:`~nbest_rescore.api.lm_loading.load_lm` takes them."""
        return {f.name: getattr(self, f.name) for f in fields(HfOptions)}


@dataclass(frozen=True, kw_only=True)
class PromptOption(Options):
    """Text before every document of an hf: LM (:mod:`nbest_rescore.rescoring.hf_context`)."""

    prompt: Optional[str] = option(
        None, "hf: LMs: a text read before every document's 1-best history (e.g. a description of the domain), as a "
              "sentence (its words, then the end token), not scored. Counted in --context-tokens: the history is cut "
              "to fit, never the prompt.", kind="str")


@dataclass(frozen=True, kw_only=True)
class ContextFileOption(PromptOption):
    """Per-document or per-utterance text before the history or hypotheses of an hf: LM."""

    context_file: Optional[str] = option(
        None, "hf: LMs: lines '<id> text...'. A document id's text is read after the prompt, before the document's "
              "1-best history; an utterance id's after the history, right before that utterance's hypotheses (for "
              "it alone). Each is a sentence, counted in --context-tokens like the prompt (the history is cut to "
              "fit). An id that is neither is an error; lists without a line get no context.", path=_FILE)
