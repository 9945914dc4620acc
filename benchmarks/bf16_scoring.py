#!/usr/bin/env python
"""``score --dtype bfloat16`` against float32 on the same lists: the NN cost
differences (per hypothesis and per scored word), the dev WER each gives at its own
tuned weights, and the NN scoring time.

On a CPU with bfloat16 instructions (AVX512-BF16 or AMX) only the output layer's
product runs in bfloat16 (:func:`~nbest_rescore.models.quantize.bfloat16_output_layer`);
elsewhere ``score`` falls back to float32 and this script says so.

    python -m benchmarks.bf16_scoring --lm exp/gru.pt --nbest ../shared/data/abc-nbest/dev \\
        --ref ../shared/data/abc-nbest/dev/ref.txt --threads 2 --json bf16.json
"""
from __future__ import annotations

import argparse

import numpy as np

from benchmarks.harness import check_inputs, clocked, machine, run_main, write_json

PERCENTILES = (50, 90, 99, 100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lm", required=True, help="checkpoint (.pt)")
    ap.add_argument("--nbest", required=True, help="Kaldi N-best folder")
    ap.add_argument("--ref", required=True, help="references (Kaldi text)")
    ap.add_argument("--history", default="first-pass", help="1-best history (default first-pass)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--json", default=None, help="write the result here")
    args = ap.parse_args()
    check_inputs(ap, args.lm, args.nbest)

    import torch

    import nbest_rescore as nr
    from nbest_rescore.models.quantize import cpu_has_fast_bfloat16

    if args.threads:
        torch.set_num_threads(args.threads)
    nbest, refs = nr.load_nbest(args.nbest), nr.load_references(args.ref)
    lm = nr.load_lm(args.lm)
    words = np.concatenate([u.num_words for u in nbest.utterances]) + 1  # words + </s>
    out = {"lm": args.lm, "nbest": args.nbest, "history": args.history, "threads": torch.get_num_threads(),
           "machine": machine(),
           "cpu_has_fast_bfloat16": cpu_has_fast_bfloat16(), "hypotheses": int(len(words)), "runs": {}}
    costs = {}
    for dtype in ("float32", "bfloat16"):
        res, seconds, _ = clocked(lambda: nr.score(nbest, lm, refs=refs, history=args.history, dtype=dtype))
        costs[dtype] = res.nn_cost
        tuned = nr.tune(nbest, refs, res.nn_costs()).best
        scoring = res.settings.get("scoring")
        scope = scoring.get("dtype_scope") if isinstance(scoring, dict) else None
        out["runs"][dtype] = {"score_seconds": round(seconds, 2), "dtype_scope": scope,
                              "tuned_wer": tuned.wer, "tuned_interp": tuned.interp, "tuned_lm_weight": tuned.lm_weight,
                              "wer_at_default_weights": res.wer["rescored"].wer}
        print(f"{dtype}: {seconds:.1f} s, dev WER tuned {tuned.wer:.2f} (interp {tuned.interp:g}, "
              f"LM weight {tuned.lm_weight:g}); {dtype} scope: {scope}")
    diff = np.abs(costs["bfloat16"] - costs["float32"])
    out["abs_diff_per_hypothesis_nats"] = {f"p{p}": float(np.percentile(diff, p)) for p in PERCENTILES}
    out["abs_diff_per_word_nats"] = {f"p{p}": float(np.percentile(diff / words, p)) for p in PERCENTILES}
    out["mean_diff_per_hypothesis_nats"] = float((costs["bfloat16"] - costs["float32"]).mean())
    out["speedup"] = out["runs"]["float32"]["score_seconds"] / out["runs"]["bfloat16"]["score_seconds"]
    print("|bf16 - float32| per hypothesis (nats): " + ", ".join(
        f"{k} {v:.4f}" for k, v in out["abs_diff_per_hypothesis_nats"].items()))
    print("per scored word: " + ", ".join(f"{k} {v:.5f}" for k, v in out["abs_diff_per_word_nats"].items()))
    print(f"NN scoring speed-up bfloat16 / float32 (whole score call): {out['speedup']:.2f}x")
    write_json(args.json, out)


if __name__ == "__main__":
    run_main(main)
