"""One cost archive read key by key in the order of another file (the hypotheses).

Kaldi's tools write every file of an N-best directory in the same key order, so a cost
file is read in lock-step with the words file, one entry per hypothesis, nothing kept.
A file whose keys come in another order (or that holds an error) is read whole once,
by :func:`~.score_ark.read_cost_ark`, and looked up: the values are the same floats,
and any error is reported exactly as that reader reports it.
"""
from __future__ import annotations

from typing import Dict, Optional

from ..errors import DataError
from .score_ark import iter_cost_ark, read_cost_ark

__all__ = ["CostColumn"]


class CostColumn:
    """The values of the archive ``path``, taken key by key (:meth:`take`), then
    :meth:`extra` once after the last key. Values as stored (float64; for N-best
    costs: negated natural logs)."""

    def __init__(self, path):
        self.path = path
        self._entries = iter_cost_ark(path)
        self._table: Optional[Dict[str, float]] = None
        self._taken = 0

    def _next(self):
        try:
            return next(self._entries, None)
        except DataError:
            self.table()  # read whole: read_cost_ark reports the error as ever
            return None

    def table(self) -> Dict[str, float]:
        """The whole archive as ``{key: value}`` (read once). Raises DataError as
        :func:`~.score_ark.read_cost_ark` (e.g. a malformed line or a repeated key)."""
        if self._table is None:
            self._entries = None
            self._table = read_cost_ark(self.path)
        return self._table

    def take(self, key: str) -> Optional[float]:
        """The value of ``key`` (the next entry while in step), or None when the
        archive does not hold it. Raises DataError for a malformed archive."""
        if self._table is None:
            entry = self._next()
            if entry is not None and entry[0] == key:
                self._taken += 1
                return entry[1]
        value = self.table().get(key)
        self._taken += value is not None
        return value

    def extra(self) -> bool:
        """After the last key: whether the archive holds keys that were not taken.
        Raises DataError for a malformed archive or a repeated key."""
        if self._table is None and self._next() is None and self._table is None:
            return False
        return self._taken < len(self.table())
