"""The training text as ``train`` reads it: always a token store
(:mod:`nbest_rescore.io.token_store`), memory-mapped (docs/training.md "Prepared text").

``data.train`` is a store made by ``prepare-text``, or a text file or Kaldi rnnlm-style
data directory, which is prepared first into ``<out>.store`` (:func:`default_store`;
reused while its inputs and settings are unchanged). A store is checked against the
config before use: its vocabulary policy (or tokenizer), its word budgets and its source
files (a changed checksum is refused, naming the file). ``data.weights`` (Kaldi's
``data_weights.txt``: ``SOURCE REPEATS WEIGHT`` per line) repeats each training source
per epoch and weights its tokens in the objective.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

import numpy as np

from ..config import TrainConfig
from ..corpus import Documents
from ..errors import DataError
from ..io._common import iter_lines, split_fields
from ..io.token_store import TokenStore, is_store, open_store, source_changes
from . import distributed
from .text_store import Budgets, PrepareOptions, prepare_text, store_settings, text_sources

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceWeight:
    """A training source's ``repeats`` per epoch and objective ``weight`` (Kaldi's
    ``data_weights.txt``)."""

    repeats: int = 1
    weight: float = 1.0


@dataclass(frozen=True)
class TrainData:
    """What a run trains and validates on: the ``store``, the training documents (each
    source repeated, reversed for a backward model, with weights when any differs from
    1), the validation documents (None without), target ids per word (1 for word ids),
    the validation text's words + sentences (the perplexity's denominator)."""

    store: TokenStore
    train: Documents
    valid: Optional[Documents]
    tokens_per_word: float
    valid_words: int

    def id_counts(self, vocab_size: int) -> np.ndarray:
        """int64 [V]: how often each id is a target of the training documents (every
        id but each document's start token), counted over the store in blocks."""
        counts = np.zeros(vocab_size, dtype=np.int64)
        ids, starts, ends = self.train.ids, self.train.starts, self.train.ends
        for a, e in _runs(starts, ends):
            for b in range(a, e, 1 << 24):
                counts += np.bincount(ids[b:min(e, b + (1 << 24))], minlength=vocab_size)[:vocab_size]
        counts -= np.bincount(ids[starts], minlength=vocab_size)[:vocab_size]
        return counts


def _runs(starts: np.ndarray, ends: np.ndarray):
    """The id ranges the documents cover, each document's range once per listing, as
    maximal runs of adjacent documents."""
    if not len(starts):
        return []
    breaks = np.flatnonzero(starts[1:] != ends[:-1]) + 1
    first = np.concatenate([[0], breaks])
    last = np.concatenate([breaks, [len(starts)]]) - 1
    return list(zip(starts[first].tolist(), ends[last].tolist()))


def default_store(out_path) -> str:
    """Where ``train`` prepares a text given as ``data.train``: ``exp/gru.pt`` ->
    ``exp/gru.store``, ``exp/gpt`` -> ``exp/gpt.store``."""
    p = Path(out_path)
    return str(p.with_name((p.stem if p.suffix == ".pt" else p.name) + ".store"))


def load_train_data(cfg: TrainConfig, encoding, out_path, world: distributed.World, direction: str,
                    progress: bool = True) -> TrainData:
    """The store of ``cfg.data`` (prepared by the main rank when ``data.train`` is a
    text; the other ranks wait for it), checked against ``encoding`` and the config,
    with its training and validation documents.

    Raises:
        DataError: what :func:`~.text_store.prepare_text` raises; a store whose encoding,
            budgets or sources differ (naming what); a bad ``data.weights`` file.
    """
    d = cfg.data
    budgets = Budgets(d.max_words, d.max_valid_words)
    if is_store(d.train):
        path = d.train
        if d.valid:
            raise DataError(f"data.valid {d.valid}: data.train is a prepared store, whose validation text is its "
                            f"'dev' source; prepare the store with the validation text instead")
    else:
        path = default_store(out_path)
        sources = text_sources(d.train, d.valid)
        if world.main:
            try:
                _, reused = prepare_text(sources, encoding, path, budgets, PrepareOptions(progress=progress))
                if not reused:
                    log.info("prepared %s into the token store %s", d.train, path)
            except BaseException:
                world.from_main(0.0)
                raise
        ok = world.from_main(1.0)[0]
        if not ok:
            raise DataError(f"rank 0 could not prepare {d.train} into {path} (its error is in its log)")
    store = open_store(path)
    check_store(store, encoding, budgets)
    return _documents(store, cfg, direction)


def check_store(store: TokenStore, encoding, budgets: Budgets) -> None:
    """Refuse a store that does not fit the run: another kind, vocabulary policy or
    tokenizer, another word budget than the config gives (a budget the config leaves
    unset is the store's), or a source file changed since it was prepared."""
    want = store_settings(encoding, budgets, ())
    if store.kind != want["kind"]:
        raise DataError(f"data.train {store.path}: a store of {store.kind} ids, but this model trains on "
                        f"{want['kind']} ids; prepare it with the model's config")
    diffs = [f"{k}: the config gives {want['encoding'].get(k)!r}, the store has {store.encoding.get(k)!r}"
             for k in sorted(set(want["encoding"]) | set(store.encoding))
             if want["encoding"].get(k) != store.encoding.get(k)]
    diffs += [f"data.{k}: the config gives {v}, the store was cut to {store.budgets.get(k)}"
              for k, v in want["budgets"].items() if v is not None and v != store.budgets.get(k)]
    if diffs:
        what = "vocabulary" if store.kind == "words" else "tokenizer"
        raise DataError(f"data.train {store.path}: prepared with another {what} or word budget than this config "
                        f"({'; '.join(diffs)}); prepare it again with this config (nbest-rescore prepare-text "
                        f"--config CFG --out {store.path}) or train with the settings it was made with")
    for facts in store.sources:
        change = source_changes(facts)
        if change is not None:
            raise DataError(f"data.train {store.path}: {change}; prepare the store again (nbest-rescore "
                            f"prepare-text) or restore the file")


def _documents(store: TokenStore, cfg: TrainConfig, direction: str) -> TrainData:
    weights = read_weights(cfg.data.weights, store) if cfg.data.weights else {}
    starts, ends, wts = [], [], []
    for s in store.role("train"):
        w = weights.get(s.name, SourceWeight())
        d0, d1 = s.documents
        for _ in range(w.repeats):
            starts.append(store.docs[d0:d1])
            ends.append(store.docs[d0 + 1:d1 + 1])
            wts.append(np.full(d1 - d0, w.weight, dtype=np.float32))
    weighted = any(w.weight != 1.0 for w in weights.values())
    train = Documents(store.ids, _join(starts), _join(ends), np.concatenate(wts) if weighted else None)
    valid = None
    dev = store.role("valid")
    if dev:
        d0, d1 = dev[0].documents
        valid = Documents(store.ids, np.asarray(store.docs[d0:d1]), np.asarray(store.docs[d0 + 1:d1 + 1]))
    if direction == "backward":
        train, valid = train.reversed(), valid.reversed() if valid is not None else None
    sources = store.role("train")
    targets = sum(s.tokens - (s.documents[1] - s.documents[0]) for s in sources)
    words = sum(s.words + s.sentences for s in sources)
    return TrainData(store, train, valid, targets / max(1, words),
                     dev[0].words + dev[0].sentences if dev else 0)


def _join(parts) -> np.ndarray:
    """One int64 array of the parts (a single memory-mapped part stays a map)."""
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts).astype(np.int64, copy=False) if parts else np.zeros(0, np.int64)


def read_weights(path, store: TokenStore) -> Dict[str, SourceWeight]:
    """``data.weights``: ``SOURCE REPEATS WEIGHT`` per line (Kaldi's rnnlm
    ``data_weights.txt``), one line for every training source of the store.

    Raises:
        DataError: ``file:line`` for a line that is not a source name, a whole number
            >= 1 and a positive number; a source missing or named twice.
    """
    names = [s.name for s in store.role("train")]
    out: Dict[str, SourceWeight] = {}
    for line_no, line in iter_lines(path):
        fields = split_fields(line)
        if not fields:
            continue
        loc = f"{path}:{line_no}"
        if len(fields) != 3:
            raise DataError(f"{loc}: expected 'SOURCE REPEATS WEIGHT' (e.g. 'in_domain 3 1.0'), got {len(fields)} fields")
        name, repeats, weight = fields
        if name not in names:
            raise DataError(f"{loc}: {name!r} is not a training source of {store.path} "
                            f"(its sources: {', '.join(names)})")
        if name in out:
            raise DataError(f"{loc}: source {name!r} is listed twice")
        try:
            r, w = int(repeats), float(weight)
        except ValueError:
            r = w = None
        if r is None or r < 1 or not (w > 0 and math.isfinite(w)):
            raise DataError(f"{loc}: expected a whole number of repeats >= 1 and a positive weight, "
                            f"got {repeats!r} {weight!r}")
        out[name] = SourceWeight(r, w)
    missing = [n for n in names if n not in out]
    if missing:
        raise DataError(f"{path}: no line for the training source(s) {', '.join(missing)}; every source of "
                        f"{store.path} needs 'SOURCE REPEATS WEIGHT'")
    return out


__all__ = ["SourceWeight", "TrainData", "check_store", "default_store", "load_train_data", "read_weights"]
