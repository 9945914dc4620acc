#!/usr/bin/env python
"""GFLOP/s of the exact full-softmax output layer: the plain product, today's path and
the fused one (issue 21), for N positions of H features over V words, one thread.

* ``plain``: ``torch.mm(x, W.T)`` into a preallocated [N, V] buffer: the GEMM alone,
  the machine's speed for this shape (no bias, no normalisation, no allocation).
* ``today``: what exact scoring did before the fused layer: ``log_softmax(x @ W.T + b)``
  into a reused [N, V] buffer (the prefix tree's ``out=`` buffer), then the target
  log-probabilities gathered (``softmax_impl="plain"``).
* ``fused``: :func:`~nbest_rescore.models.fused_output.fused_log_probs_at`: the product
  in vocabulary blocks with an online log-sum-exp and the targets' logits alone
  (the default, ``softmax_impl="fused"``).
* ``fused_bf16`` (only on a CPU with bfloat16 instructions): the same with the
  weights in bfloat16 (``score --dtype bfloat16``); approximate, reported for speed.

One target per position (the prefix tree reads about 1.3). GFLOP/s are counted as
2 N H V per second for every path (the work of the product), from the median of
``--repeat`` timed calls after two warm-up calls.

    python -m benchmarks.output_layer --json docs/benchmarks/output_layer_cpu.json
"""
from __future__ import annotations

import argparse

import torch

from benchmarks.harness import add_repeat, machine, median, time_calls, write_json
from nbest_rescore.models.fused_output import DEFAULT_BLOCK, fused_log_probs_at
from nbest_rescore.models.quantize import cpu_has_fast_bfloat16


def _median_seconds(fn, repeat: int) -> float:
    """Median seconds of ``repeat`` calls of ``fn`` after two warm-up calls."""
    return median(time_calls(fn, repeat, warmup=2))


def measure(h: int, n: int, v: int, repeat: int, bf16: bool, seed: int = 0) -> dict:
    """One row: GFLOP/s of each path and the largest |fused - today| in nats."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(v, h, generator=g) * h ** -0.5
    b = torch.randn(v, generator=g) * 0.1
    x = torch.randn(n, h, generator=g)
    rows = torch.arange(n)
    tgt = torch.randint(0, v, (n,), generator=g)
    out = torch.empty(n, v)
    flop = 2.0 * n * h * v

    def today():
        logp = torch.log_softmax(torch.addmm(b, x, w.t(), out=out), -1, out=out)
        return logp[rows, tgt]

    row = {"H": h, "N": n, "V": v}
    with torch.inference_mode():
        row["plain_gflops"] = flop / _median_seconds(lambda: torch.mm(x, w.t(), out=out), repeat) / 1e9
        row["today_gflops"] = flop / _median_seconds(today, repeat) / 1e9
        row["fused_gflops"] = flop / _median_seconds(lambda: fused_log_probs_at(x, w, b, rows, tgt), repeat) / 1e9
        row["max_abs_diff_nats"] = float((fused_log_probs_at(x, w, b, rows, tgt) - today()).abs().max())
        if bf16:
            wb, bb = w.bfloat16(), b.bfloat16()
            row["fused_bf16_gflops"] = flop / _median_seconds(lambda: fused_log_probs_at(x, wb, bb, rows, tgt),
                                                              repeat) / 1e9
            row["bf16_max_abs_diff_nats"] = float((fused_log_probs_at(x, wb, bb, rows, tgt) - today()).abs().max())
    row["fused_vs_plain"] = row["fused_gflops"] / row["plain_gflops"]
    row["today_vs_plain"] = row["today_gflops"] / row["plain_gflops"]
    return row


def _ints(text: str):
    """argparse type: comma-separated integers >= 1 (e.g. ``256,512``)."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, e.g. 256,512; got {text!r}") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"every value must be >= 1, got {text!r}")
    return values


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab-size", type=int, default=43050, help="V (default: the benchmark's 43k words + specials)")
    ap.add_argument("--hidden", type=_ints, default="256,512", help="comma-separated H values")
    ap.add_argument("--rows", type=_ints, default="32,256,2048", help="comma-separated N values (positions per call)")
    add_repeat(ap, 3, "timed calls per path (median reported)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (the issue: one)")
    ap.add_argument("--json", default=None, help="write {'rows': [...]} here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    bf16 = cpu_has_fast_bfloat16()
    rows = [measure(h, n, args.vocab_size, args.repeat, bf16)
            for h in args.hidden for n in args.rows]
    print(f"output layer V={args.vocab_size}, {torch.get_num_threads()} thread(s), block {DEFAULT_BLOCK}, "
          f"medians of {args.repeat}; GFLOP/s = 2 N H V / s")
    head = f"{'H':>4} {'N':>5} {'plain':>7} {'today':>7} {'fused':>7} {'fused/plain':>11} {'today/plain':>11}"
    print(head + (f" {'fused bf16':>10}" if bf16 else ""))
    for r in rows:
        line = (f"{r['H']:>4} {r['N']:>5} {r['plain_gflops']:>7.1f} {r['today_gflops']:>7.1f} {r['fused_gflops']:>7.1f} "
                f"{r['fused_vs_plain']:>10.0%} {r['today_vs_plain']:>10.0%}")
        print(line + (f" {r['fused_bf16_gflops']:>10.1f}" if bf16 else ""))
    meta = {"threads": torch.get_num_threads(), "vocab_size": args.vocab_size, "block": DEFAULT_BLOCK,
            "repeat": args.repeat, "torch": torch.__version__, "machine": machine(), "cpu_has_fast_bfloat16": bf16}
    write_json(args.json, {"meta": meta, "rows": rows})


if __name__ == "__main__":
    main()
