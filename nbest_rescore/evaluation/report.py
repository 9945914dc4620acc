"""Markdown tables of results written by ``score`` (``wer.json``) and ``tune``
(``tune.json``), with bootstrap intervals, cross-validated WERs and improvement
probabilities where per-utterance errors are known. WER in percent."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import DataError
from ..io.kaldi_text import read_kaldi_text
from ..io.references import read_references
from ..models.loading import checkpoint_summary
from .bootstrap import REPLICATIONS, bootstrap_wer, improvement_probability
from .tune_report import UtteranceErrors
from .wer import utterance_errors


@dataclass(frozen=True)
class RowErrors:
    """Per-utterance word errors of one table row's 1-best: ``ids`` (U utterance ids),
    ``ref_words`` and ``errors`` (int64 [U]) and, for a tune.json with folds,
    ``cv_errors`` (int64 [U], the cross-validated 1-best) or None."""

    ids: Tuple[str, ...]
    ref_words: np.ndarray
    errors: np.ndarray
    cv_errors: Optional[np.ndarray] = None

    def aligned(self, ids: Sequence[str], row: str, base: str) -> "RowErrors":
        """These errors in the utterance order ``ids`` (the baseline ``base``'s).
        Raises DataError when the two rows do not hold the same utterances."""
        if tuple(ids) == self.ids:
            return self
        where = {u: i for i, u in enumerate(self.ids)}
        if len(where) != len(ids) or any(u not in where for u in ids):
            raise DataError(f"rows {row!r} ({len(self.ids)} utterances) and {base!r} ({len(ids)}) do not hold the "
                            f"same utterances, so they cannot be compared utterance by utterance; compare results "
                            f"of the same lists")
        order = np.array([where[u] for u in ids], dtype=np.int64)
        cv = None if self.cv_errors is None else self.cv_errors[order]
        return RowErrors(tuple(ids), self.ref_words[order], self.errors[order], cv)


def _tune_errors(data: dict, path: str) -> Optional[RowErrors]:
    """The dev-tuned (and cross-validated) per-utterance errors of a tune.json, or
    None for one written before tune stored them."""
    if "utterance_errors" not in data:
        return None
    u = UtteranceErrors.from_dict(data["utterance_errors"], path)
    if "dev_tuned" not in u.systems:
        raise DataError(f"{path}: 'utterance_errors' lacks 'dev_tuned'; rewrite it with 'nbest-rescore tune --out'")
    return RowErrors(u.ids, u.ref_words, u.systems["dev_tuned"], u.systems.get("cross_validated"))


def _text_errors(path: str, wer: float, refs, ref_path: str) -> RowErrors:
    """Per-utterance errors of the 1-best ``text`` beside a wer.json, against ``refs``;
    their WER must be the wer.json's ``wer`` (else the references are not the ones
    score used: DataError)."""
    text = Path(path).parent / "text"
    ids, errors, words = utterance_errors(refs, read_kaldi_text(text), f"--ref {ref_path}")
    got = errors.sum() / max(int(words.sum()), 1) * 100.0
    if abs(got - wer) > 1e-6:
        raise DataError(f"{text} scored against --ref {ref_path} gives WER {got:.2f}%, but {path} says {wer:.2f}%: "
                        f"give the references that 'score --ref' used")
    return RowErrors(ids, words, errors)


def wer_row(spec: str, refs=None, ref_path: str = "") -> dict:
    """Parse ``NAME=PATH[:field]`` into a row dict: name, wer, interp, lm_weight,
    ``cv_wer`` (or None) and ``errors`` (:class:`RowErrors` or None, from where
    docs/evaluation.md says; ``refs`` read from ``ref_path``).

    Raises DataError for a malformed spec or a file without the expected fields.
    """
    if "=" not in spec:
        raise DataError(f"row {spec!r}: expected NAME=PATH (e.g. 'GRU=exp/tune_gru/tune.json')")
    name, path = spec.split("=", 1)
    field = None
    if path.endswith((":first_pass", ":rescored", ":oracle")):
        path, field = path.rsplit(":", 1)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read result file {path}: {exc}") from exc
    if "best" in data:
        b = data["best"]
        cv = data.get("cross_validation")
        return {"name": name, "wer": b["wer"], "interp": b["interp"], "lm_weight": b["lm_weight"],
                "cv_wer": None if cv is None else cv["wer"], "errors": _tune_errors(data, path)}
    if "wer" in data and field:
        r = data["wer"][field]
        w = data.get("weights", {})
        interp = w.get("interp") if field == "rescored" else (1.0 if field == "first_pass" else None)
        lw = w.get("lm_weight") if field != "oracle" else None
        errors = _text_errors(path, r["wer"], refs, ref_path) if field == "rescored" and refs is not None else None
        return {"name": name, "wer": r["wer"], "interp": interp, "lm_weight": lw, "cv_wer": None, "errors": errors}
    raise DataError(f"{path}: neither a tune.json (with 'best') nor a wer.json with a ':{field or 'field'}' suffix")


def _columns(rows: List[dict], baselines: Sequence[str]) -> List[Tuple[str, Callable[[dict], str]]]:
    """(header, cell function) of the table's columns after delta."""
    cols: List[Tuple[str, Callable[[dict], str]]] = []
    if any(r["boot"] is not None for r in rows):
        cols += [("95% interval", lambda r: r["boot"].interval() if r["boot"] else ""),
                 ("percentile 95%", lambda r: r["boot"].percentile() if r["boot"] else "")]
    has_cv = any(r["cv_wer"] is not None for r in rows)
    if has_cv:
        cols += [("CV WER %", lambda r: _cell(r["cv_wer"], ".2f")),
                 ("CV 95% interval", lambda r: r["cv_boot"].interval() if r["cv_boot"] else "")]
    for b in baselines:
        cols.append((f"P(better than {b})", lambda r, b=b: _cell(r["p"].get(b), ".3f")))
        if has_cv:
            cols.append((f"P(CV better than {b})", lambda r, b=b: _cell(r["p_cv"].get(b), ".3f")))
    return cols


def _cell(value, spec: str) -> str:
    """A table cell: ``value`` formatted by ``spec``, or empty for None."""
    return "" if value is None else format(value, spec)


def _check_rows(rows: List[dict], baselines: Sequence[str]) -> None:
    """Row names unique; every baseline a row with per-utterance errors over the same
    utterances as each row that has them (whatever the replications). Raises DataError."""
    twice = sorted(n for n, count in Counter(r["name"] for r in rows).items() if count > 1)
    if twice:
        raise DataError(f"row name(s) {', '.join(map(repr, twice))} given more than once: give each NAME=PATH its own "
                        f"NAME")
    by_name = {r["name"]: r for r in rows}
    for b in baselines:
        if b not in by_name:
            raise DataError(f"--baseline {b!r}: no such row; the rows are {', '.join(map(repr, by_name))}")
        base = by_name[b]["errors"]
        if base is None:
            raise DataError(f"--baseline {b!r}: the row has no per-utterance errors (a tune.json written by this "
                            f"version, or a wer.json:rescored with --ref)")
        for r in rows:
            if r["errors"] is not None and r["name"] != b:
                r["errors"].aligned(base.ids, r["name"], b)


def _bootstrap_rows(rows: List[dict], baselines: Sequence[str], replications: int, seed: int) -> None:
    """Add ``boot``, ``cv_boot``, ``p`` and ``p_cv`` (baseline name -> probability) to
    each row (from its ``errors``; None / absent without them or ``replications``);
    the rows and baselines as :func:`_check_rows` left them."""
    by_name = {r["name"]: r for r in rows}
    for r in rows:
        e = r["errors"] if replications else None
        r["boot"] = None if e is None else bootstrap_wer(e.errors, e.ref_words, replications, seed)
        cv = None if e is None else e.cv_errors
        r["cv_boot"] = None if cv is None else bootstrap_wer(cv, e.ref_words, replications, seed)
        r["p"], r["p_cv"] = {}, {}
        for b in baselines:
            base = by_name[b]["errors"]
            if e is None or b == r["name"]:
                continue
            mine = e.aligned(base.ids, r["name"], b)
            r["p"][b] = improvement_probability(base.errors, mine.errors, replications, seed)
            if cv is not None:
                theirs = base.errors if base.cv_errors is None else base.cv_errors
                r["p_cv"][b] = improvement_probability(theirs, mine.cv_errors, replications, seed)


def wer_table(specs: Iterable[str], baselines: Sequence[str] = (), ref: Optional[str] = None,
              replications: int = REPLICATIONS, seed: int = 0) -> str:
    """Markdown table of the ``NAME=PATH[:field]`` rows ``specs``: system, WER %, lambda,
    delta and the bootstrap, CV and ``P(better than B)`` columns per baseline row B of
    docs/evaluation.md (``table``); ``ref``: references for ``wer.json:rescored`` rows;
    ``replications`` 0: no bootstrap columns.

    Raises DataError: a malformed row, a row name given twice, an unknown baseline or one
    without per-utterance errors, or a row and a baseline over different utterances
    (checked with ``replications`` 0 too)."""
    refs = None if ref is None else read_references(ref)
    rows = [wer_row(spec, refs, ref or "") for spec in specs]
    _check_rows(rows, baselines)
    _bootstrap_rows(rows, baselines if replications else (), replications, seed)
    cols = _columns(rows, baselines if replications else ())
    lines = ["| " + " | ".join(["system", "WER %", "lambda", "delta", *[c[0] for c in cols]]) + " |",
             "|---|" + "---:|" * (3 + len(cols))]
    for r in rows:
        cells = [r["name"], f"{r['wer']:.2f}", _cell(r["interp"], "g"), _cell(r["lm_weight"], "g"),
                 *[c[1](r) for c in cols]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# the name api, cli and the recipes use for a checkpoint's table row
model_row = checkpoint_summary


def model_table(paths: Iterable[str]) -> str:
    """Markdown table of :func:`~nbest_rescore.models.loading.checkpoint_summary` of
    checkpoints or ``hf:PATH`` models (parameters in millions; max positions in tokens,
    empty for a model of any length)."""
    lines = ["| checkpoint | model | direction | vocabulary | parameters (M) | without embeddings (M) | "
             "epochs | training (min) | best valid ppl | max positions | dtype |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for p in paths:
        r = model_row(p)
        lines.append(f"| {r['path']} | {r['model']} | {r['direction']} | {r['vocab']} | "
                     f"{r['parameters'] / 1e6:.2f} | {r['without_embeddings'] / 1e6:.2f} | {_cell(r['epochs'], 'd')} | "
                     f"{_cell(r['minutes'], '.1f')} | {_cell(r['best_valid_ppl'], '.1f')} | "
                     f"{_cell(r['max_positions'], 'd')} | {r['dtype']} |")
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
