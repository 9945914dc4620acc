#!/usr/bin/env python
"""N-best rescoring memory: peak RSS of the default prefix-tree path against the list
size K and the scorer's batch size, each pair in a fresh subprocess.

Every (K, batch size) pair scores lists of K hypotheses with the toolkit's default path,
``rescore(..., history="none")`` with ``NnScorer(batch_size=B)`` (``mode="tree"``, all
other settings default), and reports:

* RSS after reading the lists and loading the model (the baseline), the peak RSS
  while scoring (``ru_maxrss`` after resetting it at the baseline, see
  :func:`reset_peak_rss`; ``peak - baseline`` is what scoring adds) and the peak of
  the whole process (reading the whole N-best directory included);
* words/s (words and ``</s>`` of the hypotheses; one timed pass after one untimed
  warm-up list);
* the scorer's frontier: the most state rows the tree walk keeps at once
  (:func:`~nbest_rescore.rescoring.prefix_tree.frontier_rows` over the forests of
  :meth:`~nbest_rescore.rescoring.scorer.NnScorer.tree_forests`) and their MB.

Lists: for K up to 100 (the benchmark's lists are 100-best) the first K hypotheses of
each utterance's list. For K > 100 the lists are SYNTHETIC but made of REAL
hypotheses: the 100-best lists of ceil(K/100) consecutive utterances are concatenated
into one list, cut to K (a 1000-best list = the hypotheses of 10 utterances; trailing
utterances that do not fill a whole list are left out). The tree and list sizes are then
those of real hypotheses: prefixes are shared within each utterance's part only.

With history ``none`` every hypothesis starts from the initial state, so the hypotheses
of all lists of one ``rescore`` call (64 lists) share one prefix tree: the list size
changes how many hypotheses a call holds (64 K), and the scorer splits a call into
forests within its state and bookkeeping budgets
(:meth:`~nbest_rescore.rescoring.scorer.NnScorer.tree_forests`; column ``group``: the
largest forest's hypotheses). Scoring adds, per model call, the logits and
log-softmax [rows, V] and the states of its rows, rows = min(batch size, width of a
tree level) (column ``rows``), and per forest the frontier states and index arrays, both
within ``state_budget_bytes`` (256 MB by default). Short lists can leave large batches
unfilled (K=10: 640 hypotheses per call), so the growth from K=10 includes the batch
filling up; from K=100 to K=1000 the same utterances give the same hypotheses, in
10 times fewer, 10 times longer lists.

With ``--scale K [K ...]`` this script runs ``python -m benchmarks.score_memory`` instead
(same arguments): peak RSS and time of the whole ``score`` command on the lists
copied K times.

The verdict line per model compares the growth of the scoring peak RSS with K
(smallest to largest, at each batch size) with its growth over the batch sizes (at each
K) and says whether every process peak stays under ``--limit-mb`` (4096 MB).

Example::

    python -m benchmarks.rescore_memory --lm /tmp/tiny.pt /tmp/dnc.pt \\
        --nbest ../shared/data/abc-nbest/dev --list-sizes 10,100,1000 \\
        --batch-sizes 64,256,1024 --threads 1 --json /tmp/memory.json
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from dataclasses import replace

from benchmarks.harness import (clocked, cuda_peak_mb, machine, module_command, peak_rss_mb, run_main,
                                write_json)
from benchmarks.rescore_speed import CHUNK_UTTS

LIST_SIZE = 100  # hypotheses per list in the benchmark's N-best lists


def int_list(text: str):
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 10,100,1000, got {text!r}")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return values


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lm", required=True, nargs="+", help="checkpoint(s) (.pt); one verdict line per model")
    p.add_argument("--nbest", required=True, help="Kaldi N-best directory (e.g. abc-nbest/dev)")
    p.add_argument("--list-sizes", type=int_list, default=[10, 100, 1000],
                   help="hypotheses per list, K (default: 10,100,1000; K > 100 merges utterances)")
    p.add_argument("--batch-sizes", type=int_list, default=[64, 256, 1024],
                   help="NnScorer batch_size values (default: 64,256,1024)")
    p.add_argument("--max-utts", type=int, default=None,
                   help="only the first N utterances of the directory (before merging)")
    p.add_argument("--limit-mb", type=float, default=4096.0, help="peak RSS limit of the verdict (default: 4096)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (RSS is host memory)")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--worker", nargs=3, default=None, metavar=("CKPT", "K", "B"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("max_utts", "threads"):
        v = getattr(args, name)
        if v is not None and v < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {v}")
    return args


def make_lists(nbest, k: int):
    """Lists of (at most) ``k`` hypotheses from ``nbest`` (an NbestSet of real lists).

    k <= 100: each utterance's first k hypotheses. k > 100: the lists of
    ceil(k / 100) consecutive utterances concatenated in order (keys, hypotheses and
    costs kept) and cut to k; the merged list takes the first utterance's id with
    ``+<n>`` (n utterances) and its document. Trailing utterances that do not fill a
    merged list are dropped.

    Returns:
        (NbestSet, utterances per list, utterances used).
    """
    import numpy as np

    from nbest_rescore.types import NbestList, NbestSet

    utts = nbest.utterances
    if k <= LIST_SIZE:
        lists = tuple(replace(u, keys=u.keys[:k], hyps=u.hyps[:k], ac_cost=u.ac_cost[:k],
                              lm_cost=u.lm_cost[:k], graph_cost=u.graph_cost[:k]) for u in utts)
        return NbestSet(lists, nbest.doc_source, nbest.source), 1, len(utts)
    m = math.ceil(k / LIST_SIZE)
    lists = []
    for a in range(0, len(utts) - m + 1, m):
        part = utts[a:a + m]
        lists.append(NbestList(
            utt_id=f"{part[0].utt_id}+{m}", doc_id=part[0].doc_id,
            keys=tuple(x for u in part for x in u.keys)[:k],
            hyps=tuple(h for u in part for h in u.hyps)[:k],
            ac_cost=np.concatenate([u.ac_cost for u in part])[:k],
            lm_cost=np.concatenate([u.lm_cost for u in part])[:k],
            graph_cost=np.concatenate([u.graph_cost for u in part])[:k]))
    return NbestSet(tuple(lists), nbest.doc_source, nbest.source), m, len(lists) * m


def current_rss_mb() -> float:
    """Resident set size now (``/proc/self/statm``; the peak so far where it is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return peak_rss_mb()


def reset_peak_rss() -> bool:
    """Reset this process' peak RSS (``ru_maxrss``, VmHWM) to its current RSS (Linux
    >= 4.0: write 5 to ``/proc/self/clear_refs``); False where that is not possible,
    and the peak then includes what came before."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def frontier(scorer, lists, init) -> dict:
    """Frontier of the scorer's tree walk over ``lists`` in the calls ``rescore`` makes
    (``CHUNK_UTTS`` lists each, all from the initial state): most state rows kept at
    once, their MB, the forests' node count, their largest group of hypotheses and the
    most rows of one model call (the batch size, or fewer where a tree level is narrower)."""
    from nbest_rescore.rescoring.history_graph import scoring_graph
    from nbest_rescore.rescoring.prefix_tree import frontier_rows, plan_segments

    rows_max, nodes, group_max, call_max = 0, 0, 0, 0
    utts = lists.utterances
    row_bytes = sum(s[:1].numel() * s.element_size() for s in init)
    for a in range(0, len(utts), CHUNK_UTTS):
        seqs = scorer.encode([h for u in utts[a:a + CHUNK_UTTS] for h in u.hyps])
        for sl, forest in scorer.tree_forests(init, [0] * len(seqs), seqs):
            graph = scoring_graph(forest, scorer.vocab.eos, scorer.max_ngram_order)
            plans = plan_segments(graph, scorer.vocab.eos, scorer.batch_size, scorer.max_tokens,
                                  scorer.max_segment)
            rows_max = max(rows_max, frontier_rows(plans))
            call_max = max([call_max] + [len(c.src) for chunks in plans for c in chunks])
            nodes += forest.num_nodes
            group_max = max(group_max, len(forest.end_node))
    return {"frontier_rows": rows_max, "frontier_mb": rows_max * row_bytes / 2**20,
            "state_row_bytes": row_bytes, "tree_nodes": nodes, "largest_tree_group_hyps": group_max,
            "largest_call_rows": call_max}


def worker(args) -> dict:
    """Score one (checkpoint, K, batch size) in this process; returns its measurements."""
    import torch

    from nbest_rescore.device import resolve_device
    from nbest_rescore.io.kaldi_nbest import read_kaldi_nbest_dir
    from nbest_rescore.models import load_model
    from nbest_rescore.rescoring.combine import Weights
    from nbest_rescore.rescoring.history import rescore
    from nbest_rescore.rescoring.scorer import NnScorer
    from nbest_rescore.types import NbestSet

    if args.threads:
        torch.set_num_threads(args.threads)
    ckpt, k, batch = args.worker[0], int(args.worker[1]), int(args.worker[2])
    nbest = read_kaldi_nbest_dir(args.nbest)
    nbest = NbestSet(nbest.utterances[:args.max_utts], nbest.doc_source, nbest.source)
    lists, per_list, used = make_lists(nbest, k)
    del nbest
    if not len(lists):
        raise SystemExit(f"no list of {k} hypotheses: --max-utts {args.max_utts} gives fewer than "
                         f"{per_list} utterances")
    device = resolve_device(args.device)
    model, vocab, _ = load_model(ckpt, device)
    load_peak = peak_rss_mb()  # reading the whole directory, then cutting it, may peak here
    baseline = current_rss_mb()
    reset = reset_peak_rss()
    scorer = NnScorer(model, vocab, device, batch_size=batch)
    rescore(NbestSet(lists.utterances[:1], lists.doc_source), scorer, Weights(), "none")  # warm-up
    _, seconds, _ = clocked(lambda: rescore(lists, scorer, Weights(), "none"), device)
    peak = peak_rss_mb()  # before the frontier count below (which builds the forests again)
    hyps = lists.num_hyps()
    words = sum(len(h) + 1 for u in lists.utterances for h in u.hyps)
    out = {"lm": ckpt, "model": model.name, "vocab_size": len(vocab), "list_size": k,
           "batch_size": batch, "effective_batch_size": scorer.batch_size,
           "utterances_per_list": per_list, "utterances_used": used, "lists": len(lists),
           "hypotheses": hyps, "mean_list_size": hyps / len(lists), "words": words,
           "seconds": seconds, "words_per_s": words / seconds,
           "rss_after_load_mb": baseline, "peak_rss_mb": peak, "scoring_growth_mb": peak - baseline,
           "peak_rss_since_load_only": reset, "process_peak_rss_mb": max(peak, load_peak),
           "threads": torch.get_num_threads()}
    if device.type == "cuda":
        out["cuda_peak_allocated_mb"] = cuda_peak_mb(device)
    out.update(frontier(scorer, lists, scorer.initial_state(1)))
    return out


def list_note(k: int, per_list: int) -> str:
    if per_list == 1:
        return f"real {k}-best lists (first {k} hypotheses of each utterance)" if k < LIST_SIZE else "real lists"
    return f"synthetic {k}-best made of real hypotheses of {per_list} utterances"


def verdict(runs, limit_mb: float) -> str:
    """One line: scoring peak RSS growth with K (per batch size) against growth with
    the batch size (per K), and the largest process peak against ``limit_mb``."""
    ks = sorted({r["list_size"] for r in runs})
    bs = sorted({r["batch_size"] for r in runs})
    peak = {(r["list_size"], r["batch_size"]): r["peak_rss_mb"] for r in runs}
    by_k = "/".join(f"{peak[ks[-1], b] - peak[ks[0], b]:+.0f}" for b in bs)
    by_b = "/".join(f"{peak[k, bs[-1]] - peak[k, bs[0]]:+.0f}" for k in ks)
    top = max(runs, key=lambda r: r["process_peak_rss_mb"])
    ok = "under" if top["process_peak_rss_mb"] < limit_mb else "OVER"
    line = (f"{runs[0]['model']} ({os.path.basename(runs[0]['lm'])}): peak RSS K {ks[0]}->{ks[-1]}: "
            f"{by_k} MB at batch {'/'.join(map(str, bs))}")
    if len(bs) > 1:
        line += f"; batch {bs[0]}->{bs[-1]}: {by_b} MB at K {'/'.join(map(str, ks))}"
    return (line + f"; largest process peak {top['process_peak_rss_mb']:.0f} MB (K {top['list_size']}, batch "
            f"{top['batch_size']}): {ok} {limit_mb:.0f} MB")


def format_table(out: dict) -> str:
    m = out["machine"]
    lines = [f"machine: {m['cpu']} ({m['cpu_count']} cores), {m['threads']} torch thread(s), torch {m['torch']}, "
             f"device {m['device']}; load average at start {m['load_average_at_start']}",
             f"lists: {out['nbest']} (first {out['max_utts'] or 'all'} utterances), default tree path, "
             f"history none; RSS in MB: after loading, peak while scoring, growth = peak - load, "
             f"peak of the whole process; group = most hypotheses in one prefix forest, rows = most rows "
             f"in one model call, frontier = most state rows kept at once",
             f"{'model':<10} {'K':>5} {'batch':>5} {'lists':>5} {'hyps':>7} {'words':>8} {'nodes':>8} "
             f"{'group':>6} {'rows':>5} {'frontier':>8} {'fr. MB':>7} {'words/s':>8} {'RSS load':>8} "
             f"{'peak RSS':>8} {'growth':>7} {'proc. peak':>10}"]
    notes = {}
    for r in out["runs"]:
        notes[r["list_size"]] = list_note(r["list_size"], r["utterances_per_list"])
        batch = str(r["batch_size"]) if r["effective_batch_size"] == r["batch_size"] \
            else f"{r['effective_batch_size']}*"
        lines.append(f"{r['model']:<10} {r['list_size']:>5} {batch:>5} {r['lists']:>5} {r['hypotheses']:>7} "
                     f"{r['words']:>8} {r['tree_nodes']:>8} {r['largest_tree_group_hyps']:>6} "
                     f"{r['largest_call_rows']:>5} {r['frontier_rows']:>8} {r['frontier_mb']:>7.1f} "
                     f"{r['words_per_s']:>8.0f} {r['rss_after_load_mb']:>8.0f} {r['peak_rss_mb']:>8.0f} "
                     f"{r['scoring_growth_mb']:>7.0f} {r['process_peak_rss_mb']:>10.0f}")
    for k, note in sorted(notes.items()):
        lines.append(f"K={k}: {note}")
    if any(r["effective_batch_size"] != r["batch_size"] for r in out["runs"]):
        lines.append("*: batch size capped by the model's max_batch_rows(state_budget_bytes)")
    if not all(r["peak_rss_since_load_only"] for r in out["runs"]):
        lines.append("note: the peak RSS could not be reset after loading (no /proc/self/clear_refs): "
                     "peak RSS includes reading the lists")
    lines.extend(f"verdict: {v}" for v in out["verdicts"])
    return "\n".join(lines)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--scale" in argv:  # the whole score command against the set size: benchmarks/score_memory.py
        from benchmarks import score_memory

        score_memory.main(argv)
        return
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return
    out = {"nbest": args.nbest, "max_utts": args.max_utts, "list_sizes": args.list_sizes,
           "batch_sizes": args.batch_sizes, "limit_mb": args.limit_mb, "machine": machine(args.threads, args.device),
           "runs": [], "verdicts": []}
    common = ["--nbest", args.nbest, "--device", args.device]
    for name in ("max_utts", "threads"):
        if getattr(args, name):
            common += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    for ckpt in args.lm:
        runs = []
        for k in args.list_sizes:
            for b in args.batch_sizes:
                print(f"[{os.path.basename(ckpt)} K={k} batch={b}] running ...", file=sys.stderr, flush=True)
                cmd = [*module_command("benchmarks.rescore_memory"), "--lm", ckpt, *common,
                       "--worker", ckpt, str(k), str(b)]
                res = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
                if res.returncode != 0:
                    sys.exit(f"{ckpt} K={k} batch={b} failed (exit {res.returncode})")
                runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
        out["runs"].extend(runs)
        out["verdicts"].append(verdict(runs, args.limit_mb))
    for r in out["runs"]:
        r["lists_note"] = list_note(r["list_size"], r["utterances_per_list"])
    print(format_table(out))
    write_json(args.json, out)


if __name__ == "__main__":
    run_main(main)
