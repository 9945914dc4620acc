#!/usr/bin/env python
"""Training cost per word of the AMN's implicit-target loss forms (issue 35): the AMN of
the thesis's PTB regime (``recipes/abc-nbest/conf/cpu-thesis``: 5 memcells x 100 units,
full softmax over a 10k vocabulary, batch 30, BPTT 20) trained by the toolkit's own loop
(:func:`train_speed.time_ours`, the trainer's ``train_segments``) without the ITL, with
the spread form (eq. 4.32, ``mean-token``) and with the mixture-of-experts form (each
memcell's own prediction through the shared output layer: K more output-layer passes),
and the GRU of 125 units it is compared with. The models are interleaved within each
repeat (load on the machine affects all alike); words/s are medians over ``--repeat``;
the ratio is to the AMN without the ITL in the same run.

    python -m benchmarks.amn_itl_cost --threads 1 --json docs/benchmarks/amn_itl_cost_cpu.json
"""
from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import torch

from benchmarks.harness import DATA, add_repeat, machine, median, run_main, write_json
from benchmarks.train_speed import time_ours
from nbest_rescore.config import OptimConfig
from nbest_rescore.corpus import encode_document
from nbest_rescore.io.lm_text import read_lm_text
from nbest_rescore.models import build_model
from nbest_rescore.training.passes import epoch_streams
from nbest_rescore.training.step import StepOptions, make_optimizer
from nbest_rescore.vocab import Vocabulary


def variants(args) -> dict:
    """name -> (model name, model_config) of the rows timed."""
    amn = {"embedding_dim": args.hidden, "hidden_size": args.hidden, "num_memcells": args.memcells}
    return {"amn (no ITL)": ("amn", amn),
            "amn + ITL spread": ("amn", {**amn, "itl_weight": 2.0, "itl_reduction": "mean-token"}),
            "amn + ITL experts": ("amn", {**amn, "itl_weight": 1.0, "itl_form": "experts"}),
            f"gru {args.gru_hidden}": ("gru", {"embedding_dim": args.gru_hidden, "hidden_size": args.gru_hidden})}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--text", default=str(DATA / "lm" / "lm_train.txt"), help="training text (default: lm_train)")
    p.add_argument("--max-words", type=int, default=150000, help="prefix of the text to deal into streams")
    p.add_argument("--vocab-size", type=int, default=10000)
    p.add_argument("--hidden", type=int, default=100, help="units of each memcell and of the controller")
    p.add_argument("--memcells", type=int, default=5)
    p.add_argument("--gru-hidden", type=int, default=125)
    p.add_argument("--batch-size", type=int, default=30)
    p.add_argument("--bptt", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=40, help="timed updates per model and repeat")
    add_repeat(p, 3, "timed runs per model (medians reported)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--log-interval", type=int, default=50)
    p.add_argument("--json", help="write the result here")
    args = p.parse_args(argv)
    args.no_cuda_graph = True
    if not Path(args.text).is_file():
        p.error(f"--text {args.text}: no such file")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    docs = read_lm_text(args.text, args.max_words)
    counts = Counter(w for d in docs for s in d for w in s)
    vocab = Vocabulary.from_counts(counts, args.vocab_size, 1, None)
    streams = epoch_streams([encode_document(d, vocab) for d in docs], args.batch_size, args.bptt, 0)
    runs = {}
    for name, (model, cfg) in variants(args).items():
        torch.manual_seed(0)
        m = build_model(model, cfg, len(vocab)).train()
        runs[name] = (m, make_optimizer(m, OptimConfig(clip=10.0)), [])
    for _ in range(args.repeat):
        for name, (m, opt, speeds) in runs.items():
            speeds.append(time_ours(m, opt, streams, args, StepOptions(clip=10.0)).words_per_s)
    base = median(runs["amn (no ITL)"][2])
    out = {"args": vars(args), "machine": machine(), "vocab_size": len(vocab),
           "models": {name: {"words_per_s": median(s), "all_words_per_s": s,
                             "relative_to_amn": median(s) / base} for name, (_, _, s) in runs.items()}}
    print(f"{'model':<22} {'words/s':>9} {'x AMN':>7}")
    for name, r in out["models"].items():
        print(f"{name:<22} {r['words_per_s']:9.0f} {r['relative_to_amn']:7.2f}")
    write_json(args.json, out)
    return out


if __name__ == "__main__":
    run_main(main)
