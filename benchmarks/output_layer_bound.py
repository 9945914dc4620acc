#!/usr/bin/env python
"""Upper bound on what batching can gain for exact scoring when the output layer
dominates: positions/s of the output layer alone (``log_softmax(x W^T + b)``, natural
log) for M positions at once, M = the length of one hypothesis (what one-at-a-time
scoring computes per call) up to the large batches of the prefix-tree path.

Exact scoring must normalise over the whole vocabulary at every scored position, so
the tree path's speed-up over one-at-a-time scoring is at most (positions saved by
sharing prefixes) x (this script's throughput ratio between large and small M).

    python -m benchmarks.output_layer_bound --vocab-size 43050 --hidden 512 --threads 2
"""
from __future__ import annotations

import argparse

import torch

from benchmarks.harness import add_repeat, machine, median, time_calls, write_json


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab-size", type=int, default=43050, help="V: output vocabulary size")
    ap.add_argument("--hidden", type=int, default=512, help="feature size feeding the output layer")
    ap.add_argument("--rows", default="20,64,256,1024", help="comma-separated M values (positions per call)")
    add_repeat(ap, 7, "timed calls per M (median reported)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(args.vocab_size, args.hidden, generator=g)
    b = torch.randn(args.vocab_size, generator=g)
    res = {}
    with torch.inference_mode():
        for m in (int(x) for x in args.rows.split(",")):
            x = torch.randn(m, args.hidden, generator=g)
            med = median(time_calls(lambda: torch.log_softmax(torch.addmm(b, x, w.t()), -1), args.repeat, warmup=2))
            res[m] = {"positions_per_s": m / med, "gflop_per_s": 2 * m * args.hidden * args.vocab_size / med / 1e9}
    small = min(res)
    print(f"output layer V={args.vocab_size}, H={args.hidden}, {torch.get_num_threads()} thread(s); medians of {args.repeat}")
    print(f"{'M':>6} {'positions/s':>12} {'GFLOP/s':>8} {'vs M=' + str(small):>8}")
    for m, r in res.items():
        print(f"{m:>6} {r['positions_per_s']:>12.0f} {r['gflop_per_s']:>8.1f} "
              f"{r['positions_per_s'] / res[small]['positions_per_s']:>7.2f}x")
    write_json(args.json, {"vocab_size": args.vocab_size, "hidden": args.hidden, "threads": torch.get_num_threads(),
                           "machine": machine(), "rows": res})


if __name__ == "__main__":
    main()
