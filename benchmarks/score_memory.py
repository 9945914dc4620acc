#!/usr/bin/env python
"""Peak memory and time of the whole ``nbest-rescore score`` command against the size
of the N-best set: the lists copied K times, for each K in ``--scale``.

For each K the benchmark's lists (e.g. abc-nbest ``dev/``) are written K times over
into a temporary Kaldi N-best directory, every copy renamed so that all are distinct:
copy c > 1 gets ``_c<c>`` after each utterance id and document id (``abcr0004-000-7``
-> ``abcr0004-000_c2-7``, document ``abcr0004`` -> ``abcr0004_c2``). Every file of the
directory is copied that way: the hypotheses (``text``, ``words``), the costs
(``ac_cost``, ``lm_cost``, ...: keyed by hypothesis), the maps keyed by utterance
(``utt2doc``, ``ref.txt``, ``decoder_1best.txt``, ...) or by document (``doc2genre``,
``doc2synth``); ``words.txt`` and other files once. K = 1 is the directory itself.

Each run is the real command line, ``python -m nbest_rescore score --lm CKPT --nbest
DIR --ref DIR/ref.txt --out OUT --threads N --history H --no-progress [--score-args]``,
measured by :func:`benchmarks.harness.run_measured`: its wall-clock time and peak
resident set size (the command's own ``ru_maxrss``: its peak alone,
reading, scoring and writing included). ``--code DIR`` runs the
package found in DIR (``PYTHONPATH=DIR``; e.g. a ``git worktree`` of an older commit,
for a before/after table); the default is this repository.

Reported per K: hypotheses, median peak RSS (MB) and seconds of ``--repeat`` runs, and
their ratios to the smallest K: peak RSS, and seconds per 1,000 hypotheses. The outputs
are checked too: the ``nn_cost`` and ``text`` of each K's first run must be the smallest
K's, copied K times with the keys renamed, byte for byte (each copy is scored in other
spans and batches than the original, so this holds only if a hypothesis' costs do not
depend on its company; ``copies_identical`` in the JSON); with ``--check-whole-set`` one
more run at the smallest K reads the lists as one span (``--span-hyps 0``) and must
write the same files (``whole_set_identical``). The issue's
targets: peak RSS at the largest K at most 1.2x that at the smallest, and time per
hypothesis within 10%. Before each run the benchmark waits (up to ``--quiet-wait``
seconds) until other processes use at most ``--max-other-cores`` cores, and records the
cores they used during the run (:class:`benchmarks.harness.OtherLoad`), since other
people's jobs on a shared machine distort timings. The SHA-256 of each run's ``text``
and ``nn_cost`` files and its WER are recorded too, to compare the outputs of two codes.

Example (before and after a change; the README's table)::

    git worktree add /tmp/before HEAD
    python -m benchmarks.score_memory --lm exp/abc-nbest-cpu-ensemble/gru-fwd.pt \\
        --nbest ../shared/data/abc-nbest/dev --scale 1 4 16 --repeat 3 3 1 --threads 2 \\
        --code /tmp/before --json before.json
    python -m benchmarks.score_memory --lm exp/abc-nbest-cpu-ensemble/gru-fwd.pt \\
        --nbest ../shared/data/abc-nbest/dev --scale 1 4 16 --repeat 3 --threads 2 --json after.json

(``python -m benchmarks.rescore_memory --scale K ...`` runs this script.)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time

from benchmarks.harness import REPO, add_repeat, machine, median, run_measured, wait_for_quiet, write_json
#: Files keyed by hypothesis key (``<uttid>-<n>``), by utterance id, or by document id;
#: every other file is copied once.
BY_KEY = ("text", "words_text", "words", "ac_cost", "acwt", "lm_cost", "lmwt.lmonly", "lmwt.withlm", "lmwt.nolm")
BY_UTT = ("utt2doc", "utt2spk", "ref.txt", "decoder_1best.txt")
BY_DOC = ("doc2genre", "doc2synth")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lm", required=True, help="checkpoint (.pt) for score --lm")
    p.add_argument("--nbest", required=True, help="Kaldi N-best directory with ref.txt (e.g. abc-nbest/dev)")
    p.add_argument("--scale", type=int, nargs="+", required=True, metavar="K",
                   help="copies of the lists, e.g. 1 4 16 (ratios are to the smallest)")
    add_repeat(p, [3], "runs per K (medians): one value for all, or one per --scale value", nargs="+")
    p.add_argument("--threads", type=int, default=2, help="score --threads (default: 2)")
    p.add_argument("--history", default="first-pass", help="score --history (default: first-pass)")
    p.add_argument("--score-args", default="", help="more score options, one string (e.g. '--span-hyps 5000')")
    p.add_argument("--code", default=str(REPO), help="folder whose nbest_rescore package runs (default: this repo)")
    p.add_argument("--work", default=None, help="folder for the copies and outputs (default: a temporary one)")
    p.add_argument("--max-other-cores", type=float, default=0.3,
                   help="wait before a run until other processes use at most this many cores (default: 0.3)")
    p.add_argument("--quiet-wait", type=float, default=60.0, help="wait at most this long for that (default: 60 s)")
    p.add_argument("--check-whole-set", action="store_true",
                   help="one more run at the smallest K with --span-hyps 0, whose text and nn_cost must be "
                        "byte-identical to the streamed run's")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    if not os.path.isfile(args.lm):
        p.error(f"--lm {args.lm}: no such checkpoint file")
    if not os.path.isfile(os.path.join(args.nbest, "ref.txt")):
        p.error(f"--nbest {args.nbest}: no such N-best directory with a ref.txt (e.g. ../shared/data/abc-nbest/dev)")
    if min(args.scale) < 1 or min(args.repeat) < 1 or args.threads < 1:
        p.error("--scale, --repeat and --threads take integers >= 1")
    if len(args.repeat) not in (1, len(args.scale)):
        p.error(f"--repeat: give one value, or one per --scale value ({len(args.scale)})")
    return args


def _renamed(first: str, kind: str, suffix: str) -> str:
    if kind == "key":
        utt, _, rank = first.rpartition("-")
        return f"{utt}{suffix}-{rank}"
    return first + suffix


def copy_lists(src: str, dst: str, k: int) -> None:
    """Write the N-best directory ``src`` ``k`` times over into ``dst`` (see the module
    docstring), one line at a time."""
    os.makedirs(dst, exist_ok=True)
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if not os.path.isfile(path):
            continue
        kind = "key" if name in BY_KEY else "utt" if name in BY_UTT else "doc" if name in BY_DOC else None
        with open(os.path.join(dst, name), "wb") as out:
            for c in range(1, (k if kind else 1) + 1):
                suffix = "" if c == 1 else f"_c{c}"
                with open(path, "rb") as f:
                    for raw in f:
                        if not suffix:
                            out.write(raw)
                            continue
                        line = raw.decode("utf-8")
                        fields = line.split(" ", 1)
                        first = _renamed(fields[0].rstrip("\n"), kind, suffix)
                        rest = fields[1] if len(fields) > 1 else "\n"
                        if name in ("utt2doc", "utt2spk"):
                            rest = rest.rstrip("\n") + suffix + "\n"
                        out.write((first + " " + rest if len(fields) > 1 else first + "\n").encode("utf-8"))


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(2**20), b""):
            h.update(block)
    return h.hexdigest()


def copies_identical(base_out: str, out: str, k_base: int, k: int) -> dict:
    """Whether ``out``'s ``text`` and ``nn_cost`` are ``base_out``'s (a run on the lists
    copied ``k_base`` times) copied up to ``k`` times with the keys renamed as
    :func:`copy_lists` renames them: {file name: bool}. Only ``k_base == 1`` is compared
    (else None: the copies of a copied set are not a prefix-free renaming)."""
    if k_base != 1:
        return {n: None for n in ("text", "nn_cost")}
    result = {}
    for name, kind in (("text", "utt"), ("nn_cost", "key")):
        with open(os.path.join(base_out, name), "rb") as f:
            base = f.read().decode("utf-8").splitlines(keepends=True)
        want = []
        for c in range(1, k + 1):
            suffix = "" if c == 1 else f"_c{c}"
            for line in base:
                first, sep, rest = line.partition(" ")
                want.append((_renamed(first.rstrip("\n"), kind, suffix) + sep + rest) if suffix else line)
        with open(os.path.join(out, name), "rb") as f:
            result[name] = f.read() == "".join(want).encode("utf-8")
    return result


def run_once(args, lists: str, out: str, extra=()) -> dict:
    """One measured ``score`` run (``extra``: more options)."""
    waited = wait_for_quiet((), args.max_other_cores, args.quiet_wait)
    cmd = [sys.executable, "-m", "nbest_rescore", "score", "--lm", os.path.abspath(args.lm), "--nbest", lists,
           "--ref", os.path.join(lists, "ref.txt"), "--out", out, "--threads", str(args.threads),
           "--history", args.history, "--no-progress", *args.score_args.split(), *extra]
    env = {**os.environ, "PYTHONPATH": os.path.abspath(args.code)}
    r = run_measured(cmd, env=env, cwd=tempfile.gettempdir(), load_pids=())
    if r["rc"] != 0:
        sys.exit(f"score failed (exit {r['rc']}): {r['stderr'][-2000:]}")
    wer = json.load(open(os.path.join(out, "wer.json")))
    return {"seconds": r["seconds"], "peak_rss_mb": r["peak_rss_mb"], "cpu_seconds": r["cpu_seconds"],
            "other_cores": r["other_cores"], "steal_cores": r["steal_cores"], "waited_for_quiet_s": round(waited, 1),
            "hypotheses": wer["hypotheses"], "wer": {n: w["wer"] for n, w in wer["wer"].items()},
            "sha256": {n: sha256(os.path.join(out, n)) for n in ("text", "nn_cost")}}


def summarise(runs_by_k: dict) -> list:
    """Per K: the medians and the ratios to the smallest K."""
    rows = []
    for k in sorted(runs_by_k):
        runs = runs_by_k[k]
        rows.append({"k": k, "hypotheses": runs[0]["hypotheses"], "runs": len(runs),
                     "peak_rss_mb": median(r["peak_rss_mb"] for r in runs),
                     "seconds": median(r["seconds"] for r in runs),
                     "max_other_cores": max((r["other_cores"] or 0.0) for r in runs)})
    base = rows[0]
    for row in rows:
        row["s_per_1k_hyps"] = 1000.0 * row["seconds"] / row["hypotheses"]
        row["rss_vs_smallest"] = row["peak_rss_mb"] / base["peak_rss_mb"]
        row["s_per_hyp_vs_smallest"] = row["s_per_1k_hyps"] / (1000.0 * base["seconds"] / base["hypotheses"])
    return rows


def format_table(out: dict) -> str:
    rows = out["rows"]
    k0 = rows[0]["k"]
    lines = [f"code: {out['code']}; lm {out['lm']}; lists {out['nbest']} copied K times; --threads {out['threads']}, "
             f"--history {out['history']} {out['score_args']}".rstrip(),
             f"| K | hypotheses | runs | peak RSS MB | seconds | s per 1k hyps | RSS vs K={k0} | s per 1k hyps vs K={k0} "
             f"| other cores (max) |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['k']} | {r['hypotheses']:,} | {r['runs']} | {r['peak_rss_mb']:,.0f} | {r['seconds']:.1f} | "
                     f"{r['s_per_1k_hyps']:.3f} | {r['rss_vs_smallest']:.2f}x | {r['s_per_hyp_vs_smallest']:.2f}x | "
                     f"{r['max_other_cores']:.2f} |")
    for k, same in (out.get("copies_identical") or {}).items():
        lines.append(f"K={k}: text and nn_cost byte-identical to K={k0}'s copied K times: {same}")
    if "whole_set_identical" in out:
        lines.append(f"K={k0} read as one span (--span-hyps 0): the same files: {out['whole_set_identical']}")
    last = rows[-1]
    if len(rows) > 1:
        rss_ok = "met" if last["rss_vs_smallest"] <= 1.2 else "NOT met"
        t_ok = "met" if abs(last["s_per_hyp_vs_smallest"] - 1.0) <= 0.1 else "NOT met"
        lines.append(f"verdict: peak RSS at K={last['k']} is {last['rss_vs_smallest']:.2f}x K={k0} (target <= 1.2x: "
                     f"{rss_ok}); time per hypothesis {last['s_per_hyp_vs_smallest']:.2f}x (target within 10%: {t_ok})")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    repeats = dict(zip(args.scale, args.repeat * len(args.scale) if len(args.repeat) == 1 else args.repeat))
    out = {"lm": args.lm, "nbest": args.nbest, "code": os.path.abspath(args.code), "threads": args.threads,
           "history": args.history, "score_args": args.score_args, "scale": args.scale, "repeat": repeats,
           "machine": machine(args.threads, "cpu"), "runs": {}}
    with tempfile.TemporaryDirectory(dir=args.work) as work:
        for k in sorted(set(args.scale)):
            lists = args.nbest if k == 1 else os.path.join(work, f"lists_x{k}")
            if k != 1:
                t = time.perf_counter()
                copy_lists(args.nbest, lists, k)
                print(f"[K={k}] copies written in {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
            runs = []
            for i in range(repeats[k]):
                r = run_once(args, os.path.abspath(lists), os.path.join(work, f"out_x{k}_{i}"))
                print(f"[K={k} run {i + 1}/{repeats[k]}] {r['seconds']:.1f} s, peak RSS {r['peak_rss_mb']:.0f} MB, "
                      f"{r['hypotheses']} hypotheses, other cores {r['other_cores']}", file=sys.stderr, flush=True)
                runs.append(r)
            out["runs"][k] = runs
            k0 = min(args.scale)
            same = copies_identical(os.path.join(work, f"out_x{k0}_0"), os.path.join(work, f"out_x{k}_0"), k0, k)
            out.setdefault("copies_identical", {})[k] = same
            print(f"[K={k}] text and nn_cost = K={k0}'s copied K times, byte for byte: {same}", file=sys.stderr,
                  flush=True)
            if args.check_whole_set and k == k0:
                r = run_once(args, os.path.abspath(lists), os.path.join(work, "out_whole"), ("--span-hyps", "0"))
                out["whole_set_run"] = r
                out["whole_set_identical"] = {n: r["sha256"][n] == runs[0]["sha256"][n] for n in r["sha256"]}
                print(f"[K={k} --span-hyps 0] {r['seconds']:.1f} s, peak RSS {r['peak_rss_mb']:.0f} MB; "
                      f"files identical to the streamed run's: {out['whole_set_identical']}", file=sys.stderr,
                      flush=True)
            if k != 1:
                import shutil

                shutil.rmtree(lists, ignore_errors=True)
    out["rows"] = summarise(out["runs"])
    print(format_table(out))
    write_json(args.json, out)


if __name__ == "__main__":
    main()
