"""Atomic output: files and whole sets of files appear complete or not at all.

* :func:`atomic_write` / :func:`atomic_path`: a temporary file in the target directory,
  renamed over the target (:func:`os.replace`) or removed on an exception; one left by
  a killed process is removed by the next write of the same target.
* :func:`atomic_dir`: a job's whole output folder, swapped into place at the end.
* :func:`atomic_entries`: a set of files and folders written into a folder that also
  holds files of others (a Kaldi decode folder).
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import IO, Iterable, Iterator, Optional

from ..errors import DataError

__all__ = ["atomic_write", "atomic_path", "atomic_dir", "atomic_entries", "check_output_dir",
           "check_writable_dir", "RUN_MARKER"]


def _make_temp(path) -> str:
    """Create an empty temporary file next to ``path`` (same suffix) and return its name:
    ``.NAME.PID-XXXXXXXX.tmpSUFFIX``. Such files of ``path`` left by killed processes
    are removed first."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise DataError(f"{path}: output directory {directory} does not exist")
    _remove_stale_temps(directory, target)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.{os.getpid()}-",
                               suffix=f".tmp{target.suffix}")
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


def _remove_stale_temps(directory: Path, target: Path) -> None:
    """Remove the temporary files of ``target`` (:func:`_make_temp`'s names) in
    ``directory`` whose process is gone (a writer killed before its rename)."""
    stale = re.compile(rf"\.{re.escape(target.name)}\.(\d{{1,9}})-[^./]+\.tmp{re.escape(target.suffix)}")
    try:
        names = os.listdir(directory)
    except OSError:  # a folder one may write in but not list: nothing to clean
        return
    for name in names:
        found = stale.fullmatch(name)
        if found and not _pid_alive(int(found.group(1))):
            _remove_quietly(os.path.join(directory, name))


def _remove_quietly(tmp: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)


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
    """:func:`atomic_path` with the temporary file open in ``mode`` (``"w"`` text in
    ``encoding``, or ``"wb"``; ``"x"``/``"a"`` are not supported): yields the file
    object, flushed and synced before the rename.

    Raises:
        ValueError: ``mode`` is not a write mode.
        DataError, OSError: as :func:`atomic_path` (also when writing fails).
    """
    if mode not in ("w", "wb", "wt", "w+", "wb+", "w+b", "wt+", "w+t"):
        raise ValueError(f"atomic_write: unsupported mode {mode!r} (use 'w' or 'wb')")
    with atomic_path(path) as tmp, open(tmp, mode, **({} if "b" in mode else {"encoding": encoding})) as fh:
        yield fh
        fh.flush()
        os.fsync(fh.fileno())


#: Written into every output folder: marks it as replaceable by a later run.
RUN_MARKER = ".nbest-rescore-run"
_PARTIAL = ".partial-"


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _marked_files(folder: Path) -> set:
    """The file names the run marker in ``folder`` lists (empty when there is none)."""
    try:
        with open(folder / RUN_MARKER, encoding="utf-8") as f:
            return set(json.load(f).get("files", []))
    except (OSError, ValueError, AttributeError):
        return set()


def check_writable_dir(path, option: str = "--out") -> Path:
    """Check that ``path`` is a folder, or can be made one, where files can be written
    (it may hold anything). Returns ``path`` as a :class:`~pathlib.Path`.

    Raises:
        DataError: ``path`` is a file, lies below a file, or the folder (or its nearest
            existing parent) is not writable.
    """
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise DataError(f"{option} {path}: this is a file, not a folder; give a folder name")
    base = _nearest_existing(target.absolute().parent if not target.exists() else target.absolute())
    if not base.is_dir():
        raise DataError(f"{option} {path}: {base} is a file, so no folder can be made below it; "
                        f"choose another {option}")
    if not os.access(base, os.W_OK | os.X_OK):
        raise DataError(f"{option} {path}: {base} is not writable; choose another {option}")
    return target


def check_output_dir(path, replaceable: Iterable[str] = (), option: str = "--out") -> Path:
    """Check, before any long work, that ``path`` can become a job's output folder.

    ``path`` may be missing (it is created, with its parents), empty, or a folder a
    previous run wrote (only names in ``replaceable`` or listed in its
    :data:`RUN_MARKER`): such a folder is replaced as a whole at the end of the run.
    Returns ``path`` as a :class:`~pathlib.Path`.

    Raises:
        DataError: ``path`` is a file, lies below a file, holds other files (which a
            replacement would lose), or its nearest existing folder is not writable.
    """
    target = check_writable_dir(path, option)
    if target.is_dir():
        names = set(os.listdir(target))
        foreign = sorted(names - set(replaceable) - {RUN_MARKER} - _marked_files(target))
        if foreign:
            shown = ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")
            raise DataError(f"{option} {path}: the folder holds files this job did not write ({shown}); "
                            f"it would be replaced as a whole - choose a new folder or empty it")
        parent = target.absolute().parent
        if not os.access(parent, os.W_OK | os.X_OK):
            raise DataError(f"{option} {path}: its parent {parent} is not writable, so the folder cannot be "
                            f"replaced atomically; choose another {option}")
    return target


def _libc_renameat2():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two paths (Linux ``renameat2(RENAME_EXCHANGE)``); False when the
    call is unavailable or refused (then nothing happened)."""
    fn = _libc_renameat2()
    if fn is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    return fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _remove_stale_partials(parent: Path, name: str) -> None:
    """Remove hidden partial folders left by killed runs into the same ``name``."""
    prefix = f".{name}{_PARTIAL}"
    for entry in parent.iterdir() if parent.is_dir() else ():
        if entry.name.startswith(prefix) and entry.is_dir():
            pid = entry.name[len(prefix):].split("-")[0]
            if pid.isdigit() and not _pid_alive(int(pid)):
                shutil.rmtree(entry, ignore_errors=True)


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
        DataError: as :func:`check_output_dir`.
        OSError: the folder cannot be created or renamed.
    """
    target = check_output_dir(path, replaceable, option).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(target.parent, target.name)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}{_PARTIAL}{os.getpid()}-"))
    try:
        yield tmp
        files = sorted(p.name for p in tmp.iterdir())
        with atomic_write(tmp / RUN_MARKER) as f:
            json.dump({"files": files, "settings": settings or {}}, f, indent=2, default=str)
        os.chmod(tmp, 0o777 & ~_umask())
        _swap_in(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


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
            of the same name or the reverse (nothing is moved then).
        OSError: the staging folder cannot be created or renamed.
    """
    folder = check_writable_dir(path, option).absolute()
    existing = _nearest_existing(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(folder, "entries")
    try:
        tmp = Path(tempfile.mkdtemp(dir=folder, prefix=f".entries{_PARTIAL}{os.getpid()}-"))
    except BaseException:
        _remove_made(folder, existing)
        raise
    try:
        yield tmp
        staged = sorted(tmp.iterdir())
        for entry in staged:
            target = folder / entry.name
            if target.exists() and target.is_dir() != entry.is_dir():
                kind = "folder" if target.is_dir() else "file"
                raise DataError(f"{option} {path}: {target} is a {kind}, but this job writes a "
                                f"{'folder' if entry.is_dir() else 'file'} of that name; move it away")
        for entry in staged:
            _swap_in(entry, folder / entry.name)
        os.rmdir(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_made(folder, existing)
        raise


def _remove_made(folder: Path, existing: Path) -> None:
    """Remove the empty folders from ``folder`` up to (not including) ``existing``."""
    while folder != existing and folder != folder.parent:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
