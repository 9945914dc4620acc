"""Command-line interface: each command parses its options, makes one job of
:mod:`nbest_rescore.api` (which checks every option before reading anything), runs it
and prints the result. The options are declared once, in :mod:`nbest_rescore.options`;
their click options are made from those fields (:func:`~.cli_options.options_of`).

Results go to stdout; logs, warnings and progress bars to stderr (and to ``--log-file``).
Exit status 0 on success, 1 for bad input (one clear message, no traceback), 2 for
usage errors. Any unexpected failure is reported in one line too; ``-v`` shows where
it happened.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import sys

import click

from . import api  # its names are imported on first use (PEP 562): the list commands stay torch-free
from .cli_options import options_of
from .errors import DataError
from .options import (AnalyzeOptions, PrepareTextOptions, ConvertOptions, CurvesOptions, FinetuneOptions, InfoOptions, KaldiScoreOptions,
                      MergeOptions, PplOptions, ScoreOptions, SplitOptions, TableOptions, TrainOptions, TuneOptions)
from .os_errors import os_error_message
from .progress import Progress, log as progress_log
from .training.preemption import EXIT_PREEMPTED, Preempted
from .threads import prefer_passive_wait

prefer_passive_wait()  # before torch is imported: idle OpenMP threads sleep (nbest_rescore.threads)

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
        except Preempted as exc:  # (train) the state is saved: a distinct status for schedulers and scripts
            click.echo(f"Stopped: {exc}", err=True)
            ctx.exit(EXIT_PREEMPTED)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:  # stdout closed early (``| head``): stop quietly, as Unix tools do
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(141)
        except OSError as exc:  # one the writers and readers did not word themselves (os_errors.py)
            log.log(logging.ERROR if (ctx.obj or {}).get("verbose") else logging.DEBUG, "OS error", exc_info=True)
            raise click.ClickException(_os_error_line(exc)) from None
        except MemoryError:
            log.debug("out of memory", exc_info=True)
            raise click.ClickException("out of memory: lower --batch-size / --max-tokens, or use a machine with "
                                       "more memory") from None
        except Exception as exc:  # the last resort: never a traceback for the user
            verbose = (ctx.obj or {}).get("verbose", 0)
            log.log(logging.ERROR if verbose else logging.DEBUG, "unexpected error", exc_info=True)
            hint = "" if verbose else " (run with -v to see where it happened)"
            raise click.ClickException(f"unexpected {type(exc).__name__}: {exc}{hint}") from None


def _os_error_line(exc: OSError) -> str:
    """The one line for an OSError that reached the command group. "No space" naming no
    file while stdout goes to a file on a full disk is the results going there: that
    file is named (Linux) and stdout is closed, so that exiting does not fail again."""
    if exc.filename is None and exc.errno == errno.ENOSPC:
        try:
            fd_link = f"/proc/self/fd/{sys.stdout.fileno()}"
            target = os.readlink(fd_link) if os.path.isfile(fd_link) else None
            full = target is not None and shutil.disk_usage(fd_link).free < 1 << 20
        except (OSError, ValueError, AttributeError):
            full = False
        if full:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return os_error_message(exc, "stdout", file=target, writing=True)
    return os_error_message(exc)


class _LogFile(logging.FileHandler):
    """``--log-file``: a write that fails (a full disk ...) is reported once, in one
    line on stderr, and the file gets no more lines (instead of a traceback per line)."""

    failed = False

    def emit(self, record):
        if not self.failed:
            super().emit(record)

    def handleError(self, record):
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            return super().handleError(record)
        self.failed = True
        sys.stderr.write(f"warning: {os_error_message(exc, self.baseFilename, '--log-file', writing=True)}; "
                         f"the log goes on without it\n")


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
    # progress lines (INFO, only when stderr is not a terminal) show without -v
    handler.setLevel(min(level, logging.INFO))
    handler.addFilter(lambda r: r.levelno >= level or r.name == progress_log.name)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(logging.DEBUG if log_file else min(level, logging.INFO))
    log.propagate = False
    if log_file:
        try:
            fh = _LogFile(log_file, encoding="utf-8")
        except OSError as exc:
            raise click.BadParameter(f"cannot open it: {os_error_message(exc, log_file, writing=True)}",
                                     param_hint="--log-file") from None
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(fh)
        log.debug("command line: %s", " ".join(sys.argv))
    explicit_seed = ctx.get_parameter_source("seed") not in (None, click.core.ParameterSource.DEFAULT)
    ctx.obj = {"verbose": verbose, "seed": seed, "explicit_seed": explicit_seed}


_no_progress = click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
_SCORE = ("lm nbest plain_ac plain_ngram plain_costs plain_utt2doc plain_utt_ids nemo_manifest acoustic_scale "
          "word_ins_penalty out ref lm_weight interp nn_weights weights_file ngram_arpa history skip_confident "
          "prune_mass device batch_size max_tokens span_hyps scoring output quantize dtype softmax_impl max_ngram_order "
          "threads")
_CACHE = "cache_size cache_theta cache_lambda"
_HF = "context_tokens trust_remote_code allow_pickle"
_TUNE = ("nbest plain_ac plain_ngram plain_costs plain_utt2doc plain_utt_ids nemo_manifest acoustic_scale "
         "word_ins_penalty ref nn_cost search restarts interps lm_weights word_ins_penalties folds fold_seed "
         "skip_budget order_cost order_budget replications out")


@main.command(short_help="Train a language model and save a checkpoint.")
@options_of(TrainOptions, "config out max_words max_epochs max_seconds device dtype threads resume init_from "
                          "stop_after_epochs checkpoint_interval")
@_no_progress
@click.pass_obj
def train(obj, no_progress, **kw):
    """Train a language model at corpus level (state carried within documents) and
    save a checkpoint. Prints a JSON summary with the learning curve ("curve": every
    validation point; plot it with nbest-rescore curves).

    SIGTERM or SIGINT (Slurm preemption, Ctrl-C) finishes the current step, writes
    <out>.last.pt and exits with status 75; --resume continues exactly."""
    job = api.TrainJob(**kw, seed=obj["seed"] if obj["explicit_seed"] else None)
    res = job.run(progress=not no_progress)
    if res.rank != 0:  # torchrun: every rank trains, rank 0 reports
        return
    click.echo(json.dumps({"checkpoint": job.out, "epochs": res.epochs, "best_valid_ppl": res.best_valid_ppl,
                           "train_ppl": res.train_ppl, "seconds": round(res.seconds, 1),
                           "words_per_s": round(res.words_per_s, 1), "curve": res.curve}, indent=2))


@main.command("prepare-text", short_help="Prepare LM text once into a memory-mapped token store for train.")
@options_of(PrepareTextOptions, "config out text valid jobs")
@_no_progress
def prepare_text(no_progress, **kw):
    """Encode the training text (a file, or a Kaldi rnnlm-style data directory of
    NAME.txt sources and dev.txt) with the config's vocabulary policy (or hf tokenizer)
    into a token store: the ids in a memory-mapped file, the document offsets, the
    vocabulary with counts and a manifest (sources with sizes and checksums). Two
    streaming passes on worker processes; memory does not grow with the text; the
    store appears whole or not at all, and an up-to-date store is reused. Train on it
    with data.train: OUT. Prints JSON."""
    store, reused = api.PrepareTextJob(**kw).run(progress=not no_progress)
    click.echo(json.dumps({"store": store.path, "reused": reused, "kind": store.kind, "ids": len(store.ids),
                           "dtype": store.ids.dtype.name, "documents": len(store.docs) - 1,
                           "sources": [{"name": s.name, "role": s.role, "words": s.words, "sentences": s.sentences,
                                        "documents": s.documents[1] - s.documents[0]} for s in store.sources]},
                          indent=2))


@main.command(short_help="Corpus-level perplexity and OOV rate of a text.")
@options_of(PplOptions, f"lm text device batch_size max_words threads {_CACHE} {_HF} prompt")
@_no_progress
def ppl(no_progress, **kw):
    """Corpus-level perplexity (natural log inside; the state is carried within a
    document and reset between documents) and the OOV rate; for an hf: LM, per word
    (every word and one end per sentence, as the word-level LMs count) after the
    document's previous sentences (--context-tokens), with its tokens per word. Prints JSON."""
    bar = Progress("tok", no_progress)
    rep, cache = api.PerplexityJob(**kw).run(progress=bar)
    bar.close()
    click.echo(json.dumps({**rep.to_dict(), "cache": cache}, indent=2))


@main.command(short_help="Attention analysis of an AMN or window model.")
@options_of(AnalyzeOptions, "lm text out max_words device")
def analyze(**kw):
    """Attention analysis (thesis 000 section 6.2; 001 Fig. 3): attention entropy,
    memcell similarity and per-memcell perplexity, or mean attention by window position."""
    res, paths = api.AnalyzeJob(**kw).run()
    click.echo(json.dumps(res.summary(), indent=2))
    click.echo(f"wrote {', '.join(paths)}")


_WEIGHT_OPTIONS = ("acoustic_scale", "lm_weight", "interp", "word_ins_penalty", "nn_weights")


@main.command(short_help="Rescore N-best lists with one or several neural LMs.", epilog=SCORE_FORMULA)
@options_of(ScoreOptions, _SCORE)
@_no_progress
@options_of(ScoreOptions, f"{_CACHE} {_HF} prompt context_file")
@click.pass_obj
def score(obj, no_progress, **kw):
    """Rescore N-best lists with one or several neural LMs conditioned on the 1-best
    history of the document; write (or print) the new 1-best and the NN costs, and
    report WER."""
    from .api.score_weights import lm_histories, score_weights

    ctx = click.get_current_context()
    try:  # usage errors found before anything is read: the --history count, the weights (sum, range, one per --lm)
        lm_histories(kw["history"], len(kw["lm"]))
        if not kw["weights_file"]:
            score_weights(*(kw[k] for k in _WEIGHT_OPTIONS), len(kw["lm"]))
    except DataError as exc:
        raise click.UsageError(str(exc), ctx) from None
    given = [k for k in _WEIGHT_OPTIONS if ctx.get_parameter_source(k) != click.core.ParameterSource.DEFAULT]
    if kw["weights_file"] and given:
        log.warning("--weights %s overrides %s", kw["weights_file"],
                    ", ".join("--" + k.replace("_", "-") for k in given))
    job = api.ScoreJob(**kw, seed=obj["seed"])
    bar = Progress("hyp", no_progress)
    res = job.run(progress=bar)
    bar.close()
    if job.out is None:  # the new 1-best is the output; the report goes to stderr
        click.echo("".join(" ".join((utt, *words)) + "\n" for utt, words in res.one_best.items()), nl=False)
    click.echo(res.report(job.out), err=job.out is None)


@main.command(short_help="Tune the n-gram/NN LM weights, LM weight and insertion penalty.")
@options_of(TuneOptions, _TUNE)
@click.pass_obj
def tune(obj, **kw):
    """Search the weights of the n-gram and of one or more neural LMs, the LM weight
    delta (and the word insertion penalty) by WER on stored NN costs: an exhaustive grid
    or Och's exact line search (--search line, seeded by --seed). No neural LM is run.
    Also reports the bootstrap interval of the best point's WER (seeded by --seed) and,
    with --folds, the cross-validated WER (docs/evaluation.md)."""
    costs = kw.pop("nn_cost")
    nn_cost = None if not costs else (costs[0] if len(costs) == 1 else costs)
    res = api.TuneJob(**kw, nn_cost=nn_cost, seed=obj["seed"]).run()
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
        plot = f" and {kw['out']}/tune_wer.png" if not res.multi else " (no heat map for several LMs or a line search)"
        click.echo(f"wrote {kw['out']}/tune.json{plot}")


_FINETUNE = ("lm nbest plain_ac plain_ngram plain_costs plain_utt2doc plain_utt_ids nemo_manifest ref "
             "acoustic_scale lm_weight interp word_ins_penalty weights_file out epochs lr top_n utts_per_step "
             "posterior_scale posterior_dropout text max_text_words ce_weight eval_nbest eval_ref folds fold_seed replications "
             "threads")


@main.command(short_help="Fine-tune a checkpoint by minimum word error rate on N-best lists.")
@options_of(FinetuneOptions, _FINETUNE)
@click.pass_obj
def finetune(obj, **kw):
    """Fine-tune a checkpoint for the rescoring decision: minimise the expected word
    errors of each N-best list under the posterior of its combined score at the given
    weights (MWER, docs/finetune.md), with a cross-entropy term on LM text. With
    --folds K, K models each fine-tuned on the other folds' documents: the held-out WER
    against the checkpoint's, with the paired bootstrap (seeded by --seed)."""
    res = api.FinetuneJob(**kw, seed=obj["seed"]).run()
    if "wer" in res:
        where = f"{res['folds']} folds" if "folds" in res else res["eval_nbest"]
        line = f"held-out WER at the given weights ({where}): checkpoint {res['wer']['base']:.2f}%, " \
               f"MWER fine-tuned {res['wer']['mwer']:.2f}%"
        if "p_mwer_better_than_base" in res:
            line += f", P(fine-tuned better) = {res['p_mwer_better_than_base']:.4f}"
        for point in res.get("posterior_scales", ()):
            click.echo(f"posterior scale {point['alpha']:g}: held-out WER {point['wer']['mwer']:.2f}%")
        if "posterior_scales" in res:
            scales = ", ".join(f"{f['posterior_scale']:g}" for f in res["per_fold"])
            line += f" at each fold's posterior scale ({scales})"
        click.echo(line)
    click.echo(f"wrote {kw['out']}/finetune.json")


@main.command("split", short_help="Split N-best lists into shards of whole documents.")
@options_of(SplitOptions, "nj")
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
@options_of(MergeOptions, "out ref")
@click.argument("job_dirs", nargs=-1, required=True, type=click.Path())
def merge(out, ref, job_dirs):
    """Concatenate the --out folders JOB_DIRS of score jobs (in this order) into one:
    every utterance and hypothesis key at most once; a missing job or file is an
    error and nothing is written. Prints the WER in Kaldi's %WER format with --ref."""
    from .api.shards import MergeJob

    job = MergeJob(jobs=tuple(job_dirs), out=out, ref=ref)
    click.echo(job.run().report(job.out))


@main.command("convert", short_help="Convert N-best lists between Kaldi, plain and JSON Lines.")
@options_of(ConvertOptions, "nbest to out drop_scores plain_ac plain_ngram plain_costs plain_utt2doc plain_utt_ids "
                            "nemo_manifest")
def convert(**kw):
    """Read the N-best lists --nbest (a Kaldi N-best directory, a JSON Lines file or a
    plain N-best file, as score reads them) and write them --to kaldi, plain or jsonl
    at --out, one span of whole documents at a time (memory follows the span, not the
    set), as one set: the files appear whole or not at all (docs/formats.md). Costs are
    kept exactly, except that the Kaldi files hold 6 decimals. A JSON Lines file named
    *.gz is read and written gzip-compressed."""
    click.echo(api.ConvertJob(**kw).run().report())


@main.command("kaldi-score", short_help="Kaldi's steps/score_kaldi.sh over N-best lists (LMWT x WIP sweep).")
@options_of(KaldiScoreOptions, "ref lm_cost min_lmwt max_lmwt word_ins_penalty hyp_filter ref_filter out")
@click.argument("nbest_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
def kaldi_score(nbest_dirs, **kw):
    """Score N-best archive folders NBEST_DIRS (read in order, concatenated) as Kaldi's
    steps/score_kaldi.sh scores lattices: for every penalty WIP and LM weight LMWT the
    1-best minimises acwt/LMWT + lm_cost + WIP * words; compute-wer --mode=present
    into DIR/wer_LMWT_WIP, utils/best_wer.sh's pick into DIR/scoring_kaldi/best_wer
    (also printed). All files are written as one set."""
    from .api.kaldi_score_job import KaldiScoreJob, check_kaldi_score_options

    try:
        check_kaldi_score_options(kw["min_lmwt"], kw["max_lmwt"], kw["word_ins_penalty"])
    except DataError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(KaldiScoreJob(**kw, nbest_dirs=tuple(nbest_dirs)).run().best_wer_line)


@main.command("table", short_help="Markdown WER table from result files.")
@options_of(TableOptions, "baseline ref replications")
@click.argument("rows", nargs=-1, required=True)
@click.pass_obj
def table(obj, baseline, ref, replications, rows):
    """Print a Markdown WER table from result files.

    Each ROW is NAME=PATH, PATH a tune.json (its best point) or a wer.json followed by
    ':first_pass', ':rescored' or ':oracle'. Rows with per-utterance errors also get
    bootstrap 95% intervals (seeded by --seed) and, from a tune.json with --folds, the
    cross-validated WER (docs/evaluation.md).
    """
    click.echo(api.wer_table(rows, baselines=baseline, ref=ref, replications=replications, seed=obj["seed"]))


@main.command("curves", short_help="Plot learning curves of training runs (PNG).")
@options_of(CurvesOptions, "out label title")
@click.argument("runs", nargs=-1, required=True)
def curves(**kw):
    """Plot the learning curves of RUNS: the JSON summaries that nbest-rescore train
    printed (or their checkpoints, .pt): validation perplexity against training words
    and against CPU minutes, one line per run, the best point circled."""
    click.echo(api.CurvesJob(**kw).run())


def _checkpoint_paths(ctx, param, values):
    """CHECKPOINTS: each an existing file, or ``hf:PATH`` (checked when it is loaded)."""
    for v in values:
        if not v.startswith("hf:") and not os.path.isfile(v):
            raise click.BadParameter(f"{v!r}: no such checkpoint file (or hf:PATH for a Hugging Face model)",
                                     ctx, param)
    return values


@main.command("info", short_help="Parameter counts and training facts of checkpoints and hf: models.")
@click.argument("checkpoints", nargs=-1, required=True, callback=_checkpoint_paths)
@options_of(InfoOptions, "as_json")
def info(checkpoints, as_json):
    """Model, vocabulary, parameter counts (total and without embeddings), epochs,
    training time, best validation perplexity, longest input and weight dtype of
    CHECKPOINTS (.pt files, or hf:PATH: a Hugging Face model folder, loaded once), to
    compare models at equal size."""
    click.echo("\n".join(json.dumps(api.model_row(p)) for p in checkpoints) if as_json
               else api.model_table(checkpoints))


@main.command("models", short_help="List the registered model names.")
def list_models():
    """List the registered model names with a one-line summary."""
    for name, cls in sorted(api.MODEL_REGISTRY.items()):
        summary = getattr(cls, "summary", "") or " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        click.echo(f"{name:<18} {summary}")


if __name__ == "__main__":
    main()
