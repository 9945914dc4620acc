#!/usr/bin/env python3
"""Markdown tables of run.sh stage 7 (model combination): every subset of the models
tuned on dev by the grid and by the exact line search, the words each model trained
on, and where the combinations help and hurt.

Usage: python recipes/abc-nbest/local/ensemble_table.py EXP_DIR DEV_DIR HISTORY MODEL [MODEL ...]

Reads ``EXP_DIR/ensemble_HISTORY/<m1+m2..>/{grid,line}/tune.json`` (written by
``nbest-rescore tune``), ``EXP_DIR/ensemble_HISTORY/costs/nn_cost.<m>`` and the
checkpoints ``EXP_DIR/<m>.pt``. The 1-best of each tuned point is recomputed from the
lists and the stored costs (no LM is run): per utterance, the hypothesis with the
highest combined score; "helps"/"hurts" count the utterances whose 1-best has fewer /
more word errors than the best single model's (same search). From each tune.json
(``tune --folds``): the bootstrap 95% interval of the dev WER, the cross-validated WER
and the paired-bootstrap probability that the combination's cross-validated 1-best makes
fewer word errors than the best single model's (docs/evaluation.md); blank for a
tune.json without them.
"""
import itertools
import json
import sys
from pathlib import Path

import numpy as np

from nbest_rescore.api import load_nbest, load_references, read_weights_file
from nbest_rescore.evaluation.bootstrap import BootstrapWer, improvement_probability
from nbest_rescore.evaluation.wer import nbest_errors
from nbest_rescore.io.checkpoint import load_checkpoint
from nbest_rescore.io.score_ark import read_cost_ark
from nbest_rescore.rescoring.combine import flat_scores, segment_argmax


def _words_trained(ckpt: Path):
    """(tokens trained, seconds, best validation perplexity) of a checkpoint; None for
    what it does not record (all None when it is missing)."""
    if not ckpt.is_file():
        return None, None, None
    info = load_checkpoint(str(ckpt)).get("info") or {}
    hist = info.get("history") or []
    return (hist[-1].get("tokens") if hist else None), info.get("seconds"), info.get("best_valid_ppl")


def cost_rows(path, keys) -> np.ndarray:
    """float64 [H]: the costs of the ark ``path`` in the order of the hypothesis ``keys``."""
    c = read_cost_ark(path)
    return np.array([c[k] for k in keys], dtype=np.float64)


def combined_one_best(flat, tune_json, costs):
    """int64 [U] flat indices of the 1-best at the weights of ``tune_json`` (the
    costs by LM name: float64 [H] each), and the weights."""
    weights, names = read_weights_file(tune_json)
    return segment_argmax(flat_scores(flat, weights, [costs[n] for n in names]), flat.offsets), weights


def _cv(doc):
    """(cross-validated WER, its per-utterance errors int64 [U]) of a tune.json, or (None, None)."""
    errors = (doc.get("utterance_errors") or {}).get("cross_validated")
    if errors is None:
        return None, None
    return doc["cross_validation"]["wer"], np.asarray(errors, dtype=np.int64)


def _honest_cells(doc, single_doc):
    """The cells 95% interval, CV WER and P(CV better than the best single model)."""
    boot = (doc.get("bootstrap") or {}).get("dev_tuned")
    cv_wer, cv = _cv(doc)
    _, base = _cv(single_doc) if single_doc is not None and single_doc is not doc else (None, None)
    p = "" if cv is None or base is None else f"{improvement_probability(base, cv):.3f}"
    return ["" if boot is None else BootstrapWer(**boot).interval(), "" if cv_wer is None else f"{cv_wer:.2f}", p]


def main(exp, dev, history, models):
    exp = Path(exp)
    ens = exp / f"ensemble_{history}"
    nbest = load_nbest(dev)
    refs = load_references(Path(dev) / "ref.txt")
    flat = nbest.flat()
    errors, offsets, ref_words = nbest_errors(nbest, refs, flat)
    costs = {m: cost_rows(ens / "costs" / f"nn_cost.{m}", flat.keys) for m in models}

    def one_best(subset, search):
        path = ens / "+".join(subset) / search / "tune.json"
        if not path.is_file():
            return None
        chosen, weights = combined_one_best(flat, path, costs)
        return chosen, json.loads(path.read_text()), weights

    print(f"## Model combination on dev ({history} history; {len(nbest)} utterances, {ref_words} reference words)")
    print()
    print("| model | words trained | training (min) | best valid ppl |")
    print("|---|---:|---:|---:|")
    for m in models:
        words, seconds, ppl = _words_trained(exp / f"{m}.pt")
        print(f"| {m} | {'' if words is None else f'{words:,}'} | "
              f"{'' if seconds is None else f'{seconds / 60:.1f}'} | {'' if ppl is None else f'{ppl:.1f}'} |")
    print()
    print("| combination | search | dev WER | 95% interval | CV WER | n-gram w_0 | NN weights | delta | wip | "
          "evaluations | seconds | helps / hurts vs best single | P(CV better than best single) |")
    print("|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    singles = {}
    for search in ("grid", "line"):
        best_single = None
        for m in models:
            r = one_best((m,), search)
            if r is not None:
                wer = r[1]["best"]["wer"]
                if best_single is None or wer < best_single[1]:
                    best_single = (m, wer, r[0], r[1])
        singles[search] = best_single
    for size in range(1, len(models) + 1):
        for subset in itertools.combinations(models, size):
            for search in ("grid", "line"):
                r = one_best(subset, search)
                if r is None:
                    continue
                chosen, doc, w = r
                nn = ", ".join(f"{n} {x:.3f}" for n, x in zip(doc["weights"]["nn"], w.lm_weights_per_model))
                cmp = ""
                b = singles[search]
                if size > 1 and b is not None:
                    e_new = errors[chosen]
                    e_old = errors[b[2]]
                    cmp = f"{int((e_new < e_old).sum())} / {int((e_new > e_old).sum())} (vs {b[0]})"
                interval, cv_wer, p = _honest_cells(doc, b[3] if size > 1 and b is not None else None)
                print(f"| {' + '.join(subset)} | {search} | {doc['best']['wer']:.2f} | {interval} | {cv_wer} | "
                      f"{w.interp:.3f} | {nn} | {w.lm_weight:.2f} | {w.word_ins_penalty:.3f} | "
                      f"{doc.get('evaluations', '')} | {doc.get('seconds', 0):.1f} | {cmp} | {p} |")
    print()
    print("1-best disagreement between the single models at their line-search weights "
          "(share of utterances whose 1-best differ):")
    print()
    picks = {m: one_best((m,), "line") for m in models}
    for a, b in itertools.combinations(models, 2):
        if picks[a] is not None and picks[b] is not None:
            differ = np.mean(picks[a][0] != picks[b][0]) * 100.0
            print(f"- {a} vs {b}: {differ:.1f}%")


if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.exit(__doc__.split("\n\n")[1])
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
