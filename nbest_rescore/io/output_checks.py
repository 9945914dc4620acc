"""The output policy of every command, checked before any work: an output is not one of
the inputs (:func:`check_outside_inputs`), its folder exists and this user can write
there (:func:`check_writable_dir`, :func:`check_output_file`), and a folder that will be
replaced holds only what an earlier run wrote (:func:`check_output_dir`, marked by
:data:`RUN_MARKER`); the temporary files and folders of killed processes are removed
(:func:`remove_left_by_dead`). The writes themselves: :mod:`.atomic`.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Iterable, Optional

from ..errors import DataError
from ..os_errors import file_kind, output_error

__all__ = ["RUN_MARKER", "check_output_dir", "check_output_file", "check_outside_inputs", "check_writable_dir",
           "remove_left_by_dead"]


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
    check_output_kind(path, option)
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
        base = nearest_existing(folder)
    except OSError as exc:  # a name too long, a loop of links ...
        raise output_error(exc, path, option) from None
    if not base.is_dir():
        raise DataError(f"{option} {path}: {base} is a file, so no folder can be made below it; "
                        f"choose another {option}")
    _probe(base, path, option)


def check_output_kind(path, option: Optional[str]) -> None:
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


def remove_left_by_dead(folder: Path, prefix: str, suffix: str = "") -> None:
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


#: Written into every output folder: marks it as replaceable by a later run.
RUN_MARKER = ".nbest-rescore-run"


def nearest_existing(path: Path) -> Path:
    """``path`` or the nearest folder above it that exists."""
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
    remove_left_by_dead(folder, _PROBE)
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
        remove_left_by_dead(target, _PROBE)
        names = set(os.listdir(target))
        foreign = sorted(names - set(replaceable) - {RUN_MARKER} - _marked_files(target))
        if foreign:
            shown = ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")
            raise DataError(f"{option} {path}: the folder holds files this job did not write ({shown}); "
                            f"it would be replaced as a whole - choose a new folder or empty it")
        _probe(target.absolute().parent, path, option)  # the folder is replaced by a rename in its parent
    return target


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
