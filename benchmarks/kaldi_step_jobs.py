#!/usr/bin/env python
"""Wall time of the Kaldi step (``recipes/kaldi/steps/nbest_rescore.sh``) with 1, 2, ...
jobs of 1, 2, ... threads each over the same N-best lists: what ``--nj`` and
``--num-threads`` buy on one machine. Every combination of the given ``--nj`` and
``--num-threads`` values is timed in the same run; ratios are to the first.

The lists are laid out as a Kaldi decode directory (``archives.JOB/`` of
``steps/rnnlmrescore.sh``: ``words_text``, ``acwt``, ``lmwt.withlm``, ``lmwt.nolm``;
``num_jobs``) with as many jobs as the largest ``--nj``, cut at document boundaries
with about the same number of hypotheses per job; the step re-shards them for smaller
``--nj`` (``nbest-rescore split``). Each run is the whole step (stages 0-3, start-up,
splitting, merging and WER included), timed from outside; every run's merged NN costs
must equal the first run's (to 1e-4), or the benchmark fails. Medians of ``--repeat``.

Example::

    python -m benchmarks.kaldi_step_jobs --lm exp/abc-nbest-cpu-twins/gru-adaptive.pt \\
        --nbest ../shared/data/abc-nbest/dev --nj 1 2 --num-threads 1 2 --repeat 3 --json kaldi_nj.json
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import REPO, add_repeat, check_inputs, machine, median, run_main, run_measured, write_json
STEP = REPO / "recipes" / "kaldi" / "steps" / "nbest_rescore.sh"


def lay_out(nbest, root, cut):
    """A Kaldi decode dir ``root/decode`` whose job j holds utterances ``cut[j-1]:cut[j]``
    (rnnlmrescore.sh names; lmwt.nolm zeros, so lmwt.withlm is the n-gram cost); returns
    its path."""
    root = Path(root)
    decode = root / "decode"
    for j in range(1, len(cut)):
        a = decode / f"archives.{j}"
        a.mkdir(parents=True)
        utts = nbest.utterances[cut[j - 1]:cut[j]]
        keys = [k for u in utts for k in u.keys]
        (a / "words_text").write_text("".join(" ".join((k, *h)) + "\n" for u in utts for k, h in zip(u.keys, u.hyps)))
        (a / "acwt").write_text("".join(f"{k} {c:.4f}\n" for u in utts for k, c in zip(u.keys, u.ac_cost)))
        (a / "lmwt.withlm").write_text("".join(f"{k} {c:.4f}\n" for u in utts for k, c in zip(u.keys, u.lm_cost)))
        (a / "lmwt.nolm").write_text("".join(f"{k} 0\n" for k in keys))
    (decode / "num_jobs").write_text(f"{len(cut) - 1}\n")
    return decode


def document_cuts(nbest, jobs: int):
    """Utterance boundaries ``[0, ..., U]`` of ``jobs`` shards of whole documents with
    about the same number of hypotheses: the toolkit's own shard plan
    (:func:`~nbest_rescore.api.shards.plan_shards`, what ``nbest-rescore split`` uses);
    the documents must be contiguous in set order."""
    from nbest_rescore.api.shards import plan_shards

    docs = nbest.documents()
    if any(d != list(range(d[0], d[-1] + 1)) for d in docs):
        sys.exit("the lists' documents are not contiguous in set order; cannot cut them into jobs")
    try:
        runs = plan_shards([sum(len(nbest.utterances[u]) for u in d) for d in docs], jobs)
    except ValueError as exc:
        sys.exit(f"--nj {jobs}: {exc} (the number of documents)")
    return [docs[a][0] for a, _ in runs] + [len(nbest)]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lm", required=True, help="checkpoint (.pt)")
    p.add_argument("--nbest", required=True, help="N-best directory (its utt2doc and ref.txt are used)")
    p.add_argument("--nj", type=int, nargs="+", default=[1, 2], help="job counts to time (default: 1 2)")
    p.add_argument("--num-threads", type=int, nargs="+", default=[1],
                   help="threads per job to time (the step's --num-threads; default: 1)")
    add_repeat(p, 3, "runs per combination (medians reported)")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    check_inputs(p, args.lm, args.nbest)
    if min(args.nj) < 1 or args.repeat < 1 or min(args.num_threads) < 1:
        p.error("--nj, --num-threads and --repeat must be >= 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    from nbest_rescore.io.kaldi_nbest import read_kaldi_nbest_dir
    from nbest_rescore.io.score_ark import read_cost_ark

    nbest = read_kaldi_nbest_dir(args.nbest)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    results, reference = {}, None
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        decode = lay_out(nbest, tmp, document_cuts(nbest, max(args.nj)))
        data = tmp / "data"
        data.mkdir()
        for src, dst in (("utt2doc", "utt2doc"), ("ref.txt", "text")):  # documents and references, if any
            if (Path(args.nbest) / src).exists():
                shutil.copy(Path(args.nbest) / src, data / dst)
        for nj, threads in [(nj, t) for nj in args.nj for t in args.num_threads]:
            name, times = f"{nj}x{threads}", []
            for _ in range(args.repeat):
                out = tmp / f"out_{name}"
                shutil.rmtree(out, ignore_errors=True)
                cmd = ["bash", str(STEP), "--nj", str(nj), "--num-threads", str(threads),
                       "--lm-weight", "9.5", "--interp", "0.5", "--word-ins-penalty", "-0.629606",
                       "--skip-scoring", "true",  # stages 0-3, as timed before stage 4 existed
                       os.path.abspath(args.lm), str(data), str(decode), str(out)]
                res = run_measured(cmd, env=env, cwd=tmp)
                times.append(res["seconds"])
                if res["rc"] != 0:
                    sys.exit(f"--nj {nj} --num-threads {threads}: the step failed:\n{res['stderr'][-2000:]}")
                costs = read_cost_ark(out / "score" / "nn_cost")
                if reference is None:
                    reference = costs
                elif set(costs) != set(reference) or max(abs(costs[k] - reference[k]) for k in costs) > 1e-4:
                    sys.exit(f"--nj {nj} --num-threads {threads}: the merged NN costs differ from the first run's")
            wer_file = out / "score" / "wer"  # its first line is compute-wer's %WER line
            wer = wer_file.read_text().splitlines()[0] if wer_file.exists() else None
            results[name] = {"nj": nj, "num_threads": threads, "seconds": times,
                             "median_seconds": median(times), "wer": wer}
    first = next(iter(results))
    base = results[first]["median_seconds"]
    out = {"lm": args.lm, "nbest": args.nbest, "repeat": args.repeat, "machine": machine(),
           "hypotheses": nbest.num_hyps(), "runs": results,
           "speedup_vs_first": {name: base / r["median_seconds"] for name, r in results.items()}}
    for name, r in results.items():
        print(f"--nj {r['nj']} --num-threads {r['num_threads']}: median {r['median_seconds']:.1f} s "
              f"({base / r['median_seconds']:.2f}x the {first} run); {r['wer']}")
    write_json(args.json, out)


if __name__ == "__main__":
    run_main(main)
