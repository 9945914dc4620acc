#!/usr/bin/env python3
"""Markdown table of the models of a recipe run: size, recurrent cost, training and
memcell health (the thesis's ablation, ``run.sh --conf-set cpu-ablation``).

Usage: python recipes/abc-nbest/local/ablation_table.py EXP_DIR MODEL [MODEL ...]

Reads ``EXP_DIR/<m>.pt`` (parameters, training seconds, words trained and words/s of
the last epoch, the validation perplexity and the memcell health the trainer stored at
its last validation: mean attention per memcell, attention entropy in bits, mean
pairwise memcell cosine, padding left out) and ``EXP_DIR/ppl_<m>.json`` (stage 2:
perplexity on all of lm_valid). A missing file leaves its cells at ``-``.
"""
import json
import sys
from pathlib import Path

from nbest_rescore.io.checkpoint import load_checkpoint
from nbest_rescore.models import build_model
from nbest_rescore.models.cost import recurrent_macs


def row(exp: Path, m: str) -> dict:
    """The facts of model ``m`` (empty when its checkpoint is missing)."""
    path = exp / f"{m}.pt"
    if not path.is_file():
        return {}
    ckpt = load_checkpoint(str(path))
    info = ckpt.get("info") or {}
    cfg = info.get("train_config") or {}
    last = (info.get("history") or [{}])[-1]
    out = {"params": info.get("parameters") or {}, "seconds": info.get("seconds"), "tokens": last.get("tokens"),
           "words_per_s": info.get("words_per_s"), "valid_ppl": info.get("best_valid_ppl"),
           "health": last.get("memcells")}
    if cfg.get("model"):
        vocab = len(ckpt["vocab"]) if "vocab" in ckpt else 43050
        out["macs"] = recurrent_macs(build_model(cfg["model"], cfg.get("model_config") or {}, vocab))
    ppl = exp / f"ppl_{m}.json"
    if ppl.is_file():
        out["lm_valid_ppl"] = json.loads(ppl.read_text()).get("perplexity")
    return out


def _cell(v, fmt="{:,.0f}"):
    return "-" if v is None else fmt.format(v)


def line(m: str, r: dict) -> str:
    """One Markdown row."""
    p, h = r.get("params") or {}, r.get("health")
    health = "-"
    if h:
        health = (f"{min(h['mean_attention']):.3f}; {h['attention_entropy_bits']:.2f}; "
                  f"{_cell(h.get('memcell_cosine'), '{:.2f}')}")
    return " | ".join(["", m, _cell(p.get("total")), _cell(p.get("without_embeddings")), _cell(r.get("macs")),
                       _cell(r.get("seconds") and r["seconds"] / 60, "{:.1f}"), _cell(r.get("tokens")),
                       _cell(r.get("words_per_s")), _cell(r.get("valid_ppl"), "{:.1f}"),
                       _cell(r.get("lm_valid_ppl"), "{:.1f}"), health, ""]).strip()


def main(exp, models):
    exp = Path(exp)
    print("| model | parameters | without embeddings | recurrent multiply-adds / token | training (min) "
          "| words trained | words/s | valid ppl (30k in-domain) | lm_valid ppl "
          "| memcells at the last validation: min mean attention; entropy (bits); cosine |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for m in models:
        print(line(m, row(exp, m)))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__.split("\n\n")[1])
    main(sys.argv[1], sys.argv[2:])
