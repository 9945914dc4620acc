#!/usr/bin/env python
"""Hugging Face LM scoring speed and memory: the shared-context prefix-tree path
(``--scoring tree``) against the way NeMo's neural rescorer scores (``--scoring
padded``: each hypothesis with its full context as an independent, right-padded
sequence), on the same lists, model and costs (issue 28).

Paths (:class:`~nbest_rescore.rescoring.hf_scorer.HfScorer` through the public API:
``nr.load_lm("hf:DIR", context_tokens=C)``, ``lm.scorer(ScorerOptions(...))``,
``rescore(nbest, scorer, Weights(), "first-pass")``):

* ``tree``: the default: each utterance's context (the document's previous first-pass
  1-bests, the last C tokens) run once with its key/value cache, then the prefix tree
  of its hypotheses in one row under a 4-D attention mask; ``--max-tokens`` positions
  per pass.
* ``padded``: context + hypothesis as one sequence per hypothesis, length-sorted,
  batches of at most ``--batch-size`` rows and ``--max-tokens`` positions.
* ``padded_nemo`` (``--nemo-batching``, at every ``--context-tokens``):
  ``padded`` with NeMo's own batching, all N hypotheses of an utterance in one batch
  (``batch_size`` = the largest N of the lists, ``max_tokens`` unbounded), so that its
  peak memory is what N padded rows of context + hypothesis and their [N, T, V] logits
  take.

Every (path, context) cell runs ``--repeat`` times, each run a scoring worker in a
fresh interpreter (its peak RSS and CPU seconds its own, from
:func:`benchmarks.harness.run_measured`, as ``score_memory`` measures); the paths take
turns within each repeat so that load from elsewhere hits them alike, and medians are
reported. Before each run the benchmark waits (up to ``--quiet-wait`` seconds) for
other processes to use at most ``--max-other-cores`` cores and records the cores they
used during the run (:class:`benchmarks.harness.OtherLoad`): on a shared machine other
people's jobs distort timings.

Reported per cell: the median seconds of the scoring call (the model loaded and the
tree-vs-padded probe done: the worker's start-up is recorded apart), words/s (the
N-best words scored per second; the end token not counted) and tokens/s (the
hypotheses' BPE tokens, end tokens not counted), the LM positions the model ran
(context and hypothesis positions of every forward pass, padding included), the peak
RSS, CPU seconds, and the other processes' cores. Then the ratio ``tree/padded`` of
words/s per context length, the largest |cost difference| between each path and
``tree`` (the same costs: < 1e-3 nats), and, with references (``ref.txt`` in
``--nbest``), each path's WER at the default weights (``Weights()``; the same 1-bests
when the costs agree).

Without ``--lm`` the benchmark builds the recipe-sized model (4 layers, 256 dimensions,
4 heads, 1024 positions) with a byte-level BPE tokenizer of ``--vocab-size`` (8000)
tokens trained on ``--bpe-text`` (``lm_train.txt``) and random weights
(``examples/random_gpt2.py``) into a temporary directory: speed and memory do not depend
on the weights, the WER then means nothing.

Example (docs/performance.md, "Hugging Face LMs"; ``--join-docs`` so that the contexts
fill up, ``--nbest-size`` so that the padded path fits)::

    python -m benchmarks.hf_scoring --nbest ../shared/data/abc-nbest/dev \\
        --bpe-text ../shared/data/abc-nbest/lm/lm_train.txt --max-docs 2 \\
        --context-tokens 256 --repeat 3 --threads 2 --nemo-batching --json hf_256.json
    python -m benchmarks.hf_scoring --lm hf:/tmp/gpt_random --nbest ../shared/data/abc-nbest/dev \\
        --max-docs 3 --join-docs --nbest-size 20 --context-tokens 64 256 512 --repeat 2 --threads 2 \\
        --json hf_contexts.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from benchmarks.harness import (REPO, add_repeat, clocked, cuda_peak_mb, machine, median, module_command,
                                parse_or_work, peak_rss_mb, run_main, run_measured, wait_for_quiet, write_json)

_STARTED = time.perf_counter()  # a worker's start-up: imports, lists and model loaded
PATHS = ("tree", "padded", "padded_nemo")
#: Run by a fresh interpreter per measurement: runs the worker command (JSON list) and


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lm", default=None, help="hf:DIR to score with (default: a random recipe-sized GPT-2, see "
                                              "--bpe-text)")
    p.add_argument("--nbest", required=True, help="N-best directory (e.g. ../shared/data/abc-nbest/dev)")
    p.add_argument("--bpe-text", default=None,
                   help="without --lm: the LM text the tokenizer is trained on (lm_train.txt)")
    p.add_argument("--vocab-size", type=int, default=8000, help="without --lm: BPE tokens (default: 8000)")
    p.add_argument("--bpe-lines", type=int, default=0,
                   help="without --lm: train the tokenizer on the first N lines of --bpe-text (0: all)")
    p.add_argument("--model-config", default=None,
                   help="without --lm: GPT-2 config overrides as JSON, e.g. '{\"n_layer\": 1, \"n_embd\": 32}'")
    p.add_argument("--max-docs", type=int, default=None, help="only the first N documents")
    p.add_argument("--nbest-size", type=int, default=None, help="only the first K hypotheses of each list")
    p.add_argument("--join-docs", action="store_true",
                   help="read the selected utterances as one document, so that the contexts fill up to "
                        "--context-tokens (dev's documents are short: most contexts are shorter than 256 tokens)")
    p.add_argument("--context-tokens", type=int, nargs="+", default=[256],
                   help="context lengths in tokens (default: 256)")
    p.add_argument("--paths", default="tree,padded", help=f"comma-separated subset of {','.join(PATHS[:2])}")
    p.add_argument("--nemo-batching", action="store_true",
                   help="also padded_nemo (all N hypotheses of an utterance in one batch) at every context")
    p.add_argument("--max-tokens", type=int, default=8192, help="ScorerOptions.max_tokens (default: 8192)")
    p.add_argument("--batch-size", type=int, default=256, help="ScorerOptions.batch_size (default: 256)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                   help="ScorerOptions.dtype (bfloat16 falls back to float32 on a CPU without bfloat16 instructions)")
    p.add_argument("--history", default="first-pass", choices=("first-pass", "none"))
    add_repeat(p, 3, "runs per (path, context) (medians reported)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: 2)")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default: cpu); on CUDA the peak GPU memory "
                   "is recorded too")
    p.add_argument("--max-other-cores", type=float, default=0.3,
                   help="wait before a run until other processes use at most this many cores (default: 0.3)")
    p.add_argument("--quiet-wait", type=float, default=60.0, help="wait at most this long for that (default: 60 s)")
    p.add_argument("--retries", type=int, default=1,
                   help="extra attempts of a run during which other processes used more than --max-other-cores; "
                        "then the least disturbed attempt is kept (default: 1)")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--costs-out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.paths = [x for x in args.paths.split(",") if x]
    bad = [x for x in args.paths if x not in PATHS[:2]]
    if bad:
        p.error(f"--paths: unknown {bad}; choose from tree, padded (and --nemo-batching)")
    if args.worker is None:
        if args.lm is None and not args.bpe_text:
            p.error("give --lm hf:DIR, or --bpe-text (lm_train.txt) to build the random recipe-sized model")
        if args.lm is not None and not args.lm.startswith("hf:"):
            p.error(f"--lm {args.lm}: expected hf:DIR")
        if not os.path.isdir(args.nbest):
            p.error(f"--nbest {args.nbest}: no such N-best directory (e.g. ../shared/data/abc-nbest/dev)")
    for name in ("max_docs", "nbest_size", "repeat", "threads", "max_tokens", "batch_size", "vocab_size"):
        v = getattr(args, name)
        if v is not None and v < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {v}")
    if min(args.context_tokens) < 1:
        p.error("--context-tokens must be >= 1")
    return args


def load_lists(nbest_dir: str, max_docs, join_docs: bool = False, nbest_size=None):
    """The lists of the first ``max_docs`` documents (all without it), each cut to its
    first ``nbest_size`` hypotheses; with ``join_docs`` all in one document (``joined``)."""
    from dataclasses import replace

    from nbest_rescore.io.kaldi_nbest import read_kaldi_nbest_dir
    from nbest_rescore.types import NbestSet

    nbest = read_kaldi_nbest_dir(nbest_dir)
    if max_docs is None:
        max_docs = len(nbest.documents())
    keep, docs = [], []
    for u in nbest.utterances:
        if u.doc_id not in docs:
            if len(docs) == max_docs:
                break
            docs.append(u.doc_id)
        keep.append(u)
    if nbest_size:
        k = nbest_size
        keep = [replace(u, keys=u.keys[:k], hyps=u.hyps[:k], ac_cost=u.ac_cost[:k], lm_cost=u.lm_cost[:k],
                        graph_cost=u.graph_cost[:k]) for u in keep]
    if join_docs:
        keep = [replace(u, doc_id="joined") for u in keep]
    return NbestSet(tuple(keep), nbest.doc_source, nbest.source)


def scorer_options(args, path: str, lists):
    from nbest_rescore.options import ScorerOptions

    if path == "padded_nemo":
        n = max(len(u.hyps) for u in lists.utterances)
        return ScorerOptions(scoring="padded", batch_size=n, max_tokens=1 << 40, dtype=args.dtype)
    return ScorerOptions(scoring=path, batch_size=args.batch_size, max_tokens=args.max_tokens, dtype=args.dtype)


def worker(args) -> dict:
    """One measured run of one path at one context (in its own process); the costs go
    to ``--costs-out`` (.npy)."""
    import logging

    import numpy as np
    import torch

    import nbest_rescore as nr
    from nbest_rescore.rescoring.combine import Weights
    from nbest_rescore.rescoring.history import rescore

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)
    path, ctx = args.worker, args.context_tokens[0]
    lists = load_lists(args.nbest, args.max_docs, args.join_docs, args.nbest_size)
    lm = nr.load_lm(args.lm, args.device, context_tokens=ctx)
    scorer = lm.scorer(scorer_options(args, path, lists))
    # the LM positions of every forward pass (padding included): instrumentation only
    positions = [0]
    forward = scorer._forward

    def counting_forward(ids, *a, **kw):
        positions[0] += int(np.prod(ids.shape))
        return forward(ids, *a, **kw)

    scorer._forward = counting_forward
    # the context length each hypothesis is scored after (tokens; the public costs() wrapped)
    context_sum, context_max, costs = [0], [0], scorer.costs

    def measuring_costs(states, rows, hyps, *a, **kw):
        lengths = (states[0] >= 0).sum(1).cpu().numpy()[np.asarray(rows, dtype=np.int64)]
        context_sum[0] += int(lengths.sum())
        context_max[0] = max(context_max[0], int(lengths.max(initial=0)))
        return costs(states, rows, hyps, *a, **kw)

    scorer.costs = measuring_costs
    scorer.words = scorer.tokens = 0
    startup = time.perf_counter() - _STARTED
    rss_before = peak_rss_mb()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    cuda_peak_mb(device, reset=True)
    res, seconds, cpu = clocked(lambda: rescore(lists, scorer, Weights(), args.history), device)
    np.save(args.costs_out, res.nn_cost)
    out = {"path": path, "context_tokens": ctx, "documents": len(lists.documents()), "utterances": len(lists),
           "hypotheses": int(len(res.nn_cost)), "words": int(scorer.words), "tokens": int(scorer.tokens),
           "mean_context_tokens": context_sum[0] / max(1, len(res.nn_cost)), "max_context_tokens": context_max[0],
           "lm_positions": positions[0], "seconds": seconds, "cpu_seconds": cpu, "startup_seconds": startup,
           "rss_before_scoring_mb": rss_before, "threads": torch.get_num_threads(), "settings": scorer.settings(),
           "device": str(args.device), **({"gpu": torch.cuda.get_device_name(device), "gpu_peak_mb":
                                          cuda_peak_mb(device)} if cuda else {})}
    ref = os.path.join(args.nbest, "ref.txt")
    if os.path.isfile(ref):
        from nbest_rescore.evaluation.wer import compute_wer
        from nbest_rescore.io.references import read_references

        report = compute_wer(read_references(ref), res.one_best, ref)
        out["wer"] = report.wer
    return out


def run_once(args, path: str, ctx: int, lm: str, costs_out: str) -> dict:
    """One measurement: up to ``1 + --retries`` attempts of :func:`attempt`, until one
    ran with other processes at most ``--max-other-cores``; else the least disturbed
    attempt. Adds ``attempts``."""
    best = None
    for i in range(1 + max(0, args.retries)):
        r = attempt(args, path, ctx, lm, costs_out)
        r["attempts"] = i + 1
        if best is None or (r["other_cores"] or 0) < (best["other_cores"] or 0):
            best = r
        best["attempts"] = i + 1
        if r["other_cores"] is None or r["other_cores"] <= args.max_other_cores:
            return r
        if i < args.retries:
            print(f"  {path} ctx {ctx}: other processes used {r['other_cores']:.2f} cores ({r['seconds']:.1f} s); "
                  f"running it again", file=sys.stderr, flush=True)
    return best


def attempt(args, path: str, ctx: int, lm: str, costs_out: str) -> dict:
    """One measured worker run in a fresh interpreter, after waiting for quiet."""
    waited = wait_for_quiet((), args.max_other_cores, args.quiet_wait)
    cmd = [*module_command("benchmarks.hf_scoring"), "--lm", lm, "--nbest", args.nbest,
           "--context-tokens", str(ctx), "--max-tokens", str(args.max_tokens), "--batch-size", str(args.batch_size),
           "--dtype", args.dtype, "--history", args.history, "--threads", str(args.threads),
           "--device", args.device, "--worker", path, "--costs-out", costs_out]
    if args.max_docs:
        cmd += ["--max-docs", str(args.max_docs)]
    if args.join_docs:
        cmd.append("--join-docs")
    if args.nbest_size:
        cmd += ["--nbest-size", str(args.nbest_size)]
    w = run_measured(cmd, load_pids=())
    if w["rc"] != 0:
        sys.exit(f"path {path} at context {ctx} failed (exit {w['rc']}): {w['stderr'][-3000:]}")
    r = json.loads(w["stdout"].strip().splitlines()[-1])
    r.update({"process_seconds": w["seconds"], "peak_rss_mb": w["peak_rss_mb"],
              "process_cpu_seconds": w["cpu_seconds"], "other_cores": w["other_cores"],
              "steal_cores": w["steal_cores"],
              "waited_for_quiet_s": round(waited, 1),
              "warnings": [ln for ln in w["stderr"].splitlines() if ln.startswith("WARNING")]})
    return r


def summarise(runs, max_other: float = float("inf")) -> dict:
    """The medians of one cell's runs; ``undisturbed_*``: of the runs during which other
    processes used at most ``max_other`` cores (None if none was)."""
    med = lambda k: median(r[k] for r in runs)  # noqa: E731
    first = runs[0]
    s = med("seconds")
    row = {k: first[k] for k in ("path", "context_tokens", "documents", "utterances", "hypotheses", "words",
                                 "tokens", "mean_context_tokens", "max_context_tokens", "lm_positions", "threads",
                                 "settings", "warnings")}
    row.update({"runs": len(runs), "seconds": s, "runs_s": [round(r["seconds"], 2) for r in runs],
                "words_per_s": first["words"] / s, "tokens_per_s": first["tokens"] / s,
                "hyps_per_s": first["hypotheses"] / s, "cpu_seconds": med("cpu_seconds"),
                "startup_seconds": med("startup_seconds"), "peak_rss_mb": med("peak_rss_mb"),
                "peak_rss_runs_mb": [round(r["peak_rss_mb"], 1) for r in runs],
                "rss_before_scoring_mb": med("rss_before_scoring_mb"),
                "other_cores": [r["other_cores"] for r in runs], "steal_cores": [r["steal_cores"] for r in runs],
                "max_other_cores": max((r["other_cores"] or 0.0) for r in runs),
                "attempts": [r.get("attempts", 1) for r in runs]})
    quiet = [r["seconds"] for r in runs if r["other_cores"] is None or r["other_cores"] <= max_other]
    row["undisturbed_runs"] = len(quiet)
    row["undisturbed_seconds"] = median(quiet) if quiet else None
    row["undisturbed_words_per_s"] = first["words"] / row["undisturbed_seconds"] if quiet else None
    if "wer" in first:
        row["wer"] = first["wer"]
    if "gpu" in first:
        row.update({"device": first["device"], "gpu": first["gpu"], "gpu_peak_mb": med("gpu_peak_mb")})
    return row


def hf_machine(threads: int, device: str) -> dict:
    """:func:`benchmarks.harness.machine` with the transformers version and the CPU's
    bfloat16 flags."""
    import transformers

    from nbest_rescore.models.quantize import cpu_has_fast_bfloat16

    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        flags = []
    return machine(threads, device, transformers=transformers.__version__,
                   bf16_flags=sorted(f for f in flags if f in ("avx512_bf16", "amx_bf16", "amx_tile")),
                   cpu_has_fast_bfloat16=bool(cpu_has_fast_bfloat16()))


def measure(args, lm: str, tmp: str) -> dict:
    import numpy as np

    paths = args.paths + (["padded_nemo"] if args.nemo_batching else [])
    cells = [(p, c) for c in args.context_tokens for p in paths]
    runs = {cell: [] for cell in cells}
    costs = {}
    for i in range(args.repeat):
        for path, ctx in cells:  # interleaved, so that load from elsewhere hits all paths alike
            f = os.path.join(tmp, f"{path}_{ctx}.npy")
            r = run_once(args, path, ctx, lm, f)
            runs[(path, ctx)].append(r)
            if i == 0:
                costs[(path, ctx)] = np.load(f)
            print(f"[{path} ctx {ctx} run {i + 1}/{args.repeat}] {r['seconds']:.1f} s, "
                  f"{r['words'] / r['seconds']:.0f} words/s, peak RSS {r['peak_rss_mb']:.0f} MB, "
                  f"other cores {r['other_cores']}", file=sys.stderr, flush=True)
    rows = [summarise(runs[cell], args.max_other_cores) for cell in cells]
    for row in rows:
        ref = costs.get(("tree", row["context_tokens"]))
        c = costs[(row["path"], row["context_tokens"])]
        row["max_abs_diff_vs_tree"] = None if ref is None else float(np.abs(c - ref).max())
    ratios, quiet = {}, {}
    for ctx in args.context_tokens:
        cell = {r["path"]: r for r in rows if r["context_tokens"] == ctx}
        for other in ("padded", "padded_nemo"):
            if "tree" in cell and other in cell:
                ratios[f"tree/{other} @{ctx}"] = cell["tree"]["words_per_s"] / cell[other]["words_per_s"]
                a, b = cell["tree"]["undisturbed_seconds"], cell[other]["undisturbed_seconds"]
                quiet[f"tree/{other} @{ctx}"] = b / a if a and b else None
    return {"rows": rows, "speedup_words_per_s": ratios, "speedup_words_per_s_undisturbed": quiet,
            "runs": {f"{p}@{c}": v for (p, c), v in runs.items()}}


def format_table(out: dict) -> str:
    m = out["machine"]
    lines = [f"machine: {m['cpu']} ({m['cpu_count']} cores), {m['threads']} torch threads, torch {m['torch']}, "
             f"transformers {m['transformers']}; load average at start {m['load_average_at_start']}",
             f"lm: {out['lm']}; lists: {out['nbest']} (first {out['max_docs'] or 'all'} documents"
             f"{', read as one document' if out['join_docs'] else ''}"
             f"{', first %d hypotheses each' % out['nbest_size'] if out['nbest_size'] else ''}), "
             f"history {out['history']}, "
             f"max_tokens {out['max_tokens']}, batch_size {out['batch_size']}, medians of {out['repeat']} runs",
             "| path | context | mean/max context used | utts | hyps | words | tokens | LM positions | median s | words/s "
             "| tokens/s | peak RSS MB | max abs diff vs tree | other cores (max) | undisturbed runs: median s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in out["rows"]:
        d = r["max_abs_diff_vs_tree"]
        lines.append(f"| {r['path']} | {r['context_tokens']} | "
                     f"{r['mean_context_tokens']:.0f}/{r['max_context_tokens']} | "
                     f"{r['utterances']} | {r['hypotheses']:,} | "
                     f"{r['words']:,} | {r['tokens']:,} | {r['lm_positions']:,} | {r['seconds']:.1f} | "
                     f"{r['words_per_s']:,.0f} | {r['tokens_per_s']:,.0f} | {r['peak_rss_mb']:,.0f} | "
                     f"{'-' if d is None else f'{d:.1e}'} | {r['max_other_cores']:.2f} | {r['undisturbed_runs']}: "
                     f"{'-' if r['undisturbed_seconds'] is None else '%.1f' % r['undisturbed_seconds']} |")
    for k, v in out["speedup_words_per_s"].items():
        u = out["speedup_words_per_s_undisturbed"].get(k)
        lines.append(f"speed-up {k} (words/s): {v:.2f}x" + ("" if u is None else f"; undisturbed runs only: {u:.2f}x"))
    wers = {f"{r['path']}@{r['context_tokens']}": r["wer"] for r in out["rows"] if "wer" in r}
    if wers:
        lines.append("WER at the default weights: " + ", ".join(f"{k} {v:.2f}%" for k, v in wers.items()))
    for r in out["rows"]:
        for w in r["warnings"]:
            lines.append(f"{r['path']}@{r['context_tokens']}: {w}")
    return "\n".join(lines)


def random_gpt2(out: str, args, config: dict) -> dict:
    """Write the random recipe-sized GPT-2 (``examples/random_gpt2.py``, ``config``
    overriding its shape) into ``out``; returns its shape (layers, dimensions, heads,
    positions, and ``config``)."""
    cmd = [sys.executable, str(REPO / "examples" / "random_gpt2.py"), "--text", args.bpe_text, "--out", out,
           "--vocab-size", str(args.vocab_size), "--bpe-lines", str(args.bpe_lines), "--config-json",
           json.dumps(config)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"examples/random_gpt2.py failed: {res.stderr[-2000:]}")
    with open(os.path.join(out, "config.json")) as f:
        saved = json.load(f)
    return {**{k: saved[k] for k in ("n_layer", "n_embd", "n_head", "n_positions")}, **config}


def main(argv=None):
    parsed = parse_or_work(parse_args, worker, argv)
    if parsed is None:
        return
    _, args = parsed
    out = {"lm": args.lm, "nbest": os.path.abspath(args.nbest), "max_docs": args.max_docs,
           "nbest_size": args.nbest_size,
           "join_docs": args.join_docs,
           "context_tokens": args.context_tokens, "history": args.history, "max_tokens": args.max_tokens,
           "batch_size": args.batch_size, "dtype": args.dtype, "repeat": args.repeat,
           "max_other_cores": args.max_other_cores, "machine": hf_machine(args.threads, args.device)}
    with tempfile.TemporaryDirectory() as tmp:
        lm = args.lm
        if lm is None:
            config = json.loads(args.model_config) if args.model_config else {}
            t = time.perf_counter()
            model = random_gpt2(os.path.join(tmp, "gpt_random"), args, config)
            lm = "hf:" + os.path.join(tmp, "gpt_random")
            out["lm"] = {"random_gpt2": model, "vocab_size": args.vocab_size,
                         "bpe_text": args.bpe_text, "bpe_lines": args.bpe_lines,
                         "note": "random weights: speed and memory only"}
            print(f"random recipe-sized GPT-2 written in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        out.update(measure(args, lm, tmp))
    out["machine"]["load_average_at_end"] = list(os.getloadavg())
    print(format_table(out))
    write_json(args.json, out)


if __name__ == "__main__":
    run_main(main)
