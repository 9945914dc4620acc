"""Plain N-best text of the AMN thesis (Fig. 5.1) with parallel score files.

N-best file: one hypothesis per line, ``<utterance-index> w1 w2 ... <eos>``; a trailing
``<eos>`` or ``</s>`` is dropped. Consecutive lines with the same index form the list of
that utterance, in first-pass rank order. Acoustic and n-gram score files hold one
number per line, parallel to the hypothesis lines: natural-log *scores* (larger =
better) by default, negated here into costs; or costs already (``scores_are_costs``).
"""
from __future__ import annotations

import logging
import math
import os
from typing import Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..errors import DataError, examples, format_location
from ..types import NbestList, NbestSet
from ._common import iter_lines, split_fields

__all__ = ["read_plain_nbest"]

logger = logging.getLogger(__name__)

_END_TOKENS = ("<eos>", "</s>")


def _read_plain_hyps(path) -> Tuple[List[str], List[Tuple[str, ...]]]:
    """Per hypothesis line: its utterance index string and its words."""
    indices: List[str] = []
    hyps: List[Tuple[str, ...]] = []
    closed = set()
    current = None
    for line_no, line in iter_lines(path):
        loc = format_location(path, line_no)
        fields = split_fields(line)
        if not fields:
            raise DataError(f"{loc}: blank line; "
                            f"expected '<utterance-index> word ... <eos>'")
        idx = fields[0]
        if not (idx.isascii() and idx.isdigit()):
            raise DataError(f"{loc}: utterance index {idx!r} is not a non-negative "
                            f"integer; "
                            f"expected '<utterance-index> word ... <eos>'")
        if idx != current:
            if idx in closed:
                raise DataError(f"{loc}: utterance index {idx} reappears after index "
                                f"{current}; the hypotheses of an utterance must be on "
                                f"consecutive lines")
            if current is not None:
                closed.add(current)
            current = idx
        words = fields[1:]
        if words and words[-1] in _END_TOKENS:
            words = words[:-1]
        indices.append(idx)
        hyps.append(tuple(words))
    return indices, hyps


def _read_values(path) -> List[float]:
    values: List[float] = []
    for line_no, line in iter_lines(path):
        fields = split_fields(line)
        if len(fields) != 1:
            raise DataError(f"{format_location(path, line_no)}: expected one number per "
                            f"line, found {len(fields)} fields")
        try:
            values.append(float(fields[0]))
        except ValueError:
            raise DataError(f"{format_location(path, line_no)}: {fields[0]!r} is not a "
                            f"number") from None
    return values


def read_plain_nbest(nbest_path, ac_path, lm_path, *, scores_are_costs: bool = False,
                     utt2doc: Optional[Mapping[str, str]] = None,
                     log: Optional[Callable[[str], None]] = None) -> NbestSet:
    """Read a plain N-best file and its acoustic / n-gram score files.

    Args:
        nbest_path: hypotheses, ``<utterance-index> w1 ... <eos>`` per line.
        ac_path, lm_path: one number per line, line i belonging to hypothesis line i.
        scores_are_costs: False (default): the numbers are natural-log scores (larger =
            better) and are negated into costs; True: they are already costs (negated
            natural log, larger = worse) and are kept.
        utt2doc: optional ``{utterance-index string: doc id}``; without it the whole file
            is one document (the thesis' corpus-level stream), ``doc_id`` = file name.
        log: called with one line describing what was read (default: module logger).

    Returns an :class:`NbestSet` with ``utt_id`` = the index string, keys
    ``<index>-<n>`` (n = 1, 2, ... in line order), float64 costs, zero ``graph_cost``,
    ``doc_source`` ``"utt2doc"`` or ``"file"``.

    Raises:
        DataError: a blank line or a non-integer index (``file:line``); an index that
            reappears after another one (``file:line``); a score line that is not one
            number (``file:line``); a score file whose line count differs from the
            number of hypothesis lines (both counts and files); a NaN/infinite score
            (file, line and key); an utterance missing from ``utt2doc`` (examples);
            an empty N-best file.
    """
    say = log if log is not None else logger.info
    indices, hyps = _read_plain_hyps(nbest_path)
    if not hyps:
        raise DataError(f"{nbest_path}: no hypotheses")
    n = len(hyps)
    sign = 1.0 if scores_are_costs else -1.0
    costs = {}
    ranks: List[int] = []
    for i, idx in enumerate(indices):
        ranks.append(ranks[-1] + 1 if i > 0 and indices[i - 1] == idx else 1)
    keys = [f"{idx}-{r}" for idx, r in zip(indices, ranks)]
    for name, path in (("ac", ac_path), ("lm", lm_path)):
        values = _read_values(path)
        if len(values) != n:
            raise DataError(f"{path} has {len(values)} score lines but {nbest_path} has "
                            f"{n} hypothesis lines; the files must be parallel")
        for line_no, (v, key) in enumerate(zip(values, keys), start=1):
            if not math.isfinite(v):
                raise DataError(f"{format_location(path, line_no)}: score of hypothesis "
                                f"{key!r} is {v!r}; scores must be finite")
        arr = np.asarray(values, dtype=np.float64) * sign
        arr[arr == 0] = 0.0  # no negative zeros
        costs[name] = arr

    groups: Dict[str, List[int]] = {}
    for i, idx in enumerate(indices):
        groups.setdefault(idx, []).append(i)

    if utt2doc is not None:
        missing = [u for u in groups if u not in utt2doc]
        if missing:
            raise DataError(f"utt2doc has no entry for {len(missing)} utterances of "
                            f"{nbest_path}: {examples(missing)}")
        doc_of = {u: str(utt2doc[u]) for u in groups}
        doc_source = "utt2doc"
        doc_desc = f"documents from utt2doc ({len(set(doc_of.values()))})"
    else:
        doc = os.path.basename(os.fspath(nbest_path)) or "file"
        doc_of = {u: doc for u in groups}
        doc_source = "file"
        doc_desc = "no utt2doc: the whole file is one document (corpus-level stream)"

    utterances = []
    for utt, rows in groups.items():
        sel = np.asarray(rows, dtype=np.int64)
        utterances.append(NbestList(
            utt_id=utt,
            doc_id=doc_of[utt],
            keys=tuple(keys[i] for i in rows),
            hyps=tuple(hyps[i] for i in rows),
            ac_cost=costs["ac"][sel],
            lm_cost=costs["lm"][sel],
            graph_cost=np.zeros(len(rows), dtype=np.float64),
        ))
    kind = "costs" if scores_are_costs else "log scores (negated into costs)"
    say(f"{nbest_path}: {len(utterances)} utterances, {n} hypotheses, {kind}; {doc_desc}")
    return NbestSet(utterances=tuple(utterances), doc_source=doc_source,
                    source=os.fspath(nbest_path))
