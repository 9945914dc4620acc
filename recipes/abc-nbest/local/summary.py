#!/usr/bin/env python3
"""Markdown tables per recipe run: model size, training, perplexity and tuned WER,
then the training curve (validation perplexity per epoch) of every trained model.

Usage: python recipes/abc-nbest/local/summary.py EXP_DIR MODEL [MODEL ...]

Reads, for each model m (``m+cache`` = the trained m wrapped in the neural cache),
``EXP_DIR/m.pt`` (parameters, epochs, training time, best validation perplexity, and
the per-epoch ``history`` the trainer stores in the checkpoint's info),
``EXP_DIR/ppl_m.json`` (lm_valid perplexity) and ``EXP_DIR/tune_m_H/tune.json`` for
H in first-pass and none (best WER, lambda, delta; with ``tune --folds``: the bootstrap
95% interval of that WER, the cross-validated WER and the paired-bootstrap probability
that the cross-validated 1-best makes fewer word errors than the first pass, rank 1 of
each list; docs/evaluation.md). Missing files leave blank cells; checkpoints without a
history (older ones) get no rows in the second table.
"""
import json
import sys
from pathlib import Path

from nbest_rescore.evaluation.bootstrap import BootstrapWer
from nbest_rescore.evaluation.report import model_row
from nbest_rescore.io.checkpoint import load_checkpoint


def _json(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


#: The cells _wer gives per history.
WER_CELLS = ("WER {h} history (lambda, delta)", "95% interval", "CV WER", "P(CV better than first pass)")


def _wer(exp, m, history):
    """The WER_CELLS of model m's tune.json for ``history`` (blank where unknown)."""
    d = _json(exp / f"tune_{m}_{history}" / "tune.json")
    if not d:
        return [""] * len(WER_CELLS)
    b, boot, cv = d["best"], d.get("bootstrap") or {}, d.get("cross_validation")
    p = (boot.get("p_better_than_first_pass") or {}).get("cross_validated")
    return [f"{b['wer']:.2f} ({b['interp']:g}, {b['lm_weight']:g})",
            BootstrapWer(**boot["dev_tuned"]).interval() if "dev_tuned" in boot else "",
            "" if cv is None else f"{cv['wer']:.2f}", "" if p is None else f"{p:.3f}"]


def _fmt(value, spec):
    return "" if value is None else format(value, spec)


def _history(ckpt):
    """The per-epoch training history stored in a checkpoint's info: a list of dicts
    with ``epoch``, ``train_ppl``, ``valid_ppl`` (absent without a validation set),
    ``seconds`` (since the start of training) and ``lr``; [] if none is stored."""
    info = load_checkpoint(str(ckpt)).get("info") or {}
    return list(info.get("history") or [])


def _health(cells):
    """``[0.2, 0.8]; 0.61; 0.42`` from a history entry's ``memcells`` (AMN), else ''."""
    if not cells:
        return ""
    attn = ", ".join(f"{a:.2f}" for a in cells["mean_attention"])
    cos = cells.get("memcell_cosine")
    return f"[{attn}]; {cells['attention_entropy_bits']:.2f}; " + ("-" if cos is None else f"{cos:.2f}")


def epoch_table(exp, models):
    """Lines of a Markdown table with one row per epoch of every trained model (each
    checkpoint once: ``m+cache`` shares m's); the best validation perplexity in bold."""
    lines = ["| model | epoch | minutes | words trained | lr | train ppl | valid ppl (in training) "
             "| memcells: mean attention; entropy (bits); cosine |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    seen = set()
    for m in models:
        base = m.split("+")[0]
        ckpt = exp / f"{base}.pt"
        if base in seen or not ckpt.exists():
            continue
        seen.add(base)
        hist = _history(ckpt)
        valid = [h["valid_ppl"] for h in hist if h.get("valid_ppl") is not None]
        best = min(valid) if valid else None
        for h in hist:
            v = h.get("valid_ppl")
            vs = _fmt(v, ".1f")
            if v is not None and v == best:
                vs = f"**{vs}**"
            secs = h.get("seconds")
            minutes = _fmt(None if secs is None else secs / 60.0, ".1f")
            lines.append(f"| {base} | {h.get('epoch', '')} | {minutes} | {_fmt(h.get('tokens'), ',')} | "
                         f"{_fmt(h.get('lr'), '.3g')} | {_fmt(h.get('train_ppl'), '.1f')} | {vs} | "
                         f"{_health(h.get('memcells'))} |")
    return lines


def main(argv):
    exp, models = Path(argv[0]), argv[1:]
    wer_heads = [c.format(h=h) for h in ("first-pass", "no") for c in WER_CELLS]
    print("| model | parameters (M) | without embeddings (M) | epochs | training (min) | "
          "best valid ppl (training's valid set) | lm_valid ppl | " + " | ".join(wer_heads) + " |")
    print("|---|" + "---:|" * (6 + len(wer_heads)))
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
        cells += _wer(exp, m, "first-pass") + _wer(exp, m, "none")
        print("| " + " | ".join(cells) + " |")
    print()
    print("Validation perplexity per epoch (best in bold; the checkpoint keeps the best epoch's weights):")
    print()
    print("\n".join(epoch_table(exp, models)))


if __name__ == "__main__":
    main(sys.argv[1:])
