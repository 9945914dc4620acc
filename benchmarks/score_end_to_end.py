#!/usr/bin/env python
"""End-to-end ``nbest-rescore score`` in one process, phase by phase: where the time
goes when the whole of ``dev/`` is rescored (parsing and writing included).

The phases are the public API calls that ``ScoreJob.run`` makes, in its order, each
timed (with ``torch.cuda.synchronize`` around it on CUDA):

* ``import``: importing ``nbest_rescore.api`` (torch included);
* ``read_nbest``: parsing the Kaldi N-best directory (``load_nbest``);
* ``read_ref``: the reference transcripts;
* ``load_lm``: the checkpoint, moved to the device;
* ``score``: history conditioning, prefix trees, the LM, the new 1-best and the WER
  (``score``); its ``nn_seconds`` is the part inside ``rescore`` (the NN costs);
* ``write``: ``text``, ``nn_cost`` and ``wer.json`` (``write_score_outputs``).

``--profile N`` also prints the N functions with the most cumulative time in one
more, untimed run of the ``score`` phase (cProfile), to see whether Python per utterance or per tree level, the
tree building or the model calls dominate. With a small model on the CPU the NN part
is small and the rest is what a GPU run pays on the host besides the LM.

Example (the issue's GPU target: all of dev with a 512-unit GRU, first-pass history)::

    python examples/make_random_checkpoint.py --vocab ../shared/data/abc-nbest/lm/vocab.txt \\
        --model gru --hidden 512 --out /tmp/gru512.pt
    python -m benchmarks.score_end_to_end --lm /tmp/gru512.pt --nbest ../shared/data/abc-nbest/dev \\
        --device cuda --repeat 3 --json /tmp/e2e.json
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from benchmarks.harness import add_repeat, check_inputs, clocked, machine, median, run_main, write_json

_STARTED = time.perf_counter()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lm", required=True, help="checkpoint (.pt)")
    p.add_argument("--nbest", required=True, help="Kaldi N-best directory (its ref.txt is used when present)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--history", default="first-pass", choices=("first-pass", "rescored", "interpolated", "none"),
                   help="--history of score (default: first-pass)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: the thread policy)")
    add_repeat(p, 1, "repetitions of the phases after import, in one process (medians reported)")
    p.add_argument("--profile", type=int, default=0, help="print the N top functions of the score phase")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    check_inputs(p, args.lm, args.nbest)
    if args.repeat < 1 or args.profile < 0 or (args.threads is not None and args.threads < 1):
        p.error("--repeat and --threads must be >= 1, --profile >= 0")
    return args


def main(argv=None):
    args = parse_args(argv)
    t = time.perf_counter()
    import torch

    from nbest_rescore.api import load_lm, load_nbest, load_references, score, write_score_outputs
    from nbest_rescore.api.lm_loading import set_threads
    from nbest_rescore.device import resolve_device

    imported = time.perf_counter() - t
    device = resolve_device(args.device)
    threads = set_threads(args.threads)
    ref = os.path.join(args.nbest, "ref.txt")
    ref = ref if os.path.exists(ref) else None

    runs = []
    for _ in range(args.repeat):
        phases = {}

        def timed(name, fn):
            out, phases[name], _ = clocked(fn, device)
            return out

        nbest = timed("read_nbest", lambda: load_nbest(args.nbest))
        refs = timed("read_ref", lambda: load_references(ref) if ref else None)
        lm = timed("load_lm", lambda: load_lm(args.lm, device))
        res = timed("score", lambda: score(nbest, lm, refs=refs, history=args.history))
        with tempfile.TemporaryDirectory() as tmp:
            timed("write", lambda: write_score_outputs(res, os.path.join(tmp, "out")))
        phases["nn_seconds"] = res.stats["seconds"]
        phases["total"] = sum(v for k, v in phases.items() if k != "nn_seconds")
        runs.append(phases)
    med = {k: median(r[k] for r in runs) for k in runs[0]}
    if args.profile:  # one more, untimed, run of the score phase under cProfile
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(score, nbest, lm, refs=refs, history=args.history)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(args.profile)
    out = {"lm": args.lm, "nbest": args.nbest, "device": str(device), "history": args.history,
           "threads": threads, "torch": torch.__version__, "machine": machine(threads, str(device)),
           "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
           "utterances": len(nbest), "hypotheses": nbest.num_hyps(), "import_seconds": imported,
           "process_start_to_first_phase_seconds": t - _STARTED + imported,
           "runs": runs, "median_seconds": med,
           "wer": None if res.wer is None else {k: v.wer for k, v in res.wer.items()}}
    print(f"{out['hypotheses']} hypotheses, {out['utterances']} utterances, device {out['device']}"
          f"{' (' + out['gpu'] + ')' if out['gpu'] else ''}, {threads} thread(s), medians of {args.repeat}")
    print(f"  import (torch and nbest_rescore, once): {imported:.2f} s")
    for k, v in med.items():
        print(f"  {k:<12} {v:8.2f} s")
    write_json(args.json, out)


if __name__ == "__main__":
    run_main(main)
