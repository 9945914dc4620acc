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
