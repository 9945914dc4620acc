"""Kaldi archives holding one number per key (``ac_cost``, ``lm_cost``, ``acwt``, ...).

Text archives (``<key> <value>`` or ``<key> [ <value> ]`` per line) are parsed here,
with the exact 1-based line of any error and full float64 precision. Binary archives
(``<key> \\0B...``; detected by a NUL byte anywhere in the file, which a text archive
never contains) are read with :func:`kaldiio.load_ark`.

Values are whatever the archive holds; for the N-best files they are costs (negated
natural-log values, larger = worse).
"""
from __future__ import annotations

import math
from typing import Dict, Iterable, Iterator, Tuple

import numpy as np

from ..errors import DataError, format_location
from ._common import check_key, iter_lines, keyed_lines, parse_cost, split_fields
from .atomic import atomic_write

__all__ = ["cost_ark_line", "cost_ark_lines", "iter_cost_ark", "read_cost_ark", "write_cost_ark"]


def _check_finite(value: float, key: str, where: str) -> float:
    if not math.isfinite(value):
        raise DataError(f"{where}: value of key {key!r} is {value!r}; costs must be finite")
    return value


def _text_entries(path, lines: Iterator[Tuple[int, str]]) -> Iterator[Tuple[int, str, float]]:
    """``(line_no, key, value)`` of a text archive given as ``(line_no, line)`` pairs
    (a ``key [ v ]`` entry may span several lines); duplicates are the caller's to find."""
    lines = iter(lines)
    for line_no, line in lines:
        fields = split_fields(line)
        if len(fields) == 2 and not fields[1].startswith("["):
            # fast path: "key value" with an ASCII key (no invisible characters); a bad
            # value falls through to the full path, which parses it again for the message
            key = fields[0]
            if key.isascii():
                try:
                    value = parse_cost(fields[1], "", "")
                except DataError:
                    pass
                else:
                    yield line_no, key, value
                    continue
        loc = format_location(path, line_no)
        if not fields:
            raise DataError(f"{loc}: blank line; expected '<key> <number>'")
        key, values = check_key(fields[0], loc), fields[1:]
        if values and values[0].startswith("["):
            # Kaldi text vector/matrix: "key [ v ]", possibly spread over lines.
            values[0] = values[0][1:]
            body = [v for v in values if v]
            while not (body and body[-1].endswith("]")):
                more = next(lines, None)
                if more is None:
                    raise DataError(f"{loc}: key {key!r}: '[' without a closing ']'")
                body.extend(split_fields(more[1]))
            body[-1] = body[-1][:-1]
            values = [v for v in body if v]
        if len(values) != 1:
            what = "no value" if not values else f"{len(values)} values"
            raise DataError(f"{loc}: key {key!r} has {what}; expected exactly one number ('<key> <number>')")
        yield line_no, key, parse_cost(values[0], loc, f"key {key!r}")


def _binary_entries(path, fh) -> Iterator[Tuple[int, str, float]]:
    """``(entry_no, key, value)`` of a binary archive read from the open file ``fh``
    (one entry at a time); duplicates are the caller's to find."""
    import kaldiio

    entry = 0
    key = None
    try:
        for key, value in kaldiio.load_ark(fh):
            entry += 1
            where = f"{path} (entry {entry}, key {key!r})"
            arr = np.asarray(value)
            if arr.size != 1:
                raise DataError(f"{where}: holds {arr.size} values of shape {arr.shape}; expected exactly one number")
            if arr.dtype.kind not in "biuf":
                raise DataError(f"{where}: holds a {arr.dtype} value; expected a number")
            yield entry, key, _check_finite(float(arr.reshape(-1)[0]), key, where)
    except DataError:
        raise
    except Exception as e:  # kaldiio raises ValueError/RuntimeError/AssertionError/...
        after = f" after key {key!r}" if key is not None else ""
        raise DataError(f"{path}: cannot read Kaldi archive entry {entry + 1}{after}: "
                        f"{type(e).__name__}: {e}") from None


def _entries(path) -> Iterator[Tuple[int, str, float, bool]]:
    """``(line or entry number, key, value, binary)`` of every entry, in file order."""
    try:
        with open(path, "rb") as fh:  # (binary: a NUL byte anywhere, read in 1 MB blocks)
            binary = any(b"\x00" in block for block in iter(lambda: fh.read(2**20), b""))
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from None
    if binary:
        with open(path, "rb") as fh:
            for entry, key, value in _binary_entries(path, fh):
                yield entry, key, value, True
        return
    for line_no, key, value in _text_entries(path, iter_lines(path)):
        yield line_no, key, value, False


def iter_cost_ark(path) -> Iterator[Tuple[str, float]]:
    """:func:`read_cost_ark` as a stream: ``(key, value)`` in file order, one entry at a time, values as
    read (N-best costs: negated natural log); a binary file is read twice (once to tell which it is).
    Duplicate keys are not looked for (the caller compares the keys with another file's).

    Raises:
        DataError: as :func:`read_cost_ark`, except for duplicate keys.
    """
    for _, key, value, _ in _entries(path):
        yield key, value


def read_cost_ark(path) -> Dict[str, float]:
    """Read a Kaldi archive with one number per key into ``{key: float}``.

    Works for text archives (``key 5``, ``key 922.9875``, ``key [ 1.5 ]``) and binary
    archives written by Kaldi or :func:`kaldiio.save_ark` (1-element vectors or 1x1
    matrices). Values are returned as Python floats (float64) in file order; the unit is
    whatever the file holds (for N-best costs: negated natural log, larger = worse).

    Text values are parsed strictly (:func:`~nbest_rescore.io._common.parse_cost`); a
    UTF-8 byte-order mark at the start of a text archive is ignored.

    Raises:
        DataError: the file is missing or unreadable; a text line is blank, has no value,
            more than one value, or a value that is not a decimal number (``1_000``,
            ``nan``, ``inf``, ``0x1p3``, ...: ``path:line``, key, token and an example of
            a valid number); a key holding a byte-order mark or zero-width character
            (``path:line``); a binary entry is not a single number (path, entry number,
            key); a value is NaN or infinite (path and key); a key occurs twice.
    """
    out: Dict[str, float] = {}
    first: Dict[str, int] = {}
    for n, key, value, binary in _entries(path):
        if key in out:
            raise DataError(f"{path} (entry {n}, key {key!r}): duplicate key {key!r}" if binary else
                            f"{format_location(path, n)}: duplicate key {key!r} (first on line {first[key]})")
        out[key] = value
        first[key] = n
    return out


def _check_ark_key(key) -> None:
    if not isinstance(key, str) or not key or split_fields(key) != [key]:
        raise DataError(f"write_cost_ark: key {key!r} must be a non-empty string without white space")


def cost_ark_line(key, value, where: str = "write_cost_ark") -> str:
    """The line ``<key> <value>\\n`` (``%.6f``) that :func:`write_cost_ark` writes.

    Raises:
        DataError: the key is empty or contains white space, or the value is not a
            finite number (``where`` names the writer or file in the message).
    """
    _check_ark_key(key)
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise DataError(f"write_cost_ark: value of key {key!r} is not a number: {value!r}") from None
    _check_finite(v, key, where)
    return "%s %.6f\n" % (key, v)


def write_cost_ark(path, items: Iterable[Tuple[str, float]]) -> None:
    """Write ``items`` (``(key, value)`` pairs in output order, or a mapping; values in
    the caller's unit, for costs negated natural logs) as :func:`cost_ark_line` lines
    to ``path``, atomically (replaced only when every line was written).

    Raises:
        DataError: a key is empty or contains white space, a key repeats, or a value is
            not a finite number (nothing is written then).
        OSError: the file cannot be written.
    """
    with atomic_write(path) as fh:
        fh.writelines(cost_ark_lines(items, path))


def cost_ark_lines(items: Iterable[Tuple[str, float]], path) -> Iterator[str]:
    """The lines :func:`write_cost_ark` writes to ``path`` for ``items``, for a writer
    that appends part after part (keys checked unique within ``items``). Raises
    DataError as it."""
    return keyed_lines(items, "write_cost_ark", _check_ark_key,
                       lambda key, value: cost_ark_line(key, value, f"write_cost_ark {path}"))
