#!/usr/bin/env python
"""How ``train``'s text reading scales with the corpus: the token store
(:mod:`nbest_rescore.training.text_store`, memory-mapped) at 10M, 100M and 1B words,
against the reader before it (commit 742520c: the text read into Python lists).

For each size N (``--sizes``) a corpus of N words is made by sampling whole documents of
``--lm``'s ``lm_train.txt`` with replacement (``numpy.random.default_rng(--seed)``),
written with a blank line between documents until N words are reached (the document
that crosses N is kept whole); a corpus of the same size and seed already in ``--work``
is reused. Then, one after the other (nothing else of this script runs meanwhile):

* ``wc -w FILE``: its wall time and MB/s, the I/O and tokenising floor, measured in the
  same run. The page cache is not dropped: the corpus was just written (or read) and
  fits in memory, so ``wc`` and ``prepare`` both read it from the cache.
* prepare: a subprocess (this script's ``--_prepare``) that calls
  :func:`~nbest_rescore.training.text_store.prepare_text` with
  ``WordEncoding(max_size=10000, restrict_to=LM/vocab.txt)``, no validation text,
  ``PrepareOptions(progress=False)`` (``--jobs``: its worker processes; default the usable
  cores) into a fresh store. Its wall time (process start to exit, imports included) and
  MB/s of text; its peak RSS as ``/usr/bin/time -v`` reports it (the largest single
  process: the parent or one worker); the peak total memory of the process tree (PSS of
  the parent and its forkserver workers summed, so shared pages count once, sampled every
  0.25 s from /proc); and the store's bytes per corpus word (``ids.bin`` + ``docs.bin`` +
  ``vocab.txt`` + ``manifest.json``).
* train on the store: ``nbest-rescore train`` of a one-thread GRU (embeddings 32,
  hidden 32, full softmax over the store's 10k words, batch 32, BPTT 20, one epoch,
  ``checkpoint_interval: off``, no validation) with ``--max-seconds --train-seconds``
  (60 s: a few hundred updates on this model; train has no step limit, so the run is cut
  by its time budget and the updates made are counted). It runs in a small runner
  process (written to ``--work``) that wraps
  :func:`nbest_rescore.training.step.train_step` (as the pass engine calls it) to count the updates and note when the
  first one returns, then calls the CLI (``nbest_rescore.cli.main``) in-process. "s to
  first step" is wall time from just before this script starts the runner (interpreter
  start and imports included) to the end of the first optimiser step; peak RSS is the
  runner's own ``ru_maxrss`` at exit (memory-mapped store pages it touched count; the
  JSON also has its anonymous and file-backed resident MB at exit, from /proc).
* today's reader (``--baseline-sizes``, default 10M): the same runner and config with
  ``PYTHONPATH`` on a git worktree of commit 742520c (``--old``, made if missing) and
  ``data.train`` the plain text file. It holds the text in Python lists (~97 bytes/word),
  so 100M (~9.7 GB) runs only when asked and 1B never fits.
* torchrun (``--torchrun-size``, default 100M, when among ``--sizes``): the same runner
  under ``torchrun --standalone --nproc_per_node 2`` (gloo on CPU; batch 32 = 16 per
  rank, one thread each) on that size's store; each rank prints its own peak RSS,
  compared with the single process on the smallest size.

The targets of the issue are reported (met or missed), not asserted: 1B words prepared
in <= 15 min on 2 cores; a store of <= 4.5 bytes/word; train's peak RSS at 1B <= 1.2x
at 10M; <= 30 s to the first step at 1B; each torchrun rank's peak RSS on 100M <= 1.2x
the single process's on 10M.

    python -m benchmarks.corpus_scale --sizes 10000000,100000000,1000000000 \\
        --json /tmp/corpus_scale.json --plot docs/corpus_scale.png
    python -m benchmarks.corpus_scale --sizes 1000000,3000000 --torchrun-size 3000000   # a quick check
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.harness import MB, REPO, machine, module_command

OLD_COMMIT = "742520c"
TARGETS = {"prepare_1b_s": 15 * 60, "bytes_per_word": 4.5, "train_rss_ratio": 1.2, "first_step_1b_s": 30.0,
           "torchrun_rss_ratio": 1.2}

# The train runner: counts the optimiser steps and notes when the first one returns, runs
# the CLI in this process, prints one line of JSON (every rank under torchrun).
RUNNER = r'''
import json, os, resource, sys, time
T0 = float(os.environ.get("CORPUS_SCALE_T0") or time.time())
import nbest_rescore
try:  # (the module whose train_step the pass calls: the trainer's before issue 47, as at --old)
    from nbest_rescore.training import passes as engine
except ImportError:
    from nbest_rescore.training import trainer as engine
plain = engine.train_step
marks = {"steps": 0, "first": None, "imported": time.time()}

def train_step(*args, **kwargs):
    out = plain(*args, **kwargs)
    marks["steps"] += 1
    if marks["first"] is None:
        marks["first"] = time.time()
    return out

engine.train_step = train_step
from nbest_rescore.cli import main
rc = 0
try:
    main(sys.argv[1:], standalone_mode=False)
except SystemExit as exc:
    rc = exc.code or 0
end = time.time()
status = {}
with open("/proc/self/status") as f:  # at exit: anonymous vs file-backed (the mapped store) resident pages
    for line in f:
        if line.startswith(("RssAnon:", "RssFile:", "VmHWM:")):
            status[line.split(":")[0]] = int(line.split()[1]) / 1024.0
record = os.path.join(os.environ["CORPUS_SCALE_RECORDS"], "rank%d.json" % int(os.environ.get("RANK", 0)))
with open(record, "w") as f:  # one file per rank: torchrun's ranks share one stdout, and their lines can interleave
    json.dump({
    "rss_anon_mb_at_exit": status.get("RssAnon"), "rss_file_mb_at_exit": status.get("RssFile"),
    "rank": int(os.environ.get("RANK", 0)), "rc": rc, "package": os.path.dirname(nbest_rescore.__file__),
    "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    "imported_s": marks["imported"] - T0, "first_step_s": None if marks["first"] is None else marks["first"] - T0,
    "steps": marks["steps"], "seconds": end - T0}, f)
'''


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10000000,100000000,1000000000", help="corpus sizes in words, comma-separated")
    p.add_argument("--baseline-sizes", default="10000000",
                   help="sizes (among --sizes) also trained with today's reader (commit 742520c); '' for none")
    p.add_argument("--torchrun-size", type=int, default=100_000_000,
                   help="the size (among --sizes) trained with torchrun, 2 ranks; 0: none")
    p.add_argument("--lm", default=str(REPO.parent / "shared/data/abc-nbest/lm"),
                   help="folder of lm_train.txt and vocab.txt")
    p.add_argument("--work", default=None, help="folder for the corpora, stores and runs (default: a folder in /tmp, "
                                                "kept for reuse)")
    p.add_argument("--old", default="/tmp/old742", help="git worktree of commit 742520c (made if missing)")
    p.add_argument("--seed", type=int, default=0, help="seed of the document sampling")
    p.add_argument("--jobs", type=int, default=None, help="prepare's worker processes (default: the usable cores)")
    p.add_argument("--train-seconds", type=float, default=60.0, help="train's --max-seconds")
    p.add_argument("--timeout", type=float, default=7200.0, help="seconds after which one measured command is killed")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--plot", help="write a PNG of train's peak RSS against corpus words here")
    p.add_argument("--_prepare", nargs=2, metavar=("CORPUS", "STORE"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


# --- corpora ---------------------------------------------------------------------------------

def read_documents(path):
    """lm_train's documents as strings (each line ending in \\n, then one blank line) and
    their word counts."""
    docs, words, lines, n = [], [], [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                lines.append(line if line.endswith("\n") else line + "\n")
                n += len(line.split())
            elif lines:
                docs.append("".join(lines) + "\n")
                words.append(n)
                lines, n = [], 0
    if lines:
        docs.append("".join(lines) + "\n")
        words.append(n)
    return docs, words


def make_corpus(lm_train: str, n_words: int, seed: int, work: Path) -> dict:
    """A corpus of at least ``n_words`` words of whole sampled documents (reused when its
    facts file says it was made with this size and seed and the file has its size)."""
    import numpy as np

    path = work / f"corpus_{n_words}_seed{seed}.txt"
    facts_path = path.with_suffix(".json")
    if path.exists() and facts_path.exists():
        facts = json.loads(facts_path.read_text())
        if facts.get("bytes") == path.stat().st_size and facts.get("source") == os.path.abspath(lm_train):
            return {**facts, "reused": True}
    t0 = time.perf_counter()
    docs, words = read_documents(lm_train)
    words = np.asarray(words, dtype=np.int64)
    rng = np.random.default_rng(seed)
    block = max(1, int(8_000_000 / max(1.0, float(words.mean()))))  # ~8M words a block
    total = n_docs = size = 0
    tmp = path.with_suffix(".txt.part")
    with open(tmp, "w", encoding="utf-8") as f:
        while total < n_words:
            pick = rng.integers(0, len(docs), size=block)
            cum = np.cumsum(words[pick])
            if total + cum[-1] >= n_words:
                pick = pick[:int(np.searchsorted(cum, n_words - total)) + 1]
                cum = cum[:len(pick)]
            text = "".join([docs[i] for i in pick.tolist()])
            size += f.write(text)
            total += int(cum[-1])
            n_docs += len(pick)
    os.replace(tmp, path)
    facts = {"path": str(path), "words": total, "documents": n_docs, "bytes": path.stat().st_size, "seed": seed,
             "source": os.path.abspath(lm_train), "write_s": round(time.perf_counter() - t0, 1)}
    facts_path.write_text(json.dumps(facts, indent=2))
    return {**facts, "reused": False}


# --- measuring -------------------------------------------------------------------------------

def _tree(root: int):
    """The pids of ``root`` and its descendants (from /proc)."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    stat = f.read()
                parent[int(d)] = int(stat[stat.rindex(")") + 2:].split()[1])
            except (OSError, ValueError):
                pass
    out, frontier = {root}, [root]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p and c not in out]
        out.update(kids)
        frontier.extend(kids)
    return out


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class TreeMemory:
    """Samples the summed PSS of a process tree every ``interval`` seconds; ``peak_mb``."""

    def __init__(self, pid: int, interval: float = 0.25):
        self.pid, self.interval, self.peak_kb = pid, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            self.peak_kb = max(self.peak_kb, sum(_pss_kb(p) for p in _tree(self.pid)))
            self._stop.wait(self.interval)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_kb / 1024.0


def run_tree_measured(cmd, timeout: float, env=None, cwd=None, tree: bool = False) -> dict:
    """Run ``cmd``: wall seconds, return code, stdout, stderr (tail), and with ``tree``
    the peak summed PSS of its process tree."""
    t0 = time.time()
    env = {**os.environ, **(env or {}), "CORPUS_SCALE_T0": repr(t0)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                            start_new_session=True)
    mem = TreeMemory(proc.pid) if tree else None
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        timed_out = True
    wall = time.time() - t0
    res = {"wall_s": wall, "rc": proc.returncode, "timed_out": timed_out, "stdout": out, "stderr": err}
    if mem is not None:
        res["tree_pss_mb"] = mem.stop()
    return res


def wc_words(path: str) -> dict:
    r = run_tree_measured(["wc", "-w", path], timeout=3600)
    return {"words": int(r["stdout"].split()[0]), "seconds": r["wall_s"]}


def time_v_rss_mb(stderr: str):
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    return int(m.group(1)) / 1024.0 if m else None


def prepare(corpus: dict, store: Path, args) -> dict:
    if store.exists():
        shutil.rmtree(store)
    cmd = [*module_command("benchmarks.corpus_scale"), "--_prepare", corpus["path"], str(store), "--lm", args.lm]
    if args.jobs:
        cmd += ["--jobs", str(args.jobs)]
    timer = shutil.which("time") or ("/usr/bin/time" if os.path.exists("/usr/bin/time") else None)
    r = run_tree_measured(([timer, "-v"] if timer else []) + cmd, args.timeout, tree=True)
    if r["rc"] != 0:
        return {"error": f"rc {r['rc']}{' (timed out)' if r['timed_out'] else ''}: {r['stderr'][-2000:]}",
                "seconds": r["wall_s"]}
    inner = json.loads(r["stdout"].strip().splitlines()[-1])
    files = {p.name: p.stat().st_size for p in store.iterdir() if p.is_file()}
    store_bytes = sum(files.get(k, 0) for k in ("ids.bin", "docs.bin", "vocab.txt", "manifest.json"))
    return {"seconds": r["wall_s"], "inner_seconds": inner["seconds"], "mb_per_s": corpus["bytes"] / MB / r["wall_s"],
            "peak_rss_mb": time_v_rss_mb(r["stderr"]), "tree_pss_mb": r["tree_pss_mb"], "files": files,
            "store_bytes": store_bytes, "bytes_per_word": store_bytes / corpus["words"], "tokens": inner["tokens"],
            "documents": inner["documents"], "reused": inner["reused"]}


def do_prepare(args) -> None:
    """``--_prepare CORPUS STORE``: prepare_text, its seconds and the store's counts as JSON."""
    from nbest_rescore.training.text_store import PrepareOptions, WordEncoding, prepare_text, text_sources

    t0 = time.perf_counter()
    store, reused = prepare_text(text_sources(args._prepare[0]),
                                 WordEncoding(max_size=10000, restrict_to=os.path.join(args.lm, "vocab.txt")),
                                 args._prepare[1], options=PrepareOptions(jobs=args.jobs, progress=False))
    seconds = time.perf_counter() - t0
    manifest = json.loads((Path(args._prepare[1]) / "manifest.json").read_text())
    print(json.dumps({"seconds": seconds, "reused": reused, "tokens": manifest["tokens"],
                      "documents": manifest["documents"]}))


def train_config(path: Path, train: str, vocab: str, seconds: float) -> None:
    path.write_text(f"""model: gru
model_config:
  embedding_dim: 32
  hidden_size: 32
data:
  train: {train}
vocab:
  max_size: 10000
  restrict_to: {vocab}
optim:
  batch_size: 32
  bptt: 20
  max_epochs: 1
  max_seconds: {seconds}
  threads: 1
  log_interval: 50
  checkpoint_interval: "off"
""")


def train_run(name: str, train: str, args, work: Path, old: bool = False, ranks: int = 1) -> dict:
    """One train run through the runner (cwd ``work``, so that the package comes from
    PYTHONPATH or the installed one, never the current folder)."""
    runner = work / "train_runner.py"
    runner.write_text(RUNNER)
    cfg = work / f"{name}.yaml"
    train_config(cfg, train, os.path.join(os.path.abspath(args.lm), "vocab.txt"), args.train_seconds)
    out = work / f"{name}.pt"
    for p in work.glob(f"{name}.*"):
        if p != cfg and p.is_file():
            p.unlink()
    argv = ["train", "--config", str(cfg), "--out", str(out), "--no-progress", "--max-seconds", str(args.train_seconds)]
    records = work / f"{name}.records"
    shutil.rmtree(records, ignore_errors=True)
    records.mkdir()
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CORPUS_SCALE_RECORDS": str(records)}
    if old:
        env["PYTHONPATH"] = args.old
    else:
        env.pop("PYTHONPATH", None)
    if ranks > 1:
        torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
        cmd = [torchrun, "--standalone", "--nproc_per_node", str(ranks), str(runner)] + argv
    else:
        cmd = [sys.executable, str(runner)] + argv
    r = run_tree_measured(cmd, args.timeout, env=env, cwd=str(work), tree=ranks > 1)
    lines = [json.loads(p.read_text()) for p in sorted(records.glob("rank*.json"))]
    if r["rc"] != 0 or len(lines) != ranks:
        return {"error": f"rc {r['rc']}{' (timed out)' if r['timed_out'] else ''}: {r['stderr'][-2000:]}",
                "wall_s": r["wall_s"]}
    lines.sort(key=lambda d: d["rank"])
    summary = None
    m = re.search(r"^\{.*^\}", r["stdout"], re.S | re.M)
    if m:
        try:
            summary = json.loads(m.group(0))
        except ValueError:
            pass
    res = {"wall_s": r["wall_s"], "ranks": lines, "peak_rss_mb": max(d["maxrss_mb"] for d in lines),
           "first_step_s": max(d["first_step_s"] or float("nan") for d in lines),
           "steps": lines[0]["steps"], "package": lines[0]["package"],
           "words_per_s": (summary or {}).get("words_per_s")}
    if "tree_pss_mb" in r:
        res["tree_pss_mb"] = r["tree_pss_mb"]
    return res


def ensure_old(path: str) -> None:
    if not os.path.exists(os.path.join(path, "nbest_rescore", "__init__.py")):
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", path, OLD_COMMIT], check=True)


# --- report ----------------------------------------------------------------------------------

def _f(x, fmt="{:.1f}"):
    return "-" if x is None else fmt.format(x)


def _size(n: int) -> str:
    for unit, d in (("B", 10 ** 9), ("M", 10 ** 6), ("k", 10 ** 3)):
        if n >= d and n % d == 0:
            return f"{n // d}{unit}"
    return str(n)


def table(rows) -> str:
    head = ("| size | words | prepare s | prepare MB/s | wc -w MB/s | bytes/word | prepare peak RSS MB (largest "
            "process / tree PSS) | train peak RSS MB | s to first step | steps | baseline peak RSS MB / s to "
            "first step |")
    out = [head, "|" + "---|" * head.count(" |")]
    for r in rows:
        p, t, b = r.get("prepare", {}), r.get("train", {}), r.get("baseline")
        base = "-" if b is None else (f"failed ({b['error'][:60]})" if "error" in b
                                      else f"{b['peak_rss_mb']:.0f} / {b['first_step_s']:.1f}")
        if "error" in p:
            out.append(f"| {_size(r['size'])} | {r['corpus']['words']:,} | failed after {p['seconds']:.0f} s | "
                       f"- | {r['wc']['mb_per_s']:.0f} | - | - | - | - | - | {base} |")
            continue
        train = ("failed", "-", "-") if "error" in t else (f"{t['peak_rss_mb']:.0f}", f"{t['first_step_s']:.1f}",
                                                           str(t["steps"]))
        out.append(f"| {_size(r['size'])} | {r['corpus']['words']:,} | {p['seconds']:.1f} | {p['mb_per_s']:.1f} | "
                   f"{r['wc']['mb_per_s']:.0f} | {p['bytes_per_word']:.2f} | "
                   f"{_f(p['peak_rss_mb'], '{:.0f}')} / {p['tree_pss_mb']:.0f} | {train[0]} | {train[1]} | "
                   f"{train[2]} | {base} |")
    return "\n".join(out)


def targets(rows, tr) -> list:
    """Each target of the issue: what was measured and whether it was met."""
    by = {r["size"]: r for r in rows}
    ok = [r for r in rows if "error" not in r.get("train", {"error": 1})]
    out = []
    big = by.get(10 ** 9)
    if big is not None:
        p = big["prepare"]
        out.append(("1B words prepared in <= 15 min", p.get("seconds"),
                    "error" not in p and p["seconds"] <= TARGETS["prepare_1b_s"]))
        t = big.get("train", {})
        out.append(("<= 30 s to the first step at 1B", t.get("first_step_s"),
                    "error" not in t and t["first_step_s"] <= TARGETS["first_step_1b_s"]))
    bpw = [r["prepare"]["bytes_per_word"] for r in rows if "bytes_per_word" in r.get("prepare", {})]
    if bpw:
        out.append(("store <= 4.5 bytes/word", max(bpw), max(bpw) <= TARGETS["bytes_per_word"]))
    if len(ok) >= 2:
        lo, hi = ok[0], ok[-1]
        ratio = hi["train"]["peak_rss_mb"] / lo["train"]["peak_rss_mb"]
        out.append((f"train peak RSS at {_size(hi['size'])} <= 1.2x at {_size(lo['size'])}", ratio,
                    ratio <= TARGETS["train_rss_ratio"]))
    if tr is not None and "error" not in tr:
        out.append((f"each torchrun rank's peak RSS on {_size(tr['size'])} <= 1.2x the single process's on "
                    f"{_size(tr['reference_size'])}", tr["ratio"], tr["ratio"] <= TARGETS["torchrun_rss_ratio"]))
    return [{"target": a, "measured": v, "met": bool(m)} for a, v, m in out]


def plot(rows, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    store = [(r["corpus"]["words"], r["train"]["peak_rss_mb"]) for r in rows if "peak_rss_mb" in r.get("train", {})]
    base = [(r["corpus"]["words"], r["baseline"]["peak_rss_mb"]) for r in rows
            if r.get("baseline") and "peak_rss_mb" in r["baseline"]]
    if store:
        ax.plot(*zip(*store), "o-", label="train on the token store")
    if base:
        ax.plot(*zip(*base), "s--", label="today's reader (742520c, text in lists)")
    ax.set_xscale("log")
    ax.set_xlabel("corpus words")
    ax.set_ylabel("train peak RSS (MB)")
    ax.set_ylim(bottom=0)
    ax.set_title("train's peak memory against corpus size (GRU 32, 1 thread)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


# --- main ------------------------------------------------------------------------------------

def main() -> None:
    args = parse_args()
    if args._prepare:
        do_prepare(args)
        return
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    baseline = {int(s) for s in args.baseline_sizes.split(",") if s.strip()}
    work = Path(args.work or os.path.join(tempfile.gettempdir(), "corpus_scale"))
    work.mkdir(parents=True, exist_ok=True)
    if baseline & set(sizes):
        ensure_old(args.old)
    lm_train = os.path.join(args.lm, "lm_train.txt")
    rows, tr = [], None
    t_start = time.time()
    for n in sizes:
        row = {"size": n}
        row["corpus"] = make_corpus(lm_train, n, args.seed, work)
        print(f"[{_size(n)}] corpus {row['corpus']['words']:,} words, {row['corpus']['bytes'] / MB:.0f} MB"
              f"{' (reused)' if row['corpus']['reused'] else ''}", file=sys.stderr, flush=True)
        wc = wc_words(row["corpus"]["path"])
        row["wc"] = {**wc, "mb_per_s": row["corpus"]["bytes"] / MB / wc["seconds"]}
        store = work / f"corpus_{n}_seed{args.seed}.store"
        row["prepare"] = prepare(row["corpus"], store, args)
        print(f"[{_size(n)}] wc -w {wc['seconds']:.1f} s; prepare {json.dumps(row['prepare'])[:300]}",
              file=sys.stderr, flush=True)
        if "error" not in row["prepare"]:
            row["train"] = train_run(f"train_{n}", str(store), args, work)
            print(f"[{_size(n)}] train {json.dumps(row['train'])[:400]}", file=sys.stderr, flush=True)
        if n in baseline:
            row["baseline"] = train_run(f"baseline_{n}", row["corpus"]["path"], args, work, old=True)
            print(f"[{_size(n)}] baseline {json.dumps(row['baseline'])[:400]}", file=sys.stderr, flush=True)
        if n == args.torchrun_size and "error" not in row["prepare"]:
            tr = {"size": n, **train_run(f"torchrun_{n}", str(store), args, work, ranks=2)}
            print(f"[{_size(n)}] torchrun {json.dumps(tr)[:400]}", file=sys.stderr, flush=True)
        rows.append(row)
    ref = next((r for r in rows if "peak_rss_mb" in r.get("train", {})), None)
    if tr is not None and "error" not in tr and ref is not None:
        tr.update(reference_size=ref["size"], reference_rss_mb=ref["train"]["peak_rss_mb"],
                  ratio=max(d["maxrss_mb"] for d in tr["ranks"]) / ref["train"]["peak_rss_mb"])
    info = machine()
    met = targets(rows, tr)
    print(f"Machine: {info['nproc']} cores ({info['cpu']}), {info['mem_gb']} GB; prepare jobs "
          f"{args.jobs or info['nproc']}; train: GRU 32/32, 10k vocab, batch 32, BPTT 20, 1 thread, "
          f"--max-seconds {args.train_seconds:g}; page cache warm\n")
    print(table(rows))
    if tr is not None:
        if "error" in tr:
            print(f"\ntorchrun (2 ranks, gloo, {_size(tr['size'])} store): failed: {tr['error'][:300]}")
        else:
            ranks = ", ".join(f"rank {d['rank']} {d['maxrss_mb']:.0f} MB" for d in tr["ranks"])
            print(f"\ntorchrun (2 ranks, gloo, {_size(tr['size'])} store): peak RSS {ranks} "
                  f"(tree PSS {tr['tree_pss_mb']:.0f} MB); single process on {_size(tr.get('reference_size', 0))}: "
                  f"{_f(tr.get('reference_rss_mb'), '{:.0f}')} MB; ratio {_f(tr.get('ratio'), '{:.2f}')}; "
                  f"first step {tr['first_step_s']:.1f} s, {tr['steps']} steps")
    print("\nTargets:")
    for t in met:
        print(f"- {t['target']}: {_f(t['measured'], '{:.2f}')} -> {'met' if t['met'] else 'MISSED'}")
    print(f"\n(total {time.time() - t_start:.0f} s)")
    if args.plot:
        plot(rows, args.plot)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"machine": info, "args": {k: v for k, v in vars(args).items() if k != "_prepare"},
                       "rows": rows, "torchrun": tr, "targets": met, "seconds": time.time() - t_start}, f, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
