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
import errno
import gzip
import io
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import IO, Iterable, Iterator, Optional

from ..errors import DataError
from ..os_errors import WRITE_ERRNOS, file_kind, is_output_error, note_space, os_error_of, output_error

__all__ = ["atomic_write", "atomic_path", "atomic_dir", "atomic_entries", "check_output_dir",
           "check_output_file", "check_writable_dir", "RUN_MARKER"]


def check_output_file(path, option: str = "--out") -> None:
    """Check, before any long work, that a regular file may be written at ``path``:
    nothing is there yet, or a regular file (or a link to one) that the new file
    replaces; and its folder, or the nearest existing folder above it, lets this user
    create files (:func:`_probe`).

    Raises:
        DataError: a folder or a special file (a named pipe, a device, a socket) is at
            ``path``; a file is where a folder above it should be; the folder is not
            writable (why: :func:`~nbest_rescore.os_errors.output_error`). Naming ``option path``.
    """
    _check_kind(path, option)
    _check_base(Path(path).absolute().parent, path, option)


def check_outside_inputs(out, inputs: Iterable, option: str = "--out") -> None:
    """The one rule for every command that writes: its output ``out`` (a file or a folder
    replaced as a whole) must not be, contain or lie inside one of its inputs, which it
    would write over or into. Paths are compared after resolving links and ``..``.

    Args:
        inputs: ``(name, path)`` pairs, e.g. ``("--nbest", "dev/")``; a path may be None
            (not given), a sequence of paths, or an ``hf:DIR`` LM. A file found through
            an option (a plain list's score files beside it) is ``(name, path, given)``:
            ``("--nbest", "x/nbest.ac", "x/nbest.txt")``.
    Raises:
        DataError: one line naming ``option out``, the input and a fix, before any work.
    """
    mine = os.path.realpath(os.fspath(out))
    for name, value, *via in inputs:
        for path in value if isinstance(value, (list, tuple)) else (value,):
            if path is None:
                continue
            text = os.fspath(path)
            how = _overlap(mine, os.path.realpath(text[3:] if text.startswith("hf:") else text))
            if how is None:
                continue
            what = f"{text} (read with {name} {os.fspath(via[0])})" if via else f"{name} {text}"
            raise DataError(f"{option} {out}: {how} the input {what}, which writing it would replace or "
                            f"change; choose an {option} outside every input (nothing was written)")


def _overlap(mine: str, theirs: str) -> Optional[str]:
    """How the output ``mine`` meets the input ``theirs`` (both resolved): ``is``,
    ``contains``, ``lies inside``, or None."""
    if theirs == mine:
        return "is"
    if theirs.startswith(mine.rstrip(os.sep) + os.sep):
        return "contains"
    if mine.startswith(theirs.rstrip(os.sep) + os.sep):
        return "lies inside"
    return None


def _check_base(folder: Path, path, option: str) -> None:
    """The nearest existing folder at or above ``folder`` is a folder this user may
    write in (:func:`_probe`); DataError naming ``option path`` otherwise."""
    try:
        base = _nearest_existing(folder)
    except OSError as exc:  # a name too long, a loop of links ...
        raise output_error(exc, path, option) from None
    if not base.is_dir():
        raise DataError(f"{option} {path}: {base} is a file, so no folder can be made below it; "
                        f"choose another {option}")
    _probe(base, path, option)


def _check_kind(path, option: Optional[str]) -> None:
    """DataError when something other than a regular file is at ``path``."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:  # a name too long, a part of the path a file ...
        raise output_error(exc, path, option) from None
    if not stat.S_ISREG(mode):
        label = f"{option} {path}" if option else f"{path}"
        raise DataError(f"{label}: is {file_kind(mode)}, but a regular file is written there (replacing it); "
                        f"give the name of a regular file")


def _make_temp(path, option: Optional[str] = None) -> str:
    """Create an empty temporary file next to ``path`` (same suffix) and return its name:
    ``.NAME.PID-XXXXXXXX.tmpSUFFIX``. Such files of ``path`` left by killed processes
    are removed first. Raises DataError (the folder is missing, ``path`` is not a regular file) or, inside
    a staging folder (:func:`_staged`), OSError; else the OSError worded by
    :func:`~nbest_rescore.os_errors.output_error`."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise DataError(f"{path}: output directory {directory} does not exist")
    _check_kind(path, option)
    _remove_left_by_dead(directory, f".{target.name}.", f".tmp{target.suffix}")  # (see the name below)
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


def _remove_left_by_dead(folder: Path, prefix: str, suffix: str = "") -> None:
    """Remove the hidden entries ``PREFIX + PID + "-" + ... + SUFFIX`` in ``folder`` whose
    process PID is gone: what a killed writer left (a temporary file, a staging or
    probe folder). A folder one may write in but not list has nothing cleaned."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if not (name.startswith(prefix) and name.endswith(suffix)):
            continue
        pid = name[len(prefix):].split("-")[0]
        if pid.isdigit() and not _pid_alive(int(pid)):
            entry = os.path.join(folder, name)
            if os.path.isdir(entry) and not os.path.islink(entry):
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry)


def _staged(path) -> Optional[Path]:
    """The staging folder of an :func:`atomic_dir` or :func:`atomic_entries` that
    ``path`` lies in (they word the errors of the whole set), else None."""
    for folder in Path(os.path.abspath(path)).parents:
        if folder.name.startswith(".") and _PARTIAL in folder.name:
            return folder
    return None


@contextlib.contextmanager
def atomic_path(path, option: Optional[str] = None) -> Iterator[str]:
    """Yield a temporary path in the directory of ``path`` for writers that need a name.

    Use it with writers that open the file themselves (``torch.save``,
    ``matplotlib`` ``savefig``). The temporary name ends with the suffix of ``path`` so
    that writers choosing a format from the extension behave the same. When the block
    ends normally the temporary file is renamed to ``path`` (:func:`os.replace`); when
    it raises, the temporary file is removed and the exception propagates, an OS-level
    failure of writing (no space, read-only file system, permission ...; also as torch
    or a Rust library reports it: :func:`~nbest_rescore.os_errors.os_error_of`) as one DataError
    naming ``option`` (e.g. ``"--out"``) and ``path`` (:func:`~nbest_rescore.os_errors.output_error`).
    In the staging folder of :func:`atomic_dir` or :func:`atomic_entries` the error
    propagates (with ``path`` as its OSError's ``filename`` when it had none) for them
    to word.

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
        DataError: ``path`` is a file, lies below a file, or no folder can be made in
            the folder (or its nearest existing parent): permissions, a read-only file
            system ... (:func:`~nbest_rescore.os_errors.output_error`).
    """
    target = Path(path)
    try:
        exists = target.exists()
    except OSError as exc:  # a name too long, a loop of links ...
        raise output_error(exc, path, option) from None
    if exists and not target.is_dir():
        raise DataError(f"{option} {path}: this is a file, not a folder; give a folder name")
    _check_base(target.absolute() if exists else target.absolute().parent, path, option)
    return target


#: Bytes the hidden temporary name of an output adds to its name (``.NAME.partial-PID-XXXXXXXX``).
_TEMP_NAME_EXTRA = 40


_PROBE = ".nbest-rescore-probe-"  # + PID-XXXXXXXX: :func:`_probe`'s empty folder


def _probe(folder: Path, path, option: str) -> None:
    """Make and remove an empty folder in ``folder``: whether the file system lets this
    user write there (permissions, read-only mount, ...), as :func:`os.access` cannot
    tell for every file system; and whether the names of ``path`` below ``folder``
    (the last with its temporary name's extra bytes) fit the file system's limit.
    Raises DataError naming ``option path`` and why."""
    _remove_left_by_dead(folder, _PROBE)
    try:
        os.rmdir(tempfile.mkdtemp(dir=folder, prefix=f"{_PROBE}{os.getpid()}-"))
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except OSError as exc:
        raise output_error(exc, path, option) from None
    try:
        names = Path(path).absolute().relative_to(folder).parts
    except ValueError:
        return
    lengths = [len(os.fsencode(n)) for n in names]
    if lengths and max(lengths[:-1] + [lengths[-1] + _TEMP_NAME_EXTRA]) > limit:
        code = errno.ENAMETOOLONG
        raise output_error(OSError(code, os.strerror(code), os.fspath(path)), path, option)


def check_output_dir(path, replaceable: Iterable[str] = (), option: str = "--out") -> Path:
    """Check, before any long work, that ``path`` can become a job's output folder.

    ``path`` may be missing (it is created, with its parents), empty, or a folder a
    previous run wrote (only names in ``replaceable`` or listed in its
    :data:`RUN_MARKER`): such a folder is replaced as a whole at the end of the run.
    Returns ``path`` as a :class:`~pathlib.Path`.

    Raises:
        DataError: ``path`` is a file, lies below a file, holds other files (which a
            replacement would lose), or its nearest existing folder (for an existing
            ``path``: its parent, where the replacement is renamed) is not writable.
    """
    target = check_writable_dir(path, option)
    if target.is_dir():
        _remove_left_by_dead(target, _PROBE)
        names = set(os.listdir(target))
        foreign = sorted(names - set(replaceable) - {RUN_MARKER} - _marked_files(target))
        if foreign:
            shown = ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")
            raise DataError(f"{option} {path}: the folder holds files this job did not write ({shown}); "
                            f"it would be replaced as a whole - choose a new folder or empty it")
        _probe(target.absolute().parent, path, option)  # the folder is replaced by a rename in its parent
    return target


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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


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
        _remove_left_by_dead(folder, prefix)
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
    with _staging(folder, f".entries{_PARTIAL}", path, option, _nearest_existing(folder)) as tmp:
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
