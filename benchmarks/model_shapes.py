#!/usr/bin/env python
"""Size and recurrent cost of the models of training configs: parameters with and
without embeddings (``LanguageModel.num_parameters``) and the recurrent multiply-adds
per token, counted by torch's ``FlopCounterMode`` over one forward of the recurrence
(:func:`nbest_rescore.models.cost.recurrent_macs`: the embedding lookup and the
output layer are left out; matrix products only). Words/s come from the trainings themselves
(``nbest-rescore train`` prints ``words_per_s``; the recipe keeps it in
``train_<m>.json``) and are read from ``--train-json DIR`` when given.

    python -m benchmarks.model_shapes recipes/abc-nbest/conf/cpu-ablation/{gru,amn-full,amn-full-eqparams}.yaml \\
        --train-json exp/abc-nbest-cpu-ablation --json docs/benchmarks/amn_shapes_cpu.json

The vocabulary size (43,050 for the benchmark's decoder vocabulary) only matters for
the parameter counts; the adaptive softmax's cutoffs are the benchmark's
(``--cutoffs``).
"""
from __future__ import annotations

import argparse
import json
import os

from benchmarks.harness import run_main, write_json


def shape_row(path: str, vocab_size: int, cutoffs, train_json_dir) -> dict:
    """The row of one config: name, model, parameters, recurrent multiply-adds per token
    and (when its training JSON exists) words/s and training seconds."""
    from nbest_rescore.config import load_train_config
    from nbest_rescore.models import build_model
    from nbest_rescore.models.cost import recurrent_macs

    cfg = load_train_config(path)
    mc = dict(cfg.model_config)
    if mc.get("output") == "adaptive" and not mc.get("adaptive_cutoffs"):
        mc["adaptive_cutoffs"] = list(cutoffs)
    model = build_model(cfg.model, mc, vocab_size)
    name = os.path.splitext(os.path.basename(path))[0]
    row = {"name": name, "model": cfg.model, **model.num_parameters(),
           "recurrent_macs_per_token": round(recurrent_macs(model))}
    tj = os.path.join(train_json_dir, f"train_{name}.json") if train_json_dir else None
    if tj and os.path.isfile(tj):
        with open(tj) as f:
            res = json.load(f)
        row.update(words_per_s=res.get("words_per_s"), train_seconds=res.get("seconds"))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("configs", nargs="+", help="training configs (YAML)")
    ap.add_argument("--vocab-size", type=int, default=43050, help="output vocabulary size")
    ap.add_argument("--cutoffs", default="2943,14651", help="adaptive softmax cutoffs (comma-separated)")
    ap.add_argument("--train-json", metavar="DIR", help="folder with train_<config name>.json of the trainings")
    ap.add_argument("--json", metavar="OUT", help="write the rows to this JSON file")
    args = ap.parse_args()
    for p in args.configs:
        if not os.path.isfile(p):
            ap.error(f"{p}: no such config file")
    cutoffs = [int(c) for c in args.cutoffs.split(",")]
    rows = [shape_row(p, args.vocab_size, cutoffs, args.train_json) for p in args.configs]
    print("| config | model | parameters | without embeddings | recurrent multiply-adds / token | words/s |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['name']} | {r['model']} | {r['total']:,} | {r['without_embeddings']:,} | "
              f"{r['recurrent_macs_per_token']:,} | {r.get('words_per_s') or '-'} |")
    write_json(args.json, {"rows": rows, "vocab_size": args.vocab_size, "cutoffs": cutoffs})


if __name__ == "__main__":
    run_main(main)
