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
              help="YAML training config (see examples/).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Checkpoint to write (.pt).")
@click.option("--max-words", type=int, default=None, help="Train on a prefix of this many words (overrides the config).")
@click.option("--max-epochs", type=int, default=None, help="Override the config's max_epochs.")
@click.option("--max-seconds", type=float, default=None, help="Stop training after this many seconds.")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
@click.option("--threads", type=int, default=None, help="CPU threads for torch (default: all cores).")
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
@_data_errors
def train(config_path, out, max_words, max_epochs, max_seconds, device, threads, no_progress):
    """Train a language model at corpus level and save a checkpoint."""
    _seed()
    from .config import load_train_config
    from .device import resolve_device
    from .training.trainer import train as run_train

    cfg = load_train_config(config_path)
    if max_words is not None:
        cfg.data.max_words = max_words
    if max_epochs is not None:
        cfg.optim.max_epochs = max_epochs
    if max_seconds is not None:
        cfg.optim.max_seconds = max_seconds
    if threads is not None:
        cfg.optim.threads = threads
    res = run_train(cfg, out, resolve_device(device), progress=not no_progress)
    click.echo(json.dumps({"checkpoint": out, "epochs": res.epochs, "best_valid_ppl": res.best_valid_ppl,
                           "train_ppl": res.train_ppl, "seconds": round(res.seconds, 1),
                           "words_per_s": round(res.words_per_s, 1)}, indent=2))


@main.command()
@click.option("--lm", "lm_path", required=True, type=click.Path(exists=True, dir_okay=False), help="Checkpoint (.pt).")
@click.option("--text", "text_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Text: one sentence per line, blank lines between documents.")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
@click.option("--batch-size", type=int, default=16, show_default=True, help="Documents scored in parallel.")
@click.option("--max-words", type=int, default=None, help="Only the first N words of the text.")
@_data_errors
def ppl(lm_path, text_path, device, batch_size, max_words):
    """Corpus-level perplexity (state carried within documents) and OOV rate."""
    from .device import resolve_device
    from .evaluation.perplexity import corpus_perplexity
    from .io.lm_text import read_lm_text
    from .models import load_model

    dev = resolve_device(device)
    model, vocab, _ = load_model(lm_path, dev)
    docs = read_lm_text(text_path, max_words)
    rep = corpus_perplexity(model, vocab, docs, batch_size=batch_size, device=dev)
    click.echo(json.dumps(rep.to_dict(), indent=2))


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
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
@_data_errors
def score(lm_path, nbest, plain_ac, plain_ngram, plain_costs, acoustic_scale, word_ins_penalty, out_dir, ref_path,
          lm_weight, interp, ngram_arpa, history, device, batch_size, max_tokens, no_progress):
    """Rescore N-best lists with a neural LM; write the new 1-best and NN costs."""
    _seed()
    from tqdm import tqdm

    from .device import resolve_device
    from .io.references import read_references
    from .models import load_model
    from .rescoring.combine import Weights
    from .rescoring.ngram import NgramScorer
    from .rescoring.pipeline import format_wer_table, score_nbest
    from .rescoring.scorer import NnScorer

    dev = resolve_device(device)
    lists = _load_nbest(nbest, plain_ac, plain_ngram, plain_costs)
    refs = read_references(ref_path) if ref_path else None
    if refs is not None:
        missing = [u for u in lists.utt_ids if u not in refs]
        if missing:
            raise DataError(f"{len(missing)} utterances of {nbest} have no reference in {ref_path}: "
                            f"{examples(missing)}")
    model, vocab, _ = load_model(lm_path, dev)
    weights = Weights(acoustic_scale, lm_weight, interp, word_ins_penalty)
    ngram_cost = None
    if ngram_arpa:
        import numpy as np

        ng = NgramScorer(ngram_arpa)
        ngram_cost = np.concatenate([ng.costs(u.hyps) for u in lists.utterances])
    scorer = NnScorer(model, vocab, dev, batch_size, max_tokens)
    bar = tqdm(total=lists.num_hyps(), unit="hyp", disable=no_progress, file=sys.stderr)

    def progress(n):
        bar.update(n - bar.n)

    summary = score_nbest(lists, scorer, weights, out_dir, history=history, refs=refs, ngram_cost=ngram_cost,
                          progress=progress, settings={"lm": lm_path, "nbest": nbest})
    bar.close()
    click.echo(f"wrote {out_dir}/text and {out_dir}/nn_cost ({summary['hypotheses']} hypotheses, "
               f"{summary['seconds']:.1f} s, {summary['tokens_per_s']:.0f} tokens/s, history {history})")
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


@main.command("models")
def list_models():
    """List the registered model names."""
    from .models import MODEL_REGISTRY

    for name in sorted(MODEL_REGISTRY):
        doc = (MODEL_REGISTRY[name].__doc__ or "").strip().splitlines()[0]
        click.echo(f"{name:<8} {doc}")


if __name__ == "__main__":
    main()
