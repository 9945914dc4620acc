"""Command-line interface: each command parses its options, makes one job of
:mod:`nbest_rescore.api` (which checks every option before reading anything), runs it
and prints the result.

Results go to stdout; logs, warnings and progress bars to stderr (and to ``--log-file``).
Exit status 0 on success, 1 for bad input (one clear message, no traceback), 2 for
usage errors. Any unexpected failure is reported in one line too; ``-v`` shows where
it happened.
"""
from __future__ import annotations

import json
import logging
import sys

import click

from .errors import DataError
from .threads import prefer_passive_wait

prefer_passive_wait()  # before torch is imported: idle OpenMP threads sleep (nbest_rescore.threads)

HISTORY_CHOICES = ["first-pass", "rescored", "interpolated", "none"]
log = logging.getLogger("nbest_rescore")

SCORE_FORMULA = """\b
Score of a hypothesis with K NN LMs (natural log; costs are -log):
  -acoustic_scale * ac_cost
  + lm_weight * (w_0 * -ngram_cost + sum_k w_k * -nn_cost_k - graph_cost)
  + word_ins_penalty * number_of_words
w_0 = --interp, w_1..w_K = --nn-weights (default: 1 - interp split
equally), w_0 + w_1 + .. + w_K = 1; one LM: w_1 = 1 - interp."""


class _Main(click.Group):
    """The command group: bad input and unexpected errors end in one line, exit 1."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DataError as exc:
            log.debug("bad input", exc_info=True)
            raise click.ClickException(str(exc)) from None
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:  # stdout closed early (``| head``): stop quietly, as Unix tools do
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(141)
        except MemoryError:
            log.debug("out of memory", exc_info=True)
            raise click.ClickException("out of memory: lower --batch-size / --max-tokens, or use a machine with "
                                       "more memory") from None
        except Exception as exc:  # the last resort: never a traceback for the user
            verbose = (ctx.obj or {}).get("verbose", 0)
            log.log(logging.ERROR if verbose else logging.DEBUG, "unexpected error", exc_info=True)
            hint = "" if verbose else " (run with -v to see where it happened)"
            raise click.ClickException(f"unexpected {type(exc).__name__}: {exc}{hint}") from None


class _Bar:
    """A tqdm bar on stderr fed with ``(done, total)`` progress calls."""

    def __init__(self, unit: str, disable: bool = False):
        self.unit, self.disable, self.bar = unit, disable, None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit=self.unit, disable=self.disable, file=sys.stderr)
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-v info and tracebacks, -vv debug).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Random seed (Python, NumPy, torch). For train, given explicitly it replaces optim.seed.")
@click.option("--log-file", type=click.Path(dir_okay=False), default=None,
              help="Also append the log (debug level, with the command line) to this file.")
@click.version_option(package_name="nbest-rescore")
@click.pass_context
def main(ctx, verbose, seed, log_file):
    """Rescore Kaldi-style N-best lists with corpus-level neural language models.

    Typical use: nbest-rescore score --lm amn.pt --nbest dev/ --ref dev/ref.txt --out exp/amn_dev
    """
    level = logging.WARNING - 10 * min(verbose, 2)
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(logging.DEBUG if log_file else level)
    log.propagate = False
    if log_file:
        try:
            fh = logging.FileHandler(log_file, encoding="utf-8")
        except OSError as exc:
            raise click.BadParameter(f"cannot open {log_file}: {exc.strerror}", param_hint="--log-file") from None
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(fh)
        log.debug("command line: %s", " ".join(sys.argv))
    explicit_seed = ctx.get_parameter_source("seed") not in (None, click.core.ParameterSource.DEFAULT)
    ctx.obj = {"verbose": verbose, "seed": seed, "explicit_seed": explicit_seed}


def _apply(options):
    def deco(fn):
        for opt in reversed(options):
            fn = opt(fn)
        return fn

    return deco


_device_option = click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
_threads_option = click.option("--threads", type=click.IntRange(min=1), default=None,
                               help="CPU threads for torch (default: OMP_NUM_THREADS or MKL_NUM_THREADS when set, "
                                    "else the cores this process may use; one per job when jobs share a machine).")
_no_progress = click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
_cache_options = [
    click.option("--cache-size", type=click.IntRange(min=0), default=0, show_default=True,
                 help="Neural cache: last M (features, next word) pairs kept; 0 = no cache."),
    click.option("--cache-theta", type=float, default=0.3, show_default=True,
                 help="Neural cache: theta in exp(theta h_t . h_i) (flatness of the cache distribution)."),
    click.option("--cache-lambda", type=click.FloatRange(0, 1, max_open=True), default=0.1, show_default=True,
                 help="Neural cache: weight lambda of p_cache in (1 - lambda) p_model + lambda p_cache."),
]
_nbest_options = [
    click.option("--nbest", required=True, type=click.Path(exists=True),
                 help="A Kaldi N-best directory (text | words_text | words + words.txt; ac_cost | acwt; "
                      "lm_cost | lmwt.*; utt2doc or utt2spk for documents), or a plain N-best file "
                      "(lines '<utterance-index> w1 w2 ... <eos>') with its score files NAME.ac and NAME.ngram "
                      "beside it (or --plain-ac/--plain-ngram)."),
    click.option("--plain-ac", type=click.Path(exists=True, dir_okay=False), default=None,
                 help="Plain format: acoustic log-likelihood scores, one per hypothesis line "
                      "(default: NAME.ac beside the list)."),
    click.option("--plain-ngram", type=click.Path(exists=True, dir_okay=False), default=None,
                 help="Plain format: n-gram log-probability scores, one per hypothesis line "
                      "(default: NAME.ngram beside the list)."),
    click.option("--plain-costs", is_flag=True,
                 help="Plain format: the score files hold costs (-log, larger = worse), not scores."),
    click.option("--plain-utt2doc", type=click.Path(exists=True, dir_okay=False), default=None,
                 help="Plain format: '<utterance> <document>' lines, so the 1-best history stops at "
                      "document boundaries (default: the whole file is one document)."),
    click.option("--plain-utt-ids", type=click.Path(exists=True, dir_okay=False), default=None,
                 help="Plain format: '<utterance-index> <utterance-id>' lines; references are then keyed by "
                      "utterance id (default: by the utterance index)."),
    click.option("--acoustic-scale", type=float, default=1.0, show_default=True,
                 help="Multiplies the acoustic log-likelihood (-ac_cost)."),
    click.option("--word-ins-penalty", type=float, default=-0.629606, show_default=True,
                 help="Added per word, in nats (negative = penalty); the default is the benchmark "
                      "decoder's first-pass value."),
]
_replications_option = click.option(
    "--replications", type=click.IntRange(min=0), default=10000, show_default=True,
    help="Bootstrap replications (resampled utterance sets, as Kaldi's compute-wer-bootci) for the WER intervals "
         "and improvement probabilities, seeded by --seed; 0: no bootstrap.")


def _grid(ctx, param, value):
    """Click callback: a tuning grid (start:stop:step or a,b,c) parsed at once, so a
    bad grid is a usage error before anything is read (``--interps`` within [0, 1])."""
    if value is None:
        return None
    from .api.checks import check_grid, parse_grid

    try:
        grid = parse_grid(value, param.name)
        if param.name == "interps":
            check_grid(param.name, grid, 0.0, 1.0)
        return grid
    except DataError as exc:
        raise click.BadParameter(str(exc)) from None


_PLAIN_KEYS = ("plain_ac", "plain_ngram", "plain_costs", "plain_utt2doc", "plain_utt_ids")


def _nbest_kwargs(kw):
    """The N-best options of ``kw`` (popped) as job keyword arguments."""
    return {k: kw.pop(k) for k in ("nbest", *_PLAIN_KEYS, "acoustic_scale", "word_ins_penalty")}


@main.command(short_help="Train a language model and save a checkpoint.")
@click.option("--config", required=True, type=click.Path(exists=True, dir_okay=False),
              help="YAML training config (see examples/ and recipes/abc-nbest/conf/).")
@click.option("--out", required=True, type=click.Path(dir_okay=False),
              help="Checkpoint to write (.pt): the best weights, rewritten after every epoch; the resumable "
                   "state goes beside it as <name>.last.pt.")
@click.option("--max-words", type=click.IntRange(min=1), default=None,
              help="Train on the first N words of the training text (overrides data.max_words).")
@click.option("--max-epochs", type=click.IntRange(min=1), default=None, help="Override optim.max_epochs.")
@click.option("--max-seconds", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop training after this many seconds of the whole run (overrides optim.max_seconds).")
@_device_option
@click.option("--dtype", type=click.Choice(["float32", "bfloat16"]), default=None,
              help="Override optim.dtype: bfloat16 = mixed precision under CUDA autocast.")
@_threads_option
@click.option("--resume", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Continue the run saved in this <out>.last.pt (same optimiser state and schedule).")
@click.option("--init-from", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Start from this model checkpoint's weights and vocabulary (fine-tuning).")
@click.option("--stop-after-epochs", type=click.IntRange(min=1), default=None,
              help="End this run after N epochs (the schedule still plans max_epochs; --resume continues).")
@_no_progress
@click.pass_obj
def train(obj, no_progress, **kw):
    """Train a language model at corpus level (state carried within documents) and
    save a checkpoint. Prints a JSON summary."""
    from .api import TrainJob

    job = TrainJob(**kw, seed=obj["seed"] if obj["explicit_seed"] else None)
    res = job.run(progress=not no_progress)
    if res.rank != 0:  # torchrun: every rank trains, rank 0 reports
        return
    click.echo(json.dumps({"checkpoint": job.out, "epochs": res.epochs, "best_valid_ppl": res.best_valid_ppl,
                           "train_ppl": res.train_ppl, "seconds": round(res.seconds, 1),
                           "words_per_s": round(res.words_per_s, 1)}, indent=2))


@main.command(short_help="Corpus-level perplexity and OOV rate of a text.")
@click.option("--lm", required=True, type=click.Path(exists=True, dir_okay=False), help="Checkpoint (.pt).")
@click.option("--text", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Text: one sentence per line, blank lines between documents.")
@_device_option
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True,
              help="Documents scored in parallel.")
@click.option("--max-words", type=click.IntRange(min=1), default=None, help="Only the first N words of the text.")
@_threads_option
@_apply(_cache_options)
@_no_progress
def ppl(no_progress, **kw):
    """Corpus-level perplexity (natural log inside; the state is carried within a
    document and reset between documents) and the OOV rate. Prints JSON."""
    from .api import PerplexityJob

    bar = _Bar("segment", no_progress)
    rep, cache = PerplexityJob(**kw).run(progress=bar)
    bar.close()
    click.echo(json.dumps({**rep.to_dict(), "cache": cache}, indent=2))


@main.command(short_help="Attention analysis of an AMN or window model.")
@click.option("--lm", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Checkpoint (.pt) of an amn, attention, key-value or key-value-predict model.")
@click.option("--text", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Text: one sentence per line, blank lines between documents.")
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Output folder for analysis.json and the PNG plots (replaced as a whole).")
@click.option("--max-words", type=click.IntRange(min=1), default=None, help="Only the first N words of the text.")
@_device_option
def analyze(**kw):
    """Attention analysis (thesis 000 section 6.2; 001 Fig. 3): attention entropy,
    memcell similarity and per-memcell perplexity, or mean attention by window position."""
    from .api import AnalyzeJob

    res, paths = AnalyzeJob(**kw).run()
    click.echo(json.dumps(res.summary(), indent=2))
    click.echo(f"wrote {', '.join(paths)}")


def _nn_weights(ctx, param, value):
    """Click callback: ``--nn-weights 0.3,0.2`` parsed at once (a usage error if malformed)."""
    if value is None:
        return None
    from .api.score_job import parse_nn_weights

    try:
        return parse_nn_weights(value)
    except DataError as exc:
        raise click.BadParameter(str(exc)) from None


_WEIGHT_OPTIONS = ("acoustic_scale", "lm_weight", "interp", "word_ins_penalty", "nn_weights")


def _check_score_usage(ctx, kw) -> None:
    """Usage errors of ``score`` found before anything is read: the --history count and
    the weights (sum, range, one per --lm); --weights overriding weight options is logged."""
    from .api.score_job import lm_histories, score_weights

    try:
        lm_histories(kw["history"], len(kw["lm"]))
        if not kw["weights_file"]:
            score_weights(*(kw[k] for k in _WEIGHT_OPTIONS), len(kw["lm"]))
    except DataError as exc:
        raise click.UsageError(str(exc), ctx) from None
    given = [k for k in _WEIGHT_OPTIONS if ctx.get_parameter_source(k) != click.core.ParameterSource.DEFAULT]
    if kw["weights_file"] and given:
        log.warning("--weights %s overrides %s", kw["weights_file"],
                    ", ".join("--" + k.replace("_", "-") for k in given))


@main.command(short_help="Rescore N-best lists with one or several neural LMs.", epilog=SCORE_FORMULA)
@click.option("--lm", required=True, multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Checkpoint (.pt); repeat for several NN LMs, each scored in its own pass. An LM is named by "
                   "its file name (exp/gru.pt: gru; a repeated name gets _2, _3 ...): its costs go to "
                   "OUT/nn_cost.NAME when there are several.")
@_apply(_nbest_options)
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Output folder for text (new 1-best), nn_cost (per-hypothesis NN costs; nn_cost.NAME per LM "
                   "with several --lm) and wer.json; replaced as a whole. Without it the new 1-best is printed "
                   "to stdout (Kaldi text).")
@click.option("--ref", type=click.Path(exists=True, dir_okay=False), default=None,
              help="References (Kaldi text '<utterance-id> words...') to report WER: rescored, first pass "
                   "and oracle.")
@click.option("--lm-weight", type=float, default=9.5, show_default=True,
              help="LM weight (grammar scale) delta: multiplies the interpolated LM log-probability.")
@click.option("--interp", type=click.FloatRange(0, 1), default=0.5, show_default=True,
              help="Interpolation weight lambda (w_0) of the n-gram (1 = n-gram only, 0 = NN only).")
@click.option("--nn-weights", default=None, callback=_nn_weights,
              help="Weights w_1..w_K of the --lm models, comma-separated in --lm order, each in [0, 1], with "
                   "--interp summing to 1 (e.g. --interp 0.5 --nn-weights 0.3,0.2). Default: 1 - interp split "
                   "equally.")
@click.option("--weights", "weights_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="tune.json (its 'weights' block: acoustic_scale, lm_weight, word_ins_penalty, ngram and nn "
                   "weights by LM name, names matching the --lm ones): replaces the weight options.")
@click.option("--ngram-arpa", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Recompute the n-gram costs from this ARPA file (kenlm) instead of the lists' lm_cost.")
@click.option("--history", type=click.Choice(HISTORY_CHOICES), multiple=True, default=("first-pass",),
              show_default=True,
              help="Which 1-best of the previous utterances of the document conditions the NN LM: "
                   "first-pass (acoustic + n-gram), rescored (acoustic + NN), interpolated (full score), none. "
                   "Once for every --lm, or once per --lm in the same order; with several LMs the rescored / "
                   "interpolated 1-best of each is its own (as if scored alone).")
@_device_option
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True,
              help="Most hypotheses per forward pass.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=8192, show_default=True,
              help="Most padded tokens (rows x length) per forward pass; bounds memory.")
@click.option("--span-hyps", type=click.IntRange(min=0), default=10_000, show_default=True,
              help="The lists are read, scored and written one span of whole documents at a time, of at most "
                   "this many hypotheses (a larger document is a span of its own); bounds memory. 0: the whole "
                   "set at once. The outputs do not depend on it (on the CPU, byte for byte).")
@click.option("--scoring", type=click.Choice(["tree", "padded", "single"]), default="tree", show_default=True,
              help="tree: each distinct prefix read once (fastest); padded: length-sorted padded batches; "
                   "single: one hypothesis at a time. All give the same costs.")
@click.option("--output", type=click.Choice(["softmax", "self-normalized"]), default="softmax", show_default=True,
              help="self-normalized: the target word's logit is its log-probability (no softmax; faster, "
                   "approximate; for models trained with optim.self_norm_weight > 0).")
@click.option("--quantize", type=click.Choice(["none", "int8"]), default="none", show_default=True,
              help="int8: dynamic int8 quantisation of the linear/LSTM/GRU layers (CPU only; approximate).")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default="float32",
              show_default=True, help="Weights cast to this type for scoring (float16: CUDA only; approximate).")
@click.option("--softmax-impl", type=click.Choice(["fused", "plain"]), default="fused", show_default=True,
              help="The exact full softmax: fused = in vocabulary blocks with an online log-sum-exp (no "
                   "[positions, V] matrix); plain = log_softmax of the whole product (for comparison; the same "
                   "costs to about 1e-6 nats). Adaptive-softmax models ignore it.")
@_threads_option
@_no_progress
@_apply(_cache_options)
@click.pass_obj
def score(obj, no_progress, **kw):
    """Rescore N-best lists with one or several neural LMs conditioned on the 1-best
    history of the document; write (or print) the new 1-best and the NN costs, and
    report WER."""
    from .api import ScoreJob

    _check_score_usage(click.get_current_context(), kw)
    kw["span_hyps"] = kw["span_hyps"] or None
    job = ScoreJob(**_nbest_kwargs(kw), **kw, seed=obj["seed"])
    bar = _Bar("hyp", no_progress)
    res = job.run(progress=bar)
    bar.close()
    if job.out is None:  # the new 1-best is the output; the report goes to stderr
        click.echo("".join(" ".join((utt, *words)) + "\n" for utt, words in res.one_best.items()), nl=False)
    click.echo(res.report(job.out), err=job.out is None)


@main.command(short_help="Tune the n-gram/NN LM weights, LM weight and insertion penalty.")
@_apply(_nbest_options)
@click.option("--ref", required=True, type=click.Path(exists=True, dir_okay=False),
              help="References (Kaldi text '<utterance-id> words...').")
@click.option("--nn-cost", type=click.Path(exists=True, dir_okay=False), multiple=True,
              help="NN costs written by 'score' (OUT/nn_cost or OUT/nn_cost.NAME); repeat for several neural LMs "
                   "(named by the part after 'nn_cost.', else 'nn'). Without it only lambda = 1 (n-gram only) "
                   "is searched.")
@click.option("--search", type=click.Choice(["grid", "line"]), default=None,
              help="grid: every point of the grids (for K LMs the weights on the simplex at the --interps "
                   "spacing); line: Och's exact line search (MERT). Default: grid for up to two LMs, else line.")
@click.option("--restarts", type=click.IntRange(min=0), default=5, show_default=True,
              help="Line search: random restarts around the start point (seeded by the global --seed).")
@click.option("--interps", default="0:1:0.1", show_default=True, callback=_grid,
              help="Interpolation weight lambda grid: start:stop:step (inclusive) or a,b,c; values in [0, 1].")
@click.option("--lm-weights", default="5:14:0.5", show_default=True, callback=_grid,
              help="LM weight (grammar scale) delta grid: start:stop:step or a,b,c.")
@click.option("--word-ins-penalties", default=None, callback=_grid,
              help="Word insertion penalty grid in nats per word (default: only --word-ins-penalty).")
@click.option("--folds", type=click.IntRange(min=0), default=0, show_default=True,
              help="K >= 2: also K-fold cross-validation by documents: each fold's 1-best at the weights the same "
                   "search finds on the other folds; their pooled WER is the cross-validated WER (0 or 1: none).")
@click.option("--fold-seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the shuffle that deals the documents into the --folds.")
@_replications_option
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Write tune.json and (one LM, grid) the WER heat map tune_wer.png into this folder "
                   "(replaced as a whole).")
@click.pass_obj
def tune(obj, **kw):
    """Search the weights of the n-gram and of one or more neural LMs, the LM weight
    delta (and the word insertion penalty) by WER on stored NN costs: an exhaustive grid
    or Och's exact line search (--search line, seeded by --seed). No neural LM is run.
    Also reports the bootstrap interval of the best point's WER (seeded by --seed) and,
    with --folds, the cross-validated WER (docs/evaluation.md)."""
    from .api import TuneJob
    from .api.tune_job import has_heatmap

    costs = kw.pop("nn_cost")
    nn_cost = None if not costs else (costs[0] if len(costs) == 1 else costs)
    res = TuneJob(**_nbest_kwargs(kw), **kw, nn_cost=nn_cost, seed=obj["seed"]).run()
    click.echo(res.table())
    if res.report is not None:  # cross-validation and bootstrap, before the best line that scripts tail
        click.echo("\n".join(res.report.lines()))
    b = res.best
    if res.multi:
        click.echo(f"best: WER {b.wer:.2f}% at {res.describe(b)} ({res.search} search: {res.evaluations} "
                   f"{'line minimisations' if res.search == 'line' else 'points'}, {res.hypotheses} hypotheses "
                   f"visited, {res.seconds:.2f} s)")
    else:
        click.echo(f"best: WER {b.wer:.2f}% at interp {b.interp:g}, lm-weight {b.lm_weight:g}, "
                   f"word-ins-penalty {b.word_ins_penalty:g}")
    if kw["out"]:
        plot = f" and {kw['out']}/tune_wer.png" if has_heatmap(res) else " (no heat map for several LMs or a line search)"
        click.echo(f"wrote {kw['out']}/tune.json{plot}")


@main.command("split", short_help="Split N-best lists into shards of whole documents.")
@click.option("--nj", required=True, type=int,
              help="Number of shards (1 .. the number of documents); a document is never split.")
@click.argument("nbest_dir", type=click.Path(exists=True))
@click.argument("out_dir", type=click.Path(file_okay=False))
def split(nj, nbest_dir, out_dir):
    """Split the N-best lists NBEST_DIR (any layout score reads) into OUT_DIR/1 .. OUT_DIR/NJ:
    contiguous runs of whole documents (utt2doc, else utt2spk, else one per utterance),
    balanced by hypotheses, each in the benchmark layout (text, ac_cost, lm_cost,
    utt2doc, ref.txt). Score each shard, then 'merge' the outputs."""
    from .api.shards import SplitJob

    click.echo(SplitJob(nbest=nbest_dir, out=out_dir, nj=nj).run().report())


@main.command("merge", short_help="Merge the outputs of score jobs run on shards.")
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Output folder for the merged text, nn_cost (jobs of several LMs: each nn_cost.NAME, merged "
                   "per name) and (with --ref) wer.json; replaced as a whole.")
@click.option("--ref", type=click.Path(exists=True, dir_okay=False), default=None,
              help="References (Kaldi text) to compute the WER of the merged 1-best.")
@click.argument("job_dirs", nargs=-1, required=True, type=click.Path())
def merge(out, ref, job_dirs):
    """Concatenate the --out folders JOB_DIRS of score jobs (in this order) into one:
    every utterance and hypothesis key at most once; a missing job or file is an
    error and nothing is written. Prints the WER in Kaldi's %WER format with --ref."""
    from .api.shards import MergeJob

    job = MergeJob(jobs=tuple(job_dirs), out=out, ref=ref)
    click.echo(job.run().report(job.out))


@main.command("kaldi-score", short_help="Kaldi's steps/score_kaldi.sh over N-best lists (LMWT x WIP sweep).")
@click.option("--ref", required=True, type=click.Path(exists=True, dir_okay=False),
              help="References: the data folder's text (Kaldi text; a bare key is an empty reference).")
@click.option("--lm-cost", required=True,
              help="Name of the file inside each NBEST_DIR holding the LM-side graph cost of every hypothesis "
                   "('<hyp-key> <cost>', e.g. lmwt.interp); the acoustic cost is the folder's acwt or ac_cost.")
@click.option("--min-lmwt", type=int, default=7, show_default=True, help="Smallest LM weight (integer >= 1).")
@click.option("--max-lmwt", type=int, default=17, show_default=True, help="Largest LM weight (integer >= min).")
@click.option("--word-ins-penalty", default="0.0,0.5,1.0", show_default=True,
              help="Word insertion penalties, comma-separated, in cost per word: positive = penalty (Kaldi's "
                   "sign, the opposite of score's --word-ins-penalty). Kept as written: they name the files.")
@click.option("--hyp-filter", default=None,
              help="Shell command (bash -c) applied to each 1-best text, Kaldi text on stdin and stdout, "
                   "e.g. local/wer_hyp_filter (default: none, i.e. cat).")
@click.option("--ref-filter", default=None,
              help="Shell command (bash -c) applied to --ref, giving scoring_kaldi/test_filt.txt "
                   "(default: none, i.e. cat).")
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="DIR (the decode folder): receives wer_LMWT_WIP and scoring_kaldi/ as score_kaldi.sh writes "
                   "them; other files there are left alone, except old-style wer_?, wer_?? (and cer_), which "
                   "score_kaldi.sh removes too.")
@click.argument("nbest_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
def kaldi_score(ref, lm_cost, min_lmwt, max_lmwt, word_ins_penalty, hyp_filter, ref_filter, out, nbest_dirs):
    """Score N-best archive folders NBEST_DIRS (read in order, concatenated) as Kaldi's
    steps/score_kaldi.sh scores lattices: for every penalty WIP and LM weight LMWT the
    1-best minimises acwt/LMWT + lm_cost + WIP * words; compute-wer --mode=present
    into DIR/wer_LMWT_WIP, utils/best_wer.sh's pick into DIR/scoring_kaldi/best_wer
    (also printed). All files are written as one set."""
    from .api.kaldi_score_job import KaldiScoreJob, check_kaldi_score_options

    try:
        check_kaldi_score_options(min_lmwt, max_lmwt, word_ins_penalty)
    except DataError as exc:
        raise click.UsageError(str(exc)) from None
    job = KaldiScoreJob(ref=ref, lm_cost=lm_cost, nbest_dirs=tuple(nbest_dirs), out=out, min_lmwt=min_lmwt,
                        max_lmwt=max_lmwt, word_ins_penalty=word_ins_penalty, hyp_filter=hyp_filter,
                        ref_filter=ref_filter)
    click.echo(job.run().best_wer_line)


@main.command("table", short_help="Markdown WER table from result files.")
@click.option("--baseline", multiple=True,
              help="Name of a row to compare every other row with: adds P(better than NAME), the paired bootstrap "
                   "probability that a row's 1-best makes fewer word errors (and, for rows with --folds results, "
                   "P(CV better than NAME) for their cross-validated 1-best). Repeat for several.")
@click.option("--ref", type=click.Path(exists=True, dir_okay=False), default=None,
              help="References, to score the 1-best 'text' beside each wer.json:rescored row utterance by "
                   "utterance (its bootstrap columns); tune.json rows carry their own per-utterance errors.")
@_replications_option
@click.argument("rows", nargs=-1, required=True)
@click.pass_obj
def table(obj, baseline, ref, replications, rows):
    """Print a Markdown WER table from result files.

    Each ROW is NAME=PATH, PATH a tune.json (its best point) or a wer.json followed by
    ':first_pass', ':rescored' or ':oracle'. Rows with per-utterance errors also get
    bootstrap 95% intervals (seeded by --seed) and, from a tune.json with --folds, the
    cross-validated WER (docs/evaluation.md).
    """
    from .api import wer_table

    click.echo(wer_table(rows, baselines=baseline, ref=ref, replications=replications, seed=obj["seed"]))


@main.command("info", short_help="Parameter counts and training facts of checkpoints.")
@click.argument("checkpoints", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of a Markdown table.")
def info(checkpoints, as_json):
    """Parameter counts (total and without embeddings), epochs, training time and best
    validation perplexity of CHECKPOINTS, to compare models at equal size."""
    from .api import model_row, model_table

    click.echo("\n".join(json.dumps(model_row(p)) for p in checkpoints) if as_json else model_table(checkpoints))


@main.command("models", short_help="List the registered model names.")
def list_models():
    """List the registered model names with a one-line summary."""
    from .api import MODEL_REGISTRY

    for name in sorted(MODEL_REGISTRY):
        cls = MODEL_REGISTRY[name]
        summary = getattr(cls, "summary", "") or " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        click.echo(f"{name:<18} {summary}")


if __name__ == "__main__":
    main()
