"""The options of each command, declared once: a command's dataclass gathers the
shared groups (:mod:`.score`) and its own fields. The jobs of :mod:`nbest_rescore.api`
derive from these (``ScoreJob(ScoreOptions)`` ...); the CLI makes its click options
from them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

from .base import Options, option
from .parse import parse_grid
from .score import (_FILE, LM_PATH, CacheOptions, ContextFileOption, DecoderWeights, DeviceOption, HfOptions,
                    NbestOptions, PromptOption, ScoringOptions, ThreadsOption, WeightOptions)

_DIR_OUT = {"file_okay": False}
#: ``train --dtype`` (optim.dtype).
TRAIN_DTYPES = ("float32", "bfloat16")
#: ``train --resume auto``: the run's own ``<out>.last.pt`` when it exists.
AUTO_RESUME = "auto"
#: ``tune --search``.
SEARCHES = ("grid", "line")
#: ``convert --to``: the N-best formats written (docs/formats.md).
NBEST_FORMATS = ("kaldi", "plain", "jsonl")
#: Bootstrap replications by default, as ``compute-wer-bootci --replications`` (the default of
#: :mod:`nbest_rescore.evaluation.bootstrap` too, defined here once: evaluation imports options).
REPLICATIONS = 10000


@dataclass(frozen=True, kw_only=True)
class ScoreOptions(NbestOptions, WeightOptions, ScoringOptions, CacheOptions, HfOptions, ContextFileOption):
    """``score``: the LMs, the outputs, the references, the n-gram source and the groups."""

    lm: Union[str, Sequence[str]] = option(
        help="Checkpoint (.pt), or hf:PATH (a Hugging Face causal LM: a save_pretrained directory or a cached model "
             "id); repeat for several NN LMs, each scored in its own pass. An LM is named by its file name "
             "(exp/gru.pt: gru; hf:exp/gpt: gpt; a repeated name gets _2, _3 ...): its costs go to OUT/nn_cost.NAME "
             "when there are several.", multiple=True, path=LM_PATH)
    out: Optional[str] = option(None, "Output folder for text (new 1-best), nn_cost (per-hypothesis NN costs; "
                                "nn_cost.NAME per LM with several --lm) and wer.json; replaced as a whole. Without it "
                                "the new 1-best is printed to stdout (Kaldi text).", path=_DIR_OUT, output=True)
    ref: Optional[str] = option(None, "References (Kaldi text '<utterance-id> words...') to report WER: rescored, "
                                      "first pass and oracle.", path=_FILE)
    ngram_arpa: Optional[str] = option(None, "Recompute the n-gram costs from this ARPA file (kenlm) instead of the "
                                             "lists' lm_cost.", path=_FILE)


@dataclass(frozen=True, kw_only=True)
class ReplicationsOption(Options):
    """The bootstrap's size."""

    replications: int = option(REPLICATIONS, "Bootstrap replications (resampled utterance sets, as Kaldi's "
                               "compute-wer-bootci) for the WER intervals and improvement probabilities, seeded by "
                               "--seed; 0: no bootstrap.", kind="int", range=">= 0")


@dataclass(frozen=True, kw_only=True)
class SearchOptions(DecoderWeights, ReplicationsOption):
    """The weight search of ``tune`` (:func:`nbest_rescore.api.tune`, the searches of
    :mod:`nbest_rescore.evaluation.tuning`), each value checked once, on construction:
    a grid given as text or numbers becomes a tuple of floats. ``lm_weight`` (the line
    search's start delta) and ``seed`` (its restarts and the bootstrap; the global
    ``--seed``) are not options of their own. Raises DataError."""

    search: Optional[str] = option(
        None, "grid: every point of the grids (for K LMs the weights on the simplex at the --interps spacing); line: "
              "Och's exact line search (MERT). Default: grid for up to two LMs, else line.", choices=SEARCHES)
    restarts: int = option(5, "Line search: random restarts around the start point (seeded by the global --seed).",
                           kind="int", range=">= 0")
    interps: str = option("0:1:0.1", "Interpolation weight lambda grid: start:stop:step (inclusive) or a,b,c; values "
                                     "in [0, 1].", parse=parse_grid, kind="float", range="[0, 1]")
    lm_weights: str = option("5:14:0.5", "LM weight (grammar scale) delta grid: start:stop:step or a,b,c.",
                             parse=parse_grid, kind="float")
    word_ins_penalties: Optional[str] = option(None, "Word insertion penalty grid in nats per word (default: only "
                                               "--word-ins-penalty).", parse=parse_grid, kind="float",
                                               unit="nats per word")
    folds: int = option(0, "K >= 2: also K-fold cross-validation by documents: each fold's 1-best at the weights the "
                           "same search finds on the other folds; their pooled WER is the cross-validated WER (0 or "
                           "1: none).", kind="int", range=">= 0")
    fold_seed: int = option(0, "Seed of the shuffle that deals the documents into the --folds.", kind="int",
                            range=">= 0")
    skip_budget: Optional[float] = option(
        None, "Selective rescoring (score --skip-confident P): find the first-pass posterior threshold P that scores "
              "the fewest hypotheses at a WER at most B points (absolute, percent) above scoring every list, at the "
              "tuned weights; with --folds, each fold's P is chosen on the other folds and the held-out WER and share "
              "scored are reported. Needs --nn-cost and --folds >= 2.", kind="float", range=">= 0", example=0.05,
        unit="WER points")
    order_budget: Optional[float] = option(
        None, "History merging (score --max-ngram-order K): find the smallest order K of the --order-cost files whose "
              "WER is at most B points (absolute, percent) above exact scoring at the tuned weights; with --folds, "
              "each fold's K is chosen on the other folds and the held-out WER is reported; tune.json records K for "
              "score --weights. Needs --order-cost and --folds >= 2.", kind="float", range=">= 0", example=0.05,
        unit="WER points")
    lm_weight: float = option(9.5, "Line search: the LM weight delta it starts from.", kind="float", range=">= 0")
    seed: int = option(0, "Seed of the line search's restarts and of the bootstrap (checked where used: "
                          ":func:`~nbest_rescore.api.tune_job.check_search`).")


@dataclass(frozen=True, kw_only=True)
class TuneOptions(NbestOptions, SearchOptions):
    """``tune`` (:class:`~nbest_rescore.api.TuneJob` checks them)."""

    ref: str = option(help="References (Kaldi text '<utterance-id> words...').", path=_FILE)
    nn_cost: Tuple[str, ...] = option((), "NN costs written by 'score' (OUT/nn_cost or OUT/nn_cost.NAME); repeat for "
                                      "several neural LMs (named by the part after 'nn_cost.', else 'nn'). Without it "
                                      "only lambda = 1 (n-gram only) is searched.", multiple=True, path=_FILE)
    order_cost: Tuple[str, ...] = option(
        (), "History merging: K=PATH, the NN costs of 'score --max-ngram-order K' of the one --nn-cost LM (repeat for "
            "several K), for --order-budget.", multiple=True)
    out: Optional[str] = option(None, "Write tune.json and (one LM, grid) the WER heat map tune_wer.png into this "
                                      "folder (replaced as a whole).", path=_DIR_OUT, output=True)


@dataclass(frozen=True, kw_only=True)
class FinetuneOptions(NbestOptions, WeightOptions, ThreadsOption, ReplicationsOption):
    """``finetune``: MWER fine-tuning of a checkpoint on N-best lists
    (:mod:`nbest_rescore.training.mwer`); the weights are those of the combined score
    whose expected word errors are minimised."""

    lm: str = option(help="The checkpoint (.pt) to fine-tune (a word-level LM trained by 'train'; an hf: model is "
                          "refused with the reason).", path=LM_PATH)
    ref: str = option(help="References of the lists (Kaldi text '<utterance-id> words...').", path=_FILE)
    out: str = option(help="Output folder (replaced as a whole): finetune.json and, without --folds, finetuned.pt; "
                           "with --folds K, fold_K.pt per fold and mwer/nn_cost (each fold's costs from the model "
                           "fine-tuned on the other folds) beside base/nn_cost (the checkpoint's), both for tune; "
                           "with --eval-nbest, its lists' mwer/nn_cost and base/nn_cost.",
                      path=_DIR_OUT, output=True)
    epochs: int = option(2, "Passes over the training lists.", kind="int", range=">= 1")
    lr: float = option(1e-4, "Adam's learning rate.", kind="float", range="> 0")
    top_n: Optional[int] = option(None, "Hypotheses of each list in the loss: the first-pass top N (default: every "
                                        "hypothesis, as rescoring chooses among them all).", kind="int", range=">= 2",
                                  unit="hypotheses")
    utts_per_step: int = option(8, "Lists per update.", kind="int", range=">= 1", unit="utterances")
    posterior_scale: Optional[str] = option(
        None, "alpha in the posterior softmax(alpha * combined score) whose expected word errors are minimised "
              "(default: 1 / LM weight, as Kaldi's lattice posteriors). A grid (a,b,c or start:stop:step) needs "
              "--folds: every value is fine-tuned on every fold and each fold takes the value whose models score "
              "the other folds best.", parse=parse_grid, kind="float", range="> 0", example="0.01,0.03,0.1,0.3")
    posterior_dropout: bool = option(False, "Compute the posterior's LM costs with dropout on, a mask per "
                                            "hypothesis (the earlier default); default: without dropout, as "
                                            "scoring computes them (dropout, if any, only in the cross-entropy term).",
                                     is_flag=True)
    text: Optional[str] = option(None, "LM text (one sentence per line) for the cross-entropy term that keeps the LM "
                                       "an LM (default: the references of the training lists).", path=_FILE)
    max_text_words: int = option(200000, "Words of --text read (whole sentences from its start).", kind="int",
                                 range=">= 1", unit="words")
    ce_weight: float = option(0.1, "Weight of the cross-entropy term (nats per token); 0: MWER alone.", kind="float",
                              range=">= 0")
    eval_nbest: Optional[str] = option(None, "Other N-best lists (any layout score reads) to score with the checkpoint "
                                             "and with the fine-tuned model (without --folds): their WERs at the same "
                                             "weights and the paired bootstrap.", path={"exists": True})
    eval_ref: Optional[str] = option(None, "References of --eval-nbest.", path=_FILE)
    folds: int = option(0, "K >= 2: fine-tune K models, each on the other folds' documents, and score each fold "
                           "with its own model: the held-out WER against the checkpoint's at the same weights, with "
                           "the paired bootstrap (0: one model on all the lists).", kind="int", range=">= 0")
    fold_seed: int = option(0, "Seed of the shuffle that deals the documents into the --folds (as tune's).",
                            kind="int", range=">= 0")


@dataclass(frozen=True, kw_only=True)
class TrainOptions(DeviceOption, ThreadsOption):
    """``train``: the config and its command-line overrides."""

    config: str = option(help="YAML training config (see examples/ and recipes/abc-nbest/conf/).", path=_FILE)
    out: str = option(help="Checkpoint to write (.pt): the best weights, rewritten after every epoch; the resumable "
                           "state goes beside it as <name>.last.pt. With model: hf a folder (save_pretrained files "
                           "and the tokenizer; the state goes to <folder>.last.pt).", path={}, output=True)
    max_words: Optional[int] = option(None, "Train on the first N words of the training text (overrides "
                                            "data.max_words).", kind="int", range=">= 1", unit="words")
    max_epochs: Optional[int] = option(None, "Override optim.max_epochs.", kind="int", range=">= 1")
    max_seconds: Optional[float] = option(None, "Stop training after this many seconds of the whole run (overrides "
                                                "optim.max_seconds).", kind="float", range="> 0", unit="seconds")
    dtype: Optional[str] = option(None, "Override optim.dtype: bfloat16 = mixed precision under CUDA autocast.",
                                  choices=TRAIN_DTYPES)
    resume: Optional[str] = option(None, "Continue the run saved in this <out>.last.pt (same optimiser state and "
                                         "schedule, mid-epoch too); 'auto': that of --out when it exists, else "
                                         "start afresh (for requeued jobs).", path={"dir_okay": False})
    checkpoint_interval: Optional[str] = option(None, "Also write <out>.last.pt during an epoch this often: a time "
                                                      "(5m, 90s, 1h), optimiser steps (500steps) or off (overrides "
                                                      "optim.checkpoint_interval, default 5m).")
    init_from: Optional[str] = option(None, "Start from this model checkpoint's weights and vocabulary "
                                            "(fine-tuning). With --resume auto, only when no <out>.last.pt exists: a "
                                            "restarted job resumes its own state.", path=_FILE)
    stop_after_epochs: Optional[int] = option(None, "End this run after N epochs (the schedule still plans max_epochs; "
                                              "--resume continues).", kind="int", range=">= 1")


@dataclass(frozen=True, kw_only=True)
class PrepareTextOptions(Options):
    """``prepare-text``: LM text into a token store, with a training config's settings."""

    config: str = option(help="YAML training config: its data (train, valid, max_words, max_valid_words), vocab and "
                              "hf.tokenizer sections say what to prepare and how.", path=_FILE)
    out: str = option(help="The token store (a folder; written as a whole, reused when it is up to date). Give it "
                           "as data.train of the config that trains on it.", path=_DIR_OUT, output=True)
    text: Optional[str] = option(None, "The training text instead of the config's data.train: a file, or a Kaldi "
                                       "rnnlm-style data directory (NAME.txt per source, dev.txt for validation).",
                                 path={"exists": True})
    valid: Optional[str] = option(None, "The validation text instead of the config's data.valid.", path=_FILE)
    jobs: Optional[int] = option(None, "Worker processes (default: the cores this process may use, at most 8).",
                                 kind="int", range=">= 1")


@dataclass(frozen=True, kw_only=True)
class TextOptions(Options):
    """The text an LM reads (``ppl``, ``analyze``)."""

    text: str = option(help="Text: one sentence per line, blank lines between documents.", path=_FILE)
    max_words: Optional[int] = option(None, "Only the first N words of the text.", kind="int", range=">= 1",
                                      unit="words")


@dataclass(frozen=True, kw_only=True)
class PplOptions(TextOptions, DeviceOption, ThreadsOption, CacheOptions, HfOptions, PromptOption):
    """``ppl``."""

    lm: str = option(help="Checkpoint (.pt), or hf:PATH (a Hugging Face causal LM).", path=LM_PATH)
    batch_size: int = option(16, "Documents scored in parallel.", kind="int", range=">= 1", unit="documents")


@dataclass(frozen=True, kw_only=True)
class AnalyzeOptions(TextOptions, DeviceOption):
    """``analyze``."""

    lm: str = option(help="Checkpoint (.pt) of an amn, attention, key-value or key-value-predict model.", path=_FILE)
    out: str = option(help="Output folder for analysis.json and the PNG plots (replaced as a whole).", path=_DIR_OUT,
                      output=True)


@dataclass(frozen=True, kw_only=True)
class KaldiScoreOptions(Options):
    """``kaldi-score`` (min <= max and the penalty list: ``check_kaldi_score_options``)."""

    ref: str = option(help="References: the data folder's text (Kaldi text; a bare key is an empty reference).",
                      path=_FILE)
    lm_cost: str = option(help="Name of the file inside each NBEST_DIR holding the LM-side graph cost of every "
                               "hypothesis ('<hyp-key> <cost>', e.g. lmwt.interp); the acoustic cost is the "
                               "folder's acwt or ac_cost.")
    min_lmwt: int = option(7, "Smallest LM weight (integer >= 1).", kind="int", range=">= 1")
    max_lmwt: int = option(17, "Largest LM weight (integer >= min).", kind="int", range=">= 1")
    word_ins_penalty: Union[str, Sequence[Union[str, float]]] = option(
        "0.0,0.5,1.0", "Word insertion penalties, comma-separated, in cost per word: positive = penalty (Kaldi's sign, "
        "the opposite of score's --word-ins-penalty). Kept as written: they name the files.", unit="cost per word")
    hyp_filter: Optional[str] = option(None, "Shell command (bash -c) applied to each 1-best text, Kaldi text on "
                                             "stdin and stdout, e.g. local/wer_hyp_filter (default: none, i.e. cat).")
    ref_filter: Optional[str] = option(None, "Shell command (bash -c) applied to --ref, giving "
                                             "scoring_kaldi/test_filt.txt (default: none, i.e. cat).")
    out: str = option(help="DIR (the decode folder): receives wer_LMWT_WIP and scoring_kaldi/ as score_kaldi.sh "
                           "writes them; other files there are left alone, except old-style wer_?, wer_?? (and "
                           "cer_), which score_kaldi.sh removes too.", path=_DIR_OUT, output=True)


@dataclass(frozen=True, kw_only=True)
class SplitOptions(Options):
    """``split``."""

    nj: int = option(help="Number of shards (1 .. the number of documents); a document is never split.", kind="int")


@dataclass(frozen=True, kw_only=True)
class ConvertOptions(NbestOptions):
    """``convert``: the lists (any format ``score`` reads, with the plain-format
    options), the format to write and where."""

    to: str = option(help="Format to write: kaldi (a folder: text, ac_cost, lm_cost or lmwt.lmonly + lmwt.nolm, "
                          "utt2doc; costs with 6 decimals), plain (a folder: nbest.txt, nbest.ac, nbest.ngram, "
                          "utt_ids, utt2doc) or jsonl (one file, one utterance per line; gzip-compressed when --out ends in "
                          ".gz).", choices=NBEST_FORMATS)
    out: str = option(help="Output: a folder for kaldi and plain (replaced as a whole), a file for jsonl (written "
                           "atomically).", path={}, output=True)
    drop_scores: bool = option(False, "Write what --to cannot keep without it (refused otherwise): JSON Lines input "
                                      "whose hypotheses carry scores beyond ac_cost, lm_cost and graph_cost is "
                                      "written without them (no format written here keeps them); lists with one total "
                                      "score per hypothesis (NeMo, ESPnet, JSON Lines total_cost) go to kaldi or plain "
                                      "with the total as the acoustic cost and an n-gram cost of 0.", is_flag=True)


@dataclass(frozen=True, kw_only=True)
class MergeOptions(Options):
    """``merge``."""

    out: str = option(help="Output folder for the merged text, nn_cost (jobs of several LMs: each nn_cost.NAME, "
                           "merged per name) and (with --ref) wer.json; replaced as a whole.", path=_DIR_OUT,
                      output=True)
    ref: Optional[str] = option(None, "References (Kaldi text) to compute the WER of the merged 1-best.", path=_FILE)


@dataclass(frozen=True, kw_only=True)
class TableOptions(ReplicationsOption):
    """``table``."""

    baseline: Tuple[str, ...] = option(
        (), "Name of a row to compare every other row with: adds P(better than NAME), the paired bootstrap "
            "probability that a row's 1-best makes fewer word errors (and, for rows with --folds results, P(CV "
            "better than NAME) for their cross-validated 1-best). Repeat for several.", multiple=True)
    ref: Optional[str] = option(None, "References, to score the 1-best 'text' beside each wer.json:rescored row "
                                      "utterance by utterance (its bootstrap columns); tune.json rows carry their "
                                      "own per-utterance errors.", path=_FILE)


@dataclass(frozen=True, kw_only=True)
class CurvesOptions(Options):
    """``curves``."""

    out: str = option(help="The PNG to write (atomically): validation perplexity against training words and "
                           "against CPU minutes, one line per run.", path={}, output=True)
    label: Tuple[str, ...] = option((), "Legend name of each run, in order (default: the file names).",
                                    multiple=True)
    title: Optional[str] = option(None, "First title line: what the runs are (e.g. the benchmark and budget).")


@dataclass(frozen=True, kw_only=True)
class InfoOptions(Options):
    """``info``."""

    as_json: bool = option(False, "JSON lines instead of a Markdown table.", flag="--json", is_flag=True)
