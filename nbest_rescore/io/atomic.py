"""Atomic output: files and whole sets of files appear complete or not at all.

* :func:`atomic_write` / :func:`atomic_path`: a temporary file in the target directory,
  renamed over the target (:func:`os.replace`) or removed on an exception; one left by
  a killed process is removed by the next write of the same target.
* :func:`atomic_dir`: a job's whole output folder, swapped into place at the end.
* :func:`atomic_entries`: a set of files and folders written into a folder that also
  holds files of others (a Kaldi decode folder).

What may be written where is checked first, by :mod:`.output_checks`.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gzip
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Iterable, Iterator, Optional

from ..errors import DataError
from ..os_errors import WRITE_ERRNOS, is_output_error, note_space, os_error_of, output_error
from .output_checks import (RUN_MARKER, check_output_dir, check_output_kind, check_writable_dir, nearest_existing,
                            remove_left_by_dead)

__all__ = ["atomic_write", "atomic_path", "atomic_dir", "atomic_entries"]


def _make_temp(path, option: Optional[str] = None) -> str:
    """Create an empty temporary file ``.NAME.PID-XXXXXXXX.tmpSUFFIX`` next to ``path`` and return its
    name (such files of ``path`` left by killed processes are removed first). Raises DataError (the
    folder is missing, ``path`` is not a regular file) or, inside a staging folder (:func:`_staged`),
    OSError; else the OSError worded by :func:`~nbest_rescore.os_errors.output_error`."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise DataError(f"{path}: output directory {directory} does not exist")
    check_output_kind(path, option)
    remove_left_by_dead(directory, f".{target.name}.", f".tmp{target.suffix}")  # (see the name below)
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.{os.getpid()}-",
                                   suffix=f".tmp{target.suffix}")
    except OSError as exc:
        if _staged(path):
            raise
        raise output_error(exc, path, option) from exc
    os.close(fd)
    # mkstemp creates the file with mode 0600; give the output the usual permissions
    # (those of the file it replaces, or 0666 minus the umask for a new file).
    try:
        mode = os.stat(target).st_mode & 0o7777
    except OSError:
        mode = 0o666 & ~_umask()
    with contextlib.suppress(OSError):
        os.chmod(tmp, mode)
    return tmp


def _umask() -> int:
    """The process's umask (read by setting and restoring it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _staged(path) -> Optional[Path]:
    """The staging folder of an :func:`atomic_dir` or :func:`atomic_entries` that
    ``path`` lies in (they word the errors of the whole set), else None."""
    for folder in Path(os.path.abspath(path)).parents:
        if folder.name.startswith(".") and _PARTIAL in folder.name:
            return folder
    return None


@contextlib.contextmanager
def atomic_path(path, option: Optional[str] = None) -> Iterator[str]:
    """Yield a temporary path in the directory of ``path``, for writers that open the file
    themselves (``torch.save``, ``matplotlib`` ``savefig``).

    The temporary name ends with the suffix of ``path`` so that writers choosing a
    format from the extension behave the same. When the block ends normally the
    temporary file is renamed to ``path`` (:func:`os.replace`); when it raises, the
    temporary file is removed and the exception propagates, an OS-level failure of
    writing (no space, read-only file system, permission ...; also as torch or a Rust
    library reports it: :func:`~nbest_rescore.os_errors.os_error_of`) as one DataError
    naming ``option`` (e.g. ``"--out"``) and ``path`` (:func:`~nbest_rescore.os_errors.output_error`).
    In the staging folder of :func:`atomic_dir` or :func:`atomic_entries` the error
    propagates (with ``path`` as its OSError's ``filename`` when it had none) for them to word.

    Raises:
        DataError: the directory of ``path`` does not exist; a folder or special file
            is at ``path``; writing or renaming failed (the file system's error).
    """
    staged = _staged(path)
    tmp = _make_temp(path, option)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as exc:
        error = os_error_of(exc)
        if error is not None:
            note_space(error, staged or tmp)  # before any partial file goes
            if error.filename is None and error.errno in WRITE_ERRNOS:
                error.filename = os.fspath(path)  # a failed write() names no file: this one it was
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if not staged and is_output_error(error, (tmp, path)):
            raise output_error(error, path, option) from exc
        raise


@contextlib.contextmanager
def atomic_write(path, mode: str = "w", encoding: str = "utf-8", option: Optional[str] = None,
                 compress: bool = False) -> Iterator[IO]:
    """:func:`atomic_path` with the temporary file open in ``mode`` (``"w"`` text in
    ``encoding``, or ``"wb"``; ``"x"``/``"a"`` are not supported): yields the file
    object, flushed and synced before the rename. ``compress``: what is written is
    gzip-compressed (:func:`_gzip_over`: no name or time in the header, so the same
    content gives the same bytes).

    Raises:
        ValueError: ``mode`` is not a write mode.
        DataError: as :func:`atomic_path` (also when writing fails).
    """
    if mode not in ("w", "wb", "wt", "w+", "wb+", "w+b", "wt+", "w+t"):
        raise ValueError(f"atomic_write: unsupported mode {mode!r} (use 'w' or 'wb')")
    binary = "b" in mode or compress
    with atomic_path(path, option) as tmp, open(tmp, "wb" if compress else mode,
                                                 **({} if binary else {"encoding": encoding})) as fh:
        if compress:
            with _gzip_over(fh, "b" in mode, encoding) as gz:
                yield gz
        else:
            yield fh
        fh.flush()
        os.fsync(fh.fileno())


@contextlib.contextmanager
def _gzip_over(raw: IO[bytes], binary: bool, encoding: str) -> Iterator[IO]:
    """A gzip stream into the open file ``raw`` (text in ``encoding`` unless
    ``binary``), closed (its trailer written, ``raw`` left open) when the block ends.
    The header holds no file name and time 0."""
    gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)
    fh = gz if binary else io.TextIOWrapper(gz, encoding=encoding)
    try:
        yield fh
    except BaseException:
        with contextlib.suppress(Exception):  # (the partial file goes: the first error is the one to report)
            fh.close()
        raise
    fh.close()


_PARTIAL = ".partial-"


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two paths (Linux ``renameat2(RENAME_EXCHANGE)``); False when the
    call is unavailable or refused (then nothing happened)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    return fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _swap_in(staged: Path, target: Path) -> None:
    """Move ``staged`` to ``target``: over an existing folder by swapping the two
    (``renameat2(RENAME_EXCHANGE)``, else the old one renamed aside first) and deleting
    the old one; over a file, or where nothing is, by one rename."""
    if target.is_dir():
        if _exchange(str(staged), str(target)):
            shutil.rmtree(staged, ignore_errors=True)  # now the old folder
            return
        old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}{_PARTIAL}{os.getpid()}-old-"))
        os.rmdir(old)
        os.rename(target, old)
        os.rename(staged, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staged, target)


@contextlib.contextmanager
def atomic_dir(path, replaceable: Iterable[str] = (), settings: Optional[dict] = None,
               option: str = "--out") -> Iterator[Path]:
    """Yield a fresh hidden folder beside ``path``; when the block succeeds it becomes
    ``path`` (an older run's folder there is swapped out and deleted), when it raises
    the folder is removed and ``path`` is left as it was.

    :data:`RUN_MARKER` (JSON: ``settings`` and the files written) is added last. A
    process killed at any point leaves ``path`` holding either the whole old set or the
    whole new set; hidden ``.NAME.partial-PID-*`` folders of killed runs are removed by
    the next run into the same ``path``.

    Raises:
        DataError: as :func:`check_output_dir`; an OS-level failure of writing the set
            (no space, read-only file system, permission ...: one line naming
            ``option path``, the file and a fix, :func:`~nbest_rescore.os_errors.output_error`).
    """
    target = check_output_dir(path, replaceable, option).absolute()
    with _staging(target.parent, f".{target.name}{_PARTIAL}", path, option, target.parent) as tmp:
        yield tmp
        files = sorted(p.name for p in tmp.iterdir())
        with atomic_write(tmp / RUN_MARKER) as f:
            json.dump({"files": files, "settings": settings or {}}, f, indent=2, default=str)
        os.chmod(tmp, 0o777 & ~_umask())
        _worded_swap(tmp, target, path, option)


@contextlib.contextmanager
def _staging(folder: Path, prefix: str, path, option: str, existing: Path) -> Iterator[Path]:
    """A fresh hidden folder ``PREFIX PID-XXXXXXXX`` in ``folder`` (made with its parents;
    those of killed runs removed first) for the block of :func:`atomic_dir` or
    :func:`atomic_entries`. When making it or the block fails, it is removed, and so are
    the empty folders made from ``folder`` up to ``existing`` (:func:`_remove_made`); an
    OS-level failure is raised as a DataError for ``option path`` (:func:`_set_error`)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        remove_left_by_dead(folder, prefix)
        tmp = Path(tempfile.mkdtemp(dir=folder, prefix=f"{prefix}{os.getpid()}-"))
    except BaseException as exc:
        _remove_made(folder, existing)
        if isinstance(exc, OSError):
            raise output_error(exc, path, option) from exc
        raise
    try:
        yield tmp
    except BaseException as exc:
        error = _set_error(exc, tmp, path, option)
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_made(folder, existing)
        if error is not None:
            raise error from exc
        raise


def _set_error(exc: BaseException, staging: Path, path, option: str) -> Optional[DataError]:
    """The DataError for ``exc`` when it is an OS-level failure of writing into the
    staging folder ``staging`` of the output ``path`` (a file there is named as it would
    have appeared in ``path``; for no space, how much the set had reached); else None."""
    if not is_output_error(exc, (staging,)):
        return None
    exc = os_error_of(exc)
    note_space(exc, staging)
    file = None
    if exc.filename is not None:
        rel = os.path.relpath(os.path.abspath(os.fsdecode(exc.filename)), staging)
        if rel != os.curdir and not rel.startswith(os.pardir):
            file = os.path.join(os.fspath(path), rel)
    return output_error(exc, path, option, file=file)


def _worded_swap(staged: Path, target: Path, path, option: str) -> None:
    """:func:`_swap_in`, its OSError worded for ``option path``."""
    try:
        _swap_in(staged, target)
    except OSError as exc:
        raise output_error(exc, path, option) from exc


@contextlib.contextmanager
def atomic_entries(path, option: str = "--out") -> Iterator[Path]:
    """Yield a fresh hidden staging folder inside ``path`` (created with its parents);
    when the block succeeds, every top-level entry written there replaces the entry of
    the same name in ``path`` (a file by :func:`os.replace`, a folder swapped as a
    whole, as :func:`atomic_dir` does); other entries of ``path`` are left alone. When
    the block raises, the staging folder is removed and ``path`` is left as it was.

    Each entry appears complete or not at all; a process killed during the final moves
    (one rename per entry) may leave some entries new and some old. Staging folders of
    killed runs are removed by the next run into the same ``path``; folders this call
    created are removed again when the block raises.

    Raises:
        DataError: as :func:`check_writable_dir`; a staged file would replace a folder
            of the same name or the reverse (nothing is moved then); an OS-level
            failure of writing, as :func:`atomic_dir`.
    """
    folder = check_writable_dir(path, option).absolute()
    with _staging(folder, f".entries{_PARTIAL}", path, option, nearest_existing(folder)) as tmp:
        yield tmp
        staged = sorted(tmp.iterdir())
        for entry in staged:
            target = folder / entry.name
            if target.exists() and target.is_dir() != entry.is_dir():
                kind = "folder" if target.is_dir() else "file"
                raise DataError(f"{option} {path}: {target} is a {kind}, but this job writes a "
                                f"{'folder' if entry.is_dir() else 'file'} of that name; move it away")
        for entry in staged:
            _worded_swap(entry, folder / entry.name, path, option)
        os.rmdir(tmp)


def _remove_made(folder: Path, existing: Path) -> None:
    """Remove the empty folders from ``folder`` up to (not including) ``existing``."""
    while folder != existing and folder != folder.parent:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
