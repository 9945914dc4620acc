"""Private helpers shared by the readers: line iteration and Kaldi-style field splitting."""
from __future__ import annotations

import re
from typing import Iterator, List, Tuple

from ..errors import DataError, format_location

# Kaldi splits fields on ASCII white space only (not on e.g. U+00A0).
_ASCII_WS = re.compile(r"[ \t\r\f\v]+")


def split_fields(line: str) -> List[str]:
    """Split ``line`` on ASCII white space (Kaldi's convention), dropping empty fields."""
    if line.isascii():
        return line.split()
    return [f for f in _ASCII_WS.split(line) if f]


def iter_lines(path) -> Iterator[Tuple[int, str]]:
    """Yield ``(line_no, line)`` for a UTF-8 text file, 1-based, line end removed.

    Only ``\\n`` ends a line (a trailing ``\\r`` is dropped). A final line without a
    newline is yielded; the empty remainder after a final newline is not.

    Raises:
        DataError: the file does not exist or is not readable, or a line is not UTF-8.
    """
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as e:
        raise DataError(f"{path}: cannot open: {e.strerror or e}") from None
    with fh:
        for line_no, raw in enumerate(fh, start=1):
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            try:
                yield line_no, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(
                    f"{format_location(path, line_no)}: not valid UTF-8 text "
                    f"(byte {e.start + 1} of the line)") from None

