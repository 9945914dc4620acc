#!/usr/bin/env python3
"""Markdown tables of experiment 1 of docs/amn_convergence.md (the thesis's PTB regime,
``local/thesis_regime.sh``): one line per run and one per row (mean and spread over
its seeds), beside the thesis's own PTB figures (``000`` Table B.1).

Usage: python recipes/abc-nbest/local/convergence_table.py EXP_DIR [--valid FILE] [--json OUT]

Reads every ``EXP_DIR/ROW_sSEED.json`` (the train summary with its learning curve) and
scores the run's best weights (``ROW_sSEED.pt``) on all of ``--valid`` (default: the
benchmark's lm_valid.txt) with ``nbest_rescore.api.perplexity``: the same 10k training
vocabulary for every run, so the perplexities compare. A run still training (no JSON)
is listed from its ``.last.pt`` as "running", with the lm_valid perplexity of its best
weights so far; the rows' means count finished runs only.
"""
import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path

import nbest_rescore as nr
from nbest_rescore.io.checkpoint import load_checkpoint

#: 000 Table B.1 (PTB valid perplexity, 100-125 units): the thesis's figure for each row.
THESIS = {"gru-dropout": ("GRU + Dropout (125)", 116), "amn-vanilla": ("AMN (5 x 100)", 144),
          "amn-dropmem": ("AMN + Drop-Mem", 108), "amn-anneal-dropmem": ("AMN + Anneal + Drop-Mem", None),
          "amn-anneal-dropmem-itl": ("AMN + Anneal + Drop-Mem + Implicit", 103),
          # issue 46: the rows regularised alike (no thesis figure)
          "amn-anneal-dropmem-out": ("AMN + Anneal + Drop-Mem + output dropout", None),
          "amn-anneal-dropmemvec": ("AMN + Anneal + Drop-Mem on the memcell vectors", None),
          "amn-anneal-dropmemvec-05": ("AMN + Anneal + Drop-Mem on the memcell vectors, dropout 0.5", None),
          "gru-dropout-in": ("GRU + Dropout on the input only", None)}
DATA = Path(__file__).resolve().parents[4] / "shared" / "data" / "abc-nbest"


def run_facts(exp: Path, name: str, valid: str) -> dict:
    """Facts of one run: its curve, where the best point was, speed, lm_valid perplexity."""
    summary = exp / f"{name}.json"
    running = not summary.is_file()
    if running:
        info = load_checkpoint(str(exp / f"{name}.last.pt")).get("info") or {}
        curve, words_per_s = info.get("curve") or [], info.get("words_per_s")
    else:
        d = json.loads(summary.read_text())
        curve, words_per_s = d["curve"], d["words_per_s"]
    if not curve:
        return {}
    best = min(range(len(curve)), key=lambda i: curve[i]["valid_ppl"])
    out = {"running": running, "points": len(curve), "best": curve[best], "last": curve[-1],
           "words_per_s": words_per_s, "stopped_early": False}
    if (exp / f"{name}.pt").is_file():  # a running run's best weights so far
        out["lm_valid_ppl"] = nr.perplexity(nr.load_lm(str(exp / f"{name}.pt")), valid).perplexity
    if not running:
        cfg = (load_checkpoint(str(exp / f"{name}.pt")).get("info") or {}).get("train_config") or {}
        patience = (cfg.get("optim") or {}).get("patience", 0)
        out["stopped_early"] = len(curve) - 1 - best >= patience
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("exp")
    p.add_argument("--valid", default=str(DATA / "lm" / "lm_valid.txt"))
    p.add_argument("--json")
    args = p.parse_args()
    exp = Path(args.exp)
    names = sorted({re.sub(r"\.(last\.pt|json)$", "", f.name) for f in exp.iterdir()
                    if re.match(r".+_s\d+\.(last\.pt|json)$", f.name)})
    runs = {n: run_facts(exp, n, args.valid) for n in names}
    print("| run | points | stopped | best point: epoch, words (M) | CPU min to best | words/s | valid ppl (60k, best point) | lm_valid ppl (all 126k) | memcells at best: min attention; entropy; cosine |")
    print("|---|---:|---|---|---:|---:|---:|---:|---|")
    for n, r in runs.items():
        if not r:
            continue
        b = r["best"]
        h = b.get("memcells")
        health = f"{min(h['mean_attention']):.3f}; {h['attention_entropy_bits']:.2f}; {h['memcell_cosine']:.2f}" if h else "-"
        stop = "running" if r["running"] else ("early stopping" if r["stopped_early"] else "time cap")
        lm = f"{r['lm_valid_ppl']:.1f}" if "lm_valid_ppl" in r else "-"
        lm += " (so far)" if r["running"] and "lm_valid_ppl" in r else ""
        print(f"| {n} | {r['points']} | {stop} | {b['epoch']}, {b['words'] / 1e6:.2f} | {b['cpu_seconds'] / 60:.1f} | "
              f"{r['words_per_s']:,.0f} | {b['valid_ppl']:.1f} | {lm} | {health} |")
    print()
    print("| row (thesis name) | seeds | lm_valid ppl: mean | spread (min-max) | thesis PTB valid |")
    print("|---|---:|---:|---|---:|")
    rows = {}
    for n, r in runs.items():
        if r and not r["running"]:  # a row's figures are its finished runs'
            rows.setdefault(n.rsplit("_s", 1)[0], []).append(r["lm_valid_ppl"])
    for row, ppls in rows.items():
        name, thesis = THESIS.get(row, (row, None))
        spread = f"{min(ppls):.1f}-{max(ppls):.1f}" if len(ppls) > 1 else "-"
        print(f"| {row} ({name}) | {len(ppls)} | {statistics.mean(ppls):.1f} | {spread} | {thesis or '-'} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "rows": rows}, indent=2, default=str))


if __name__ == "__main__":
    sys.exit(main())
