"""Atomic file output: write to a temporary file in the target directory, then rename.

A reader never sees a half-written output, and a failed write leaves an existing file
untouched: on success the temporary file is moved into place with :func:`os.replace`
(atomic on POSIX within one file system); on any exception it is removed and the
exception re-raised.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator

from ..errors import DataError

__all__ = ["atomic_write", "atomic_path"]


def _make_temp(path) -> str:
    """Create an empty temporary file next to ``path`` (same suffix) and return its name."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise DataError(f"{path}: output directory {directory} does not exist")
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.",
                               suffix=f".tmp{target.suffix}")
    os.close(fd)
    # mkstemp creates the file with mode 0600; give the output the usual permissions
    # (those of the file it replaces, or 0666 minus the umask for a new file).
    try:
        mode = os.stat(target).st_mode & 0o7777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        mode = 0o666 & ~mask
    try:
        os.chmod(tmp, mode)
    except OSError:
        pass
    return tmp


def _remove_quietly(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass


@contextlib.contextmanager
def atomic_path(path) -> Iterator[str]:
    """Yield a temporary path in the directory of ``path`` for writers that need a name.

    Use it with writers that open the file themselves (``torch.save``,
    ``matplotlib`` ``savefig``). The temporary name ends with the suffix of ``path`` so
    that writers choosing a format from the extension behave the same. When the block
    ends normally the temporary file is renamed to ``path`` (:func:`os.replace`); when
    it raises, the temporary file is removed and the exception propagates unchanged.

    Raises:
        DataError: the directory of ``path`` does not exist.
        OSError: the temporary file cannot be created or renamed.
    """
    tmp = _make_temp(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        _remove_quietly(tmp)
        raise


@contextlib.contextmanager
def atomic_write(path, mode: str = "w", encoding: str = "utf-8") -> Iterator[IO]:
    """Open a temporary file for writing; move it to ``path`` when the block succeeds.

    Args:
        path: final file name.
        mode: ``"w"`` (text) or ``"wb"`` (binary); ``"x"``/``"a"`` are not supported.
        encoding: text encoding (ignored in binary mode).

    Yields the open file object. On normal exit the file is flushed, synced and renamed
    over ``path``; if the block raises, the temporary file is removed, ``path`` is left
    as it was and the exception is re-raised.

    Raises:
        ValueError: ``mode`` is not a write mode.
        DataError: the directory of ``path`` does not exist.
        OSError: the temporary file cannot be created, written or renamed.
    """
    if mode not in ("w", "wb", "wt", "w+", "wb+", "w+b", "wt+", "w+t"):
        raise ValueError(f"atomic_write: unsupported mode {mode!r} (use 'w' or 'wb')")
    tmp = _make_temp(path)
    try:
        if "b" in mode:
            fh = open(tmp, mode)
        else:
            fh = open(tmp, mode, encoding=encoding)
        with fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        _remove_quietly(tmp)
        raise
