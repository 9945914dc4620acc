"""One-line messages for OS-level failures on the files a command reads or writes:
which file (and option), what happened, and a fix, e.g.

``--out /mnt/x: no space left on device while writing /mnt/x/nn_cost (the output had
reached 60.0 KiB; 0 bytes free on /mnt); free space on /mnt or choose another --out on
a disk with room``

:func:`os_error_message` is the one place that words them: the atomic writers
(:mod:`.atomic`) raise :func:`output_error` for an output that could not be written,
and the CLI words any :class:`OSError` that still escapes with it too.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
from pathlib import Path
from typing import Iterable, Optional

from .errors import DataError

__all__ = ["WRITE_ERRNOS", "file_kind", "is_output_error", "note_space", "os_error_of", "os_error_message",
           "output_error", "tree_size"]

#: Errors only writing raises: no space, quota, file size limit, read-only file system.
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})

_WHAT = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large for the file system",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EISDIR: "is a directory",
    errno.ENOTDIR: "a part of the path is not a folder",
    errno.ENAMETOOLONG: "file name too long",
    errno.ENOENT: "no such file or folder",
    errno.EMFILE: "too many open files",
    errno.ENFILE: "too many open files in the system",
    errno.EIO: "input/output error",
    errno.ELOOP: "too many levels of symbolic links",
}


_KINDS = ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))


def file_kind(mode: int) -> str:
    """What a file of ``os.stat`` mode ``mode`` is, for a message: ``"a regular file"``,
    ``"a directory"``, ``"a named pipe"``, ``"a socket"``, ``"a device"``."""
    return next((kind for test, kind in _KINDS if test(mode)), "a special file")


def os_error_of(exc: BaseException) -> Optional[OSError]:
    """The file system's error behind ``exc``, or None: ``exc`` itself when it is an
    :class:`OSError`; the OSError that torch's checkpoint writer met (its RuntimeError
    ``[enforce fail at inline_container.cc] unexpected pos ...`` has it as context when
    torch writes to a Python file); or the one a Rust library (safetensors, tokenizers)
    names as ``(os error N)``."""
    if isinstance(exc, OSError):
        return exc
    if not isinstance(exc, Exception):
        return None
    if isinstance(exc, RuntimeError) and "inline_container" in str(exc) and isinstance(exc.__context__, OSError):
        return exc.__context__
    found = re.search(r"\(os error (\d+)\)", str(exc))
    if found is None:
        return None
    code = int(found.group(1))
    return OSError(code, os.strerror(code))


def is_output_error(exc: BaseException, roots: Iterable) -> bool:
    """Whether ``exc`` is an OS-level failure (:func:`os_error_of`) of writing below
    ``roots`` (paths being written): it names a file there, or names none and is one of
    :data:`WRITE_ERRNOS` (a failed ``write``). Errors naming other files (an input) are not."""
    exc = os_error_of(exc)
    if exc is None:
        return False
    names = [n for n in (exc.filename, exc.filename2) if n is not None]
    if names:
        tops = [os.path.abspath(os.fspath(r)) for r in roots]
        paths = [os.path.abspath(os.fsdecode(n)) for n in names if isinstance(n, (str, bytes, os.PathLike))]
        return any(p == r or p.startswith(r.rstrip(os.sep) + os.sep) for p in paths for r in tops)
    return exc.errno in WRITE_ERRNOS


def tree_size(path) -> int:
    """Bytes held by the files at or below ``path`` (0 when it is gone)."""
    try:
        if not os.path.isdir(path):
            return os.path.getsize(path)
    except OSError:
        return 0
    total = 0
    for folder, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, f)).st_size
    return total


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024:
            return f"{n:.1f} {unit}"
    return f"{n / 1024:.1f} TiB"


def _mount_of(path) -> Optional[Path]:
    """The mount point of the file system holding ``path`` (or its nearest existing
    parent); never raises (``os.path`` tests are False on any error)."""
    p = Path(os.path.abspath(os.fsdecode(path)))
    while not os.path.exists(p) and p != p.parent:
        p = p.parent
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p if os.path.exists(p) else None


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError, AttributeError):
        return f"uid {os.geteuid()}" if hasattr(os, "geteuid") else "this user"


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_NOTE = "nbest_rescore_space"  # the attribute :func:`note_space` sets on the error


def note_space(exc: OSError, written_below) -> None:
    """For a failed write for want of space, note on ``exc`` how much the output had
    reached (the bytes below ``written_below``) and how much is free, now, before its
    partial files are removed; :func:`os_error_message` shows them. The first note
    stays (the moment the disk filled); other errors are left alone."""
    if exc.errno in _NO_SPACE and not hasattr(exc, _NOTE):
        setattr(exc, _NOTE, _space(written_below, tree_size(written_below)))


def _space(path, written: Optional[int]) -> str:
    """``" (the output had reached N; M free on MOUNT)"``, as far as known."""
    parts = [f"the output had reached {_bytes(written)}"] if written else []
    mount = _mount_of(path)
    if mount is not None:
        with contextlib.suppress(OSError):
            parts.append(f"{_bytes(shutil.disk_usage(mount).free)} free on {mount}")
    return f" ({'; '.join(parts)})" if parts else ""


def _fix(code: Optional[int], path, other: str, writing: Optional[bool]) -> str:
    """What to do about error ``code`` on ``path`` (the file the system named, else the
    one written); ``other`` is e.g. ``another --out``."""
    mount = (_mount_of(path) if path is not None else None) or "that disk"
    folder = os.path.dirname(os.path.abspath(os.fsdecode(path))) if path is not None else "its folder"
    if code in _NO_SPACE:
        room = " within your quota" if code == errno.EDQUOT else ""
        return f"free space{room} on {mount} or choose {other} on a disk with room"
    if code == errno.EROFS:
        return f"{mount} is mounted read-only: choose {other} on a writable disk (or remount it read-write)"
    if code in (errno.EACCES, errno.EPERM):
        if writing is False:
            return f"user {_user()} may not read it: change its permissions or copy it somewhere readable"
        if writing is None:
            return f"user {_user()} lacks the permission (on it or on {folder}): change the permissions or choose {other}"
        return f"user {_user()} may not write in {folder}: change its permissions or choose {other}"
    if code == errno.EISDIR:
        if writing is False:
            return "expected a regular file: give the file's name, not a folder's"
        return f"a folder is where a regular file is expected: move it away or choose {other}"
    if code == errno.ENOTDIR:
        return f"a part of the path is a file, not a folder: check the path or choose {other}"
    if code == errno.ENAMETOOLONG:
        return (f"a name in it is too long for the file system (most allow 255 bytes; an output's temporary name "
                f"adds about 40): choose {other} with shorter names")
    if code == errno.EFBIG:
        return f"the file system limits the size of one file: choose {other} on another file system"
    if code in (errno.EMFILE, errno.ENFILE):
        return "raise the open-file limit (ulimit -n) or run fewer programs at once"
    if code == errno.ENOENT:
        return "check the path" if writing is False else f"a folder of it is missing: create it or choose {other}"
    return f"check the disk and the path, or choose {other}"


def os_error_message(exc: OSError, path=None, option: Optional[str] = None, *, file=None,
                     writing: Optional[bool] = None) -> str:
    """One line for ``exc``: ``[OPTION ]PATH: what happened[ while writing FILE][ (space)];
    fix``.

    Args:
        exc: the error (its ``errno``, ``strerror`` and ``filename`` are used).
        path: the path the user gave (default: ``exc.filename``; none: the message
            starts with what happened).
        option: the option that named ``path`` (``"--out"``), or None.
        file: the file of ``path``'s output set being written, when not ``path`` itself.
        writing: True for an output, False for an input, None when unknown.

    For no space, the output's size and the free space when it failed
    (:func:`note_space`), else the free space now.
    """
    if path is None and exc.filename is not None:
        path = os.fsdecode(exc.filename)
    what = _WHAT.get(exc.errno) or (exc.strerror or str(exc) or type(exc).__name__).lower()
    head = " ".join(str(x) for x in (option, path) if x is not None)
    where = f" while writing {file}" if file is not None and os.fspath(file) != os.fspath(path or "") else ""
    other = f"another {option}" if option else ("another path" if writing is not False else "another file")
    at = os.fsdecode(exc.filename) if isinstance(exc.filename, (str, bytes)) else (file or path)
    space = getattr(exc, _NOTE, None) or (_space(at, None) if exc.errno in _NO_SPACE and at is not None else "")
    fix = _fix(exc.errno, at, other, writing)
    return f"{head + ': ' if head else ''}{what}{where}{space}; {fix}"


def output_error(exc: OSError, path, option: Optional[str] = None, *, file=None) -> DataError:
    """:func:`os_error_message` of an output (``writing=True``) as a :class:`DataError`
    to raise (``raise output_error(...) from exc``)."""
    return DataError(os_error_message(exc, path, option, file=file, writing=True))
