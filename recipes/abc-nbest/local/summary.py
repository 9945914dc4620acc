#!/usr/bin/env python3
"""One Markdown table per recipe run: model size, training, perplexity and tuned WER.

Usage: python recipes/abc-nbest/local/summary.py EXP_DIR MODEL [MODEL ...]

Reads, for each model m (``m+cache`` = the trained m wrapped in the neural cache),
``EXP_DIR/m.pt`` (parameters, epochs, training time, best validation perplexity),
``EXP_DIR/ppl_m.json`` (lm_valid perplexity) and ``EXP_DIR/tune_m_H/tune.json`` for
H in first-pass and none (best WER, lambda, delta). Missing files leave blank cells.
"""
import json
import sys
from pathlib import Path

from nbest_rescore.evaluation.report import model_row


def _json(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _wer(exp, m, history):
    d = _json(exp / f"tune_{m}_{history}" / "tune.json")
    if not d:
        return ""
    b = d["best"]
    return f"{b['wer']:.2f} ({b['interp']:g}, {b['lm_weight']:g})"


def main(argv):
    exp, models = Path(argv[0]), argv[1:]
    print("| model | parameters (M) | without embeddings (M) | epochs | training (min) | "
          "valid ppl (in-domain) | lm_valid ppl | WER first-pass history (lambda, delta) | WER no history (lambda, delta) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in models:
        base = m.split("+")[0]
        ckpt = exp / f"{base}.pt"
        r = model_row(str(ckpt)) if ckpt.exists() else None
        ppl = _json(exp / f"ppl_{m}.json")
        cells = [m]
        if r:
            cells += [f"{r['parameters'] / 1e6:.2f}", f"{r['without_embeddings'] / 1e6:.2f}",
                      "" if m != base else str(r["epochs"]),
                      "" if m != base or r["minutes"] is None else f"{r['minutes']:.1f}",
                      "" if m != base or r["best_valid_ppl"] is None else f"{r['best_valid_ppl']:.1f}"]
        else:
            cells += [""] * 5
        cells.append(f"{ppl['perplexity']:.1f}" if ppl else "")
        cells += [_wer(exp, m, "first-pass"), _wer(exp, m, "none")]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
