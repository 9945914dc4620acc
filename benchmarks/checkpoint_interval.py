"""What mid-epoch checkpoints cost in training speed (``optim.checkpoint_interval``,
docs/training.md "Preemption and mid-epoch checkpoints").

Trains the same config for the same wall-clock time once per interval (``off`` is the
baseline: only epoch checkpoints, as before), in this process, and reports per
interval the training words/s, the mid-epoch writes of ``<out>.last.pt`` made, the
median seconds one write took and the file's size, and the speed against ``off``.
The cost of an interval of I seconds is about (one write's seconds) / I, which is
printed for the default (5 minutes) from the measured median write.

Usage (the recipe's 43k-vocabulary GRU of the CPU ablation, 90 s per run):

    OMP_NUM_THREADS=1 python -m benchmarks.checkpoint_interval \\
        --config recipes/abc-nbest/conf/cpu-ablation/gru.yaml --seconds 90 --intervals off,15s,60s \\
        --json exp/checkpoint_interval.json
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from benchmarks.harness import machine, median, run_main, write_json

DEFAULT_INTERVAL_S = 300.0  # the default optim.checkpoint_interval, 5m


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="recipes/abc-nbest/conf/cpu-ablation/gru.yaml", help="training config (YAML)")
    p.add_argument("--seconds", type=float, default=90.0, help="training seconds per run (optim.max_seconds)")
    p.add_argument("--intervals", default="off,15s,60s", help="comma-separated checkpoint intervals; off first")
    p.add_argument("--max-words", type=int, default=None, help="train on the first N words (data.max_words)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (optim.threads)")
    p.add_argument("--json", help="write the results here")
    return p.parse_args(argv)


def timed_writes(checkpointing):
    """Wrap ``checkpointing.save_last`` so that every mid-epoch write is timed: returns
    the list that (seconds, bytes) of each is appended to."""
    writes, plain = [], checkpointing.save_last

    def save_last(out_path, model, vocab, run, opt, info, position=None):
        t0 = time.perf_counter()
        plain(out_path, model, vocab, run, opt, info, position)
        if position is not None:
            writes.append((time.perf_counter() - t0, os.path.getsize(checkpointing.last_path(out_path))))

    checkpointing.save_last = save_last
    return writes


def one_run(cfg_path: str, interval: str, args, folder: Path) -> dict:
    """Train ``args.seconds`` with ``interval``; words/s and the writes made."""
    from nbest_rescore.api import TrainJob
    from nbest_rescore.training import checkpointing

    writes = timed_writes(checkpointing)
    job = TrainJob(config=cfg_path, out=str(folder / f"m-{interval}.pt"), max_seconds=args.seconds,
                   threads=args.threads, max_words=args.max_words, checkpoint_interval=interval)
    res = job.run(progress=False)
    seconds = [w[0] for w in writes]
    return {"interval": interval, "words_per_s": res.words_per_s, "train_seconds": res.seconds,
            "mid_epoch_writes": len(writes), "median_write_s": median(seconds) if seconds else None,
            "last_pt_mb": writes[-1][1] / 2 ** 20 if writes else None}


def main(argv=None) -> dict:
    args = parse_args(argv)
    intervals = [i.strip() for i in args.intervals.split(",") if i.strip()]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for interval in intervals:
            rows.append(one_run(args.config, interval, args, Path(tmp)))
            r = rows[-1]
            print(f"{interval:>6}: {r['words_per_s']:9.1f} words/s, {r['mid_epoch_writes']} mid-epoch writes, "
                  f"median write {r['median_write_s'] or 0:.2f} s, .last.pt {r['last_pt_mb'] or 0:.0f} MB", flush=True)
    base = rows[0]["words_per_s"]
    for r in rows:
        r["speed_vs_first"] = r["words_per_s"] / base
    medians = [r["median_write_s"] for r in rows if r["median_write_s"] is not None]
    write_s = median(medians) if medians else None
    out = {"args": vars(args), "machine": machine(args.threads), "runs": rows,
           "median_write_s": write_s,
           "default_interval_cost": None if write_s is None else write_s / DEFAULT_INTERVAL_S}
    if write_s is not None:
        print(f"one write: {write_s:.2f} s; at the default 5m interval about {100 * write_s / DEFAULT_INTERVAL_S:.2f}% "
              f"of the training time")
    write_json(args.json, out)
    return out


if __name__ == "__main__":
    run_main(main)
