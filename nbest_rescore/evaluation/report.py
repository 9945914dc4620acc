"""Markdown tables of results written by ``score`` (``wer.json``) and ``tune``
(``tune.json``). WER in percent."""
from __future__ import annotations

import json
from typing import Iterable

from ..errors import DataError


def _load(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read result file {path}: {exc}") from exc


def wer_row(spec: str) -> dict:
    """Parse ``NAME=PATH[:field]`` into a row: name, WER and the weights if known.

    Raises DataError for a malformed spec or a file without the expected fields.
    """
    if "=" not in spec:
        raise DataError(f"row {spec!r}: expected NAME=PATH (e.g. 'GRU=exp/tune_gru/tune.json')")
    name, path = spec.split("=", 1)
    field = None
    if path.endswith((":first_pass", ":rescored", ":oracle")):
        path, field = path.rsplit(":", 1)
    data = _load(path)
    if "best" in data:
        b = data["best"]
        return {"name": name, "wer": b["wer"], "interp": b["interp"], "lm_weight": b["lm_weight"]}
    if "wer" in data and field:
        r = data["wer"][field]
        w = data.get("weights", {})
        interp = w.get("interp") if field == "rescored" else (1.0 if field == "first_pass" else None)
        lw = w.get("lm_weight") if field != "oracle" else None
        return {"name": name, "wer": r["wer"], "interp": interp, "lm_weight": lw}
    raise DataError(f"{path}: neither a tune.json (with 'best') nor a wer.json with a ':{field or 'field'}' suffix")


def wer_table(specs: Iterable[str]) -> str:
    """Markdown table with columns system, WER %, lambda, delta."""
    lines = ["| system | WER % | lambda | delta |", "|---|---:|---:|---:|"]
    for spec in specs:
        r = wer_row(spec)
        lam = "" if r["interp"] is None else f"{r['interp']:g}"
        lw = "" if r["lm_weight"] is None else f"{r['lm_weight']:g}"
        lines.append(f"| {r['name']} | {r['wer']:.2f} | {lam} | {lw} |")
    return "\n".join(lines)


def model_row(path: str) -> dict:
    """Facts of one checkpoint for a model-size table: name, reading direction
    (``forward`` or ``backward``, ``model_config.direction``), parameters (total and
    without the input/output embedding matrices), epochs, training minutes and best
    validation perplexity (None where the checkpoint does not record them).

    Raises DataError for an unreadable checkpoint.
    """
    from ..models import load_model

    model, vocab, info = load_model(path)
    params = model.num_parameters()
    seconds = info.get("seconds")
    return {"path": str(path), "model": model.name, "direction": model.direction, "vocab": len(vocab),
            "parameters": params["total"], "without_embeddings": params["without_embeddings"],
            "epochs": info.get("epochs"), "minutes": None if seconds is None else seconds / 60.0,
            "best_valid_ppl": info.get("best_valid_ppl")}


def model_table(paths: Iterable[str]) -> str:
    """Markdown table of :func:`model_row` for checkpoints (parameters in millions)."""
    lines = ["| checkpoint | model | direction | vocabulary | parameters (M) | without embeddings (M) | "
             "epochs | training (min) | best valid ppl |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]

    def fmt(v, spec):
        return "" if v is None else format(v, spec)

    for p in paths:
        r = model_row(p)
        lines.append(f"| {r['path']} | {r['model']} | {r['direction']} | {r['vocab']} | "
                     f"{r['parameters'] / 1e6:.2f} | {r['without_embeddings'] / 1e6:.2f} | {fmt(r['epochs'], 'd')} | "
                     f"{fmt(r['minutes'], '.1f')} | {fmt(r['best_valid_ppl'], '.1f')} |")
    return "\n".join(lines)


def format_wer_table(wer) -> str:
    """Plain-text table of WER reports (name -> :class:`~.wer.WerReport` or its
    ``to_dict()``): WER in percent with substitution, deletion and insertion counts."""
    lines = [f"{'system':<12} {'WER%':>7} {'sub':>6} {'del':>6} {'ins':>6} {'ref words':>9}"]
    for name, r in wer.items():
        r = r if isinstance(r, dict) else r.to_dict()
        lines.append(f"{name:<12} {r['wer']:7.2f} {r['substitutions']:6d} {r['deletions']:6d} "
                     f"{r['insertions']:6d} {r['ref_words']:9d}")
    return "\n".join(lines)
