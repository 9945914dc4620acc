"""Command-line interface: thin click commands that call the library.

Results go to stdout; logs and progress bars to stderr. Exit status 0 on success,
1 for bad input (a clear message, no traceback), 2 for usage errors.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import sys

import click

from .errors import DataError, examples

HISTORY_CHOICES = ["first-pass", "rescored", "interpolated", "none"]


def _data_errors(fn):
    """Turn DataError (bad input) into a click error: message and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except DataError as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper


def _float_list(spec: str):
    """``"a:b:step"`` (inclusive range) or ``"x,y,z"`` -> list of floats."""
    try:
        if ":" in spec:
            a, b, s = (float(x) for x in spec.split(":"))
            if s <= 0:
                raise ValueError
            n = int(round((b - a) / s)) + 1
            return [round(a + i * s, 10) for i in range(max(n, 1))]
        return [float(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{spec!r}: expected 'start:stop:step' (e.g. 0:1:0.1) or 'x,y,z'") from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-v info, -vv debug).")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed (torch, numpy).")
@click.version_option(package_name="nbest-rescore")
def main(verbose, seed):
    """Rescore Kaldi-style N-best lists with corpus-level neural language models."""
    level = logging.WARNING - 10 * min(verbose + 1, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    os.environ.setdefault("NBEST_RESCORE_SEED", str(seed))
    import random

    random.seed(seed)


def _seed():
    import numpy as np
    import torch

    s = int(os.environ.get("NBEST_RESCORE_SEED", "0"))
    torch.manual_seed(s)
    np.random.seed(s)


@main.command()
@click.option("--config", "config_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="YAML training config (see examples/ and recipes/abc-nbest/conf/).")
@click.option("--out", required=True, type=click.Path(dir_okay=False),
              help="Checkpoint to write (.pt): best weights, rewritten after every epoch; the resumable "
                   "state goes beside it as <name>.last.pt.")
@click.option("--max-words", type=int, default=None, help="Train on a prefix of this many words (overrides the config).")
@click.option("--max-epochs", type=int, default=None, help="Override the config's max_epochs.")
@click.option("--max-seconds", type=float, default=None, help="Stop training after this many seconds (whole run).")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16"]), default=None,
              help="Override optim.dtype: bfloat16 = mixed precision under CUDA autocast.")
@click.option("--threads", type=int, default=None, help="CPU threads for torch (default: all cores).")
@click.option("--resume", "resume", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Continue the run saved in this <out>.last.pt (same optimiser state and schedule).")
@click.option("--init-from", "init_from", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Start from this model checkpoint's weights and vocabulary (fine-tuning).")
@click.option("--stop-after-epochs", type=click.IntRange(min=1), default=None,
              help="End this run after N epochs (the schedule still plans max_epochs; --resume continues).")
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
@click.pass_context
@_data_errors
def train(ctx, config_path, out, max_words, max_epochs, max_seconds, device, dtype, threads, resume, init_from,
          stop_after_epochs, no_progress):
    """Train a language model at corpus level and save a checkpoint."""
    _seed()
    from .config import load_train_config
    from .device import resolve_device
    from .training.trainer import train as run_train

    cfg = load_train_config(config_path)
    group = ctx.parent
    if group is not None and group.get_parameter_source("seed") not in (None, click.core.ParameterSource.DEFAULT):
        cfg.optim.seed = group.params["seed"]  # an explicit --seed wins over the config's optim.seed
    if max_words is not None:
        cfg.data.max_words = max_words
    if max_epochs is not None:
        cfg.optim.max_epochs = max_epochs
    if max_seconds is not None:
        cfg.optim.max_seconds = max_seconds
    if threads is not None:
        cfg.optim.threads = threads
    if dtype is not None:
        cfg.optim.dtype = dtype
    res = run_train(cfg, out, resolve_device(device), progress=not no_progress, resume=resume,
                    init_from=init_from, stop_after_epochs=stop_after_epochs)
    click.echo(json.dumps({"checkpoint": out, "epochs": res.epochs, "best_valid_ppl": res.best_valid_ppl,
                           "train_ppl": res.train_ppl, "seconds": round(res.seconds, 1),
                           "words_per_s": round(res.words_per_s, 1)}, indent=2))


def _cache_options(fn):
    """``--cache-size/--cache-theta/--cache-lambda``: the neural continuous cache
    (:mod:`nbest_rescore.models.cache`) around the loaded model."""
    for opt in reversed([
        click.option("--cache-size", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Neural cache: last M (features, next word) pairs kept; 0 = no cache."),
        click.option("--cache-theta", type=float, default=0.3, show_default=True,
                     help="Neural cache: theta in exp(theta h_t . h_i) (flatness of the cache distribution)."),
        click.option("--cache-lambda", type=click.FloatRange(0, 1, max_open=True), default=0.1, show_default=True,
                     help="Neural cache: weight lambda of p_cache in (1 - lambda) p_model + lambda p_cache."),
    ]):
        fn = opt(fn)
    return fn


_threads_option = click.option("--threads", type=click.IntRange(min=1), default=None,
                               help="CPU threads for torch (default: torch's default).")


def _set_threads(threads):
    """torch.set_num_threads(threads) when given; returns the number in use."""
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


@main.command()
@click.option("--lm", "lm_path", required=True, type=click.Path(exists=True, dir_okay=False), help="Checkpoint (.pt).")
@click.option("--text", "text_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Text: one sentence per line, blank lines between documents.")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
@click.option("--batch-size", type=int, default=16, show_default=True, help="Documents scored in parallel.")
@click.option("--max-words", type=int, default=None, help="Only the first N words of the text.")
@_threads_option
@_cache_options
@_data_errors
def ppl(lm_path, text_path, device, batch_size, max_words, threads, cache_size, cache_theta, cache_lambda):
    """Corpus-level perplexity (state carried within documents) and OOV rate."""
    from .device import resolve_device
    from .evaluation.perplexity import corpus_perplexity
    from .io.lm_text import read_lm_text
    from .models import load_model
    from .models.cache import cache_settings, with_cache

    dev = resolve_device(device)
    _set_threads(threads)
    model, vocab, _ = load_model(lm_path, dev)
    model = with_cache(model, cache_size, cache_theta, cache_lambda)
    docs = read_lm_text(text_path, max_words)
    rep = corpus_perplexity(model, vocab, docs, batch_size=batch_size, device=dev)
    click.echo(json.dumps({**rep.to_dict(), "cache": cache_settings(model)}, indent=2))


@main.command()
@click.option("--lm", "lm_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Checkpoint (.pt) of an amn, attention, key-value or key-value-predict model.")
@click.option("--text", "text_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Text: one sentence per line, blank lines between documents.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Output directory for analysis.json and the PNG plots.")
@click.option("--max-words", type=click.IntRange(min=1), default=None, help="Only the first N words of the text.")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
@_data_errors
def analyze(lm_path, text_path, out_dir, max_words, device):
    """Attention analysis (thesis 000 section 6.2; 001 Fig. 3): entropy, memcell
    similarity and per-memcell perplexity, or mean attention by window position."""
    from .device import resolve_device
    from .evaluation.analysis import analyze_model, write_analysis
    from .io.lm_text import read_lm_text
    from .models import load_model

    dev = resolve_device(device)
    model, vocab, _ = load_model(lm_path, dev)
    docs = read_lm_text(text_path, max_words)
    res = analyze_model(model, vocab, docs, device=dev)
    paths = write_analysis(res, out_dir, settings={"lm": lm_path, "text": text_path, "max_words": max_words})
    click.echo(json.dumps(res.summary(), indent=2))
    click.echo(f"wrote {', '.join(paths)}")


def _load_nbest(nbest, plain_ac, plain_ngram, plain_costs):
    from .io.kaldi_nbest import read_kaldi_nbest_dir
    from .io.plain_nbest import read_plain_nbest

    log = logging.getLogger("nbest_rescore").info
    if os.path.isdir(nbest):
        return read_kaldi_nbest_dir(nbest, log=log)
    if not (plain_ac and plain_ngram):
        raise DataError(f"--nbest {nbest} is a file: the plain N-best format needs --plain-ac and --plain-ngram "
                        f"(one score per line), or pass a Kaldi N-best directory")
    return read_plain_nbest(nbest, plain_ac, plain_ngram, scores_are_costs=plain_costs, log=log)


_nbest_options = [
    click.option("--nbest", required=True, type=click.Path(exists=True),
                 help="Kaldi N-best directory (text|words_text|words+words.txt, ac_cost|acwt, lm_cost|lmwt.*), "
                      "or a plain N-best file (thesis Fig. 5.1) with --plain-ac/--plain-ngram."),
    click.option("--plain-ac", type=click.Path(exists=True, dir_okay=False), default=None,
                 help="Plain format: acoustic scores, one per line."),
    click.option("--plain-ngram", type=click.Path(exists=True, dir_okay=False), default=None,
                 help="Plain format: n-gram scores, one per line."),
    click.option("--plain-costs", is_flag=True, help="Plain format: the numbers are costs (-log), not scores."),
    click.option("--acoustic-scale", type=float, default=1.0, show_default=True,
                 help="Multiplies the acoustic log-likelihood (-ac_cost)."),
    click.option("--word-ins-penalty", type=float, default=-0.629606, show_default=True,
                 help="Added per word (negative = penalty)."),
]


def _apply(options):
    def deco(fn):
        for opt in reversed(options):
            fn = opt(fn)
        return fn

    return deco


@main.command()
@click.option("--lm", "lm_path", required=True, type=click.Path(exists=True, dir_okay=False), help="Checkpoint (.pt).")
@_apply(_nbest_options)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output directory.")
@click.option("--ref", "ref_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="References (Kaldi text) to report WER.")
@click.option("--lm-weight", type=float, default=9.5, show_default=True, help="Grammar scale delta.")
@click.option("--interp", type=click.FloatRange(0, 1), default=0.5, show_default=True,
              help="Interpolation weight lambda of the n-gram (1 = n-gram only).")
@click.option("--ngram-arpa", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Recompute n-gram costs from this ARPA file (kenlm) instead of the lists' lm_cost.")
@click.option("--history", type=click.Choice(HISTORY_CHOICES), default="first-pass", show_default=True,
              help="Which 1-best of the previous utterances conditions the NN LM.")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
@click.option("--batch-size", type=int, default=256, show_default=True, help="Most hypotheses per forward pass.")
@click.option("--max-tokens", type=int, default=8192, show_default=True, help="Most padded tokens per forward pass.")
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
@_threads_option
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
@_cache_options
@_data_errors
def score(lm_path, nbest, plain_ac, plain_ngram, plain_costs, acoustic_scale, word_ins_penalty, out_dir, ref_path,
          lm_weight, interp, ngram_arpa, history, device, batch_size, max_tokens, scoring, output, quantize, dtype,
          threads, no_progress, cache_size, cache_theta, cache_lambda):
    """Rescore N-best lists with a neural LM; write the new 1-best and NN costs."""
    _seed()
    from tqdm import tqdm

    from .device import resolve_device
    from .io.references import read_references
    from .models import load_model
    from .models.cache import cache_settings, with_cache
    from .rescoring.combine import Weights
    from .rescoring.ngram import NgramScorer
    from .rescoring.pipeline import format_wer_table, score_nbest
    from .rescoring.scorer import NnScorer, check_inference_options

    check_inference_options(device, output, quantize, dtype)
    dev = resolve_device(device)
    n_threads = _set_threads(threads)
    lists = _load_nbest(nbest, plain_ac, plain_ngram, plain_costs)
    refs = read_references(ref_path) if ref_path else None
    if refs is not None:
        missing = [u for u in lists.utt_ids if u not in refs]
        if missing:
            raise DataError(f"{len(missing)} utterances of {nbest} have no reference in {ref_path}: "
                            f"{examples(missing)}")
    model, vocab, model_info = load_model(lm_path, dev)
    model = with_cache(model, cache_size, cache_theta, cache_lambda)
    weights = Weights(acoustic_scale, lm_weight, interp, word_ins_penalty)
    ngram_cost = None
    if ngram_arpa:
        import numpy as np

        ng = NgramScorer(ngram_arpa)
        ngram_cost = np.concatenate([ng.costs(u.hyps) for u in lists.utterances])
    scorer = NnScorer(model, vocab, dev, batch_size, max_tokens, mode=scoring, output=output, quantize=quantize,
                      dtype=dtype, model_info=model_info)
    bar = tqdm(total=lists.num_hyps(), unit="hyp", disable=no_progress, file=sys.stderr)

    def progress(n):
        bar.update(n - bar.n)

    summary = score_nbest(lists, scorer, weights, out_dir, history=history, refs=refs, ngram_cost=ngram_cost,
                          progress=progress, settings={"lm": lm_path, "nbest": nbest, "cache": cache_settings(model),
                                                    "scoring": {**scorer.settings(), "threads": n_threads}})
    bar.close()
    click.echo(f"wrote {out_dir}/text and {out_dir}/nn_cost ({summary['hypotheses']} hypotheses, "
               f"{summary['seconds']:.1f} s, {summary['tokens_per_s']:.0f} tokens/s, history {history})")
    if summary["cache"]:
        click.echo("neural cache: size {size}, theta {theta:g}, lambda {lambda:g}".format(**summary["cache"]))
    if (output, quantize, dtype) != ("softmax", "none", "float32"):
        click.echo(f"approximate NN costs: output {output}, quantize {quantize}, dtype {dtype}")
    click.echo(f"N-best words outside the NN vocabulary (scored as <unk>): {summary['nn_oov_rate']:.2f}% of tokens, "
               f"{100 - summary['nn_vocab_coverage_of_list_words']:.2f}% of distinct words")
    if refs is not None:
        click.echo(format_wer_table(summary["wer"]))


@main.command()
@_apply(_nbest_options)
@click.option("--ref", "ref_path", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--nn-cost", "nn_cost_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="NN costs written by 'score' (OUTDIR/nn_cost). Without it only lambda = 1 is searched.")
@click.option("--interps", default="0:1:0.1", show_default=True, help="lambda grid: start:stop:step or a,b,c.")
@click.option("--lm-weights", default="5:14:0.5", show_default=True, help="LM weight (delta) grid.")
@click.option("--word-ins-penalties", default=None,
              help="Word insertion penalty grid (default: only --word-ins-penalty).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Write tune.json and the WER heat map tune_wer.png here.")
@_data_errors
def tune(nbest, plain_ac, plain_ngram, plain_costs, acoustic_scale, word_ins_penalty, ref_path, nn_cost_path,
         interps, lm_weights, word_ins_penalties, out_dir):
    """Grid-search lambda, delta (and the word insertion penalty) on stored NN costs."""
    from .evaluation.plots import plot_wer_heatmap
    from .evaluation.tuning import tune_grid
    from .io.atomic import atomic_write
    from .io.references import read_references
    from .io.score_ark import read_cost_ark

    lists = _load_nbest(nbest, plain_ac, plain_ngram, plain_costs)
    refs = read_references(ref_path)
    nn = read_cost_ark(nn_cost_path) if nn_cost_path else None
    lams = _float_list(interps) if nn is not None else [1.0]
    wips = _float_list(word_ins_penalties) if word_ins_penalties else [word_ins_penalty]
    res = tune_grid(lists, refs, nn, lams, _float_list(lm_weights), wips, acoustic_scale)
    click.echo(res.table())
    b = res.best
    click.echo(f"best: WER {b.wer:.2f}% at interp {b.interp:g}, lm-weight {b.lm_weight:g}, "
               f"word-ins-penalty {b.word_ins_penalty:g}")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with atomic_write(os.path.join(out_dir, "tune.json")) as f:
            json.dump(res.to_dict(), f, indent=2)
        plot_wer_heatmap(res, os.path.join(out_dir, "tune_wer.png"))
        click.echo(f"wrote {out_dir}/tune.json and {out_dir}/tune_wer.png")


@main.command("table")
@click.argument("rows", nargs=-1, required=True)
@_data_errors
def table(rows):
    """Print a Markdown WER table from result files.

    Each ROW is NAME=PATH, PATH a tune.json (its best point) or a wer.json followed by
    ':first_pass', ':rescored' or ':oracle'.
    """
    from .evaluation.report import wer_table

    click.echo(wer_table(rows))


@main.command("info")
@click.argument("checkpoints", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of a Markdown table.")
@_data_errors
def info(checkpoints, as_json):
    """Parameter counts (total and without embeddings), epochs, training time and best
    validation perplexity of CHECKPOINTS, to compare models at equal size."""
    from .evaluation.report import model_row, model_table

    if as_json:
        for p in checkpoints:
            click.echo(json.dumps(model_row(p)))
    else:
        click.echo(model_table(checkpoints))


@main.command("models")
def list_models():
    """List the registered model names."""
    from .models import MODEL_REGISTRY

    for name in sorted(MODEL_REGISTRY):
        cls = MODEL_REGISTRY[name]
        summary = getattr(cls, "summary", "") or " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        click.echo(f"{name:<18} {summary}")


if __name__ == "__main__":
    main()
