#!/usr/bin/env python3
"""run.sh stage 7 on an eval set: every model combination (two or more models) at the
weights tuned for it on dev, applied to the eval set without running any LM, for the
eval WER table.

Usage: python recipes/abc-nbest/local/eval_combinations.py EXP_DIR EVAL_DIR EV_DIR HISTORY MODEL [MODEL ...]

For each subset of two or more models and each search with a
``EXP_DIR/ensemble_HISTORY/<m1+m2..>/<search>/tune.json`` (stage 7 on dev), the 1-best
of each list of EVAL_DIR at that tune.json's weights, from the NN costs stage 6 stored
at ``EV_DIR/score_<m>_HISTORY/nn_cost`` (each model scored alone at its own dev-tuned
weights; the combination re-ranks with those costs), is written as
``EV_DIR/ensemble_<m1+m2..>_<search>/text`` with a ``wer.json`` (``wer.rescored``
against ``EVAL_DIR/ref.txt`` and the weights), as ``score`` writes them. The table
rows go to ``EV_DIR/ensemble_rows`` (``NAME=PATH:rescored``, one a line), and
``EV_DIR/baselines`` becomes its first line (stage 6's first-pass row) plus the row of
the best single model on dev (lowest WER of ``EXP_DIR/tune_<m>_HISTORY/tune.json``),
so the table shows P(better than it) for every row.
"""
import itertools
import json
import sys
from dataclasses import asdict
from pathlib import Path

from ensemble_table import combined_one_best, cost_rows

from nbest_rescore.api import load_nbest, load_references
from nbest_rescore.evaluation.wer import compute_wer
from nbest_rescore.io.kaldi_text import write_kaldi_text


def _best_single(exp: Path, history: str, models):
    """The model whose stage 4 tune.json has the lowest dev WER (None without any)."""
    wers = {}
    for m in models:
        path = exp / f"tune_{m}_{history}" / "tune.json"
        if path.is_file():
            wers[m] = json.loads(path.read_text())["best"]["wer"]
    return min(wers, key=wers.get) if wers else None


def main(exp, eval_dir, ev, history, models):
    exp, ev = Path(exp), Path(ev)
    nbest = load_nbest(eval_dir)
    refs = load_references(Path(eval_dir) / "ref.txt")
    flat = nbest.flat()
    costs = {m: cost_rows(ev / f"score_{m}_{history}" / "nn_cost", flat.keys) for m in models}
    rows = []
    for size in range(2, len(models) + 1):
        for subset in itertools.combinations(models, size):
            for search in ("grid", "line"):
                tune_json = exp / f"ensemble_{history}" / "+".join(subset) / search / "tune.json"
                if not tune_json.is_file():
                    continue
                chosen, weights = combined_one_best(flat, tune_json, costs)
                one_best = {u.utt_id: flat.hyps[i] for u, i in zip(nbest.utterances, chosen)}
                out = ev / f"ensemble_{'+'.join(subset)}_{search}"
                out.mkdir(parents=True, exist_ok=True)
                write_kaldi_text(out / "text", one_best.items())
                wer = compute_wer(refs, one_best, str(Path(eval_dir) / "ref.txt"))
                (out / "wer.json").write_text(json.dumps({"wer": {"rescored": wer.to_dict()}, "weights": asdict(
                    weights), "tune": str(tune_json)}, indent=2))
                rows.append(f"{' + '.join(subset)} ({search} search, weights tuned on dev)={out}/wer.json:rescored")
    (ev / "ensemble_rows").write_text("".join(r + "\n" for r in rows))
    first = (ev / "baselines").read_text().splitlines()[:1]
    best = _best_single(exp, history, models)
    single = [f"{best.upper()} + 3-gram, history {history}"] if best is not None else []
    (ev / "baselines").write_text("".join(b + "\n" for b in first + single))
    print(f"{ev}: {len(rows)} combinations at their dev-tuned weights"
          + (f"; compared with the best single model on dev, {best}" if best else ""))


if __name__ == "__main__":
    if len(sys.argv) < 6:
        sys.exit(__doc__.split("\n\n")[1])
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
