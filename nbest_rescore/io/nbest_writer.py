"""The one way the N-best formats are written: a writer that takes a set part after
part (spans of whole documents, in order) and makes its files appear when it closes.

``with Writer(out) as w: w.write(span) ...`` then ``w.names``: each file is written
through :func:`~.atomic.atomic_write`, so a file appears whole when the block ends
without an error, and not at all otherwise (callers that need a whole folder to appear
at once write into :func:`~.atomic.atomic_dir`'s folder). :func:`write_parts` writes
the parts of a set (a set in memory: one part) in order.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import IO, Dict, Iterable, Sequence, Tuple

from ..types import NbestSet
from .atomic import atomic_write

__all__ = ["NbestWriter", "open_files", "write_parts"]


class NbestWriter:
    """The base of the format writers: :meth:`_open` opens the files (on an
    :class:`~contextlib.ExitStack` closed, and so committed, when the block ends),
    :meth:`write` appends one part, :meth:`_finish` runs after the files were
    committed; :attr:`names` are the names written, in order."""

    names: Tuple[str, ...] = ()

    def __enter__(self) -> "NbestWriter":
        self._stack = contextlib.ExitStack().__enter__()
        try:
            self._open(self._stack)
        except BaseException:
            self._stack.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc) -> bool:
        suppressed = self._stack.__exit__(*exc)
        if exc[0] is None:
            self._finish()
        return suppressed

    def _open(self, stack: contextlib.ExitStack) -> None:
        raise NotImplementedError

    def write(self, part: NbestSet) -> None:
        """Append the lists of ``part`` (the next utterances of the set, in order).
        Raises DataError for what the format cannot hold (nothing is written then)."""
        raise NotImplementedError

    def _finish(self) -> None:
        """After every file is in place (nothing by default)."""


def open_files(stack: contextlib.ExitStack, folder, names: Sequence[str]) -> Dict[str, IO]:
    """``{name: file}``: :func:`~.atomic.atomic_write` of each name in ``folder``, on ``stack``."""
    return {n: stack.enter_context(atomic_write(os.path.join(os.fspath(folder), n))) for n in names}


def write_parts(writer: NbestWriter, parts: Iterable[NbestSet]) -> Tuple[str, ...]:
    """Write ``parts`` (the spans of a set, in order; a set in memory: ``[nbest]``) with
    ``writer``; the names written."""
    with writer as w:
        for part in parts:
            w.write(part)
    return tuple(w.names)
