"""Private helpers shared by the readers: line iteration, Kaldi-style field splitting,
the one strict number parser (:func:`parse_cost`), key checks and the document-order
check (:class:`DocumentOrder`)."""
from __future__ import annotations

import gzip
import io
import math
import os
import re
import zlib
from collections.abc import Mapping
from typing import IO, Callable, Iterable, Iterator, List, Optional, Tuple, Union

from ..errors import DataError, format_location
from ..validation import is_stream

UTF8_BOM = b"\xef\xbb\xbf"

# A decimal number as Kaldi writes it: optional sign, digits with an optional fraction
# (or a bare fraction), optional exponent. ASCII digits only: no '_', no 'nan'/'inf',
# no hexadecimal, no surrounding white space (all of which Python's float() accepts).
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
NUMBER_EXAMPLES = "-12.5, 3, 1e-3 or 1.5E+02"

# Invisible characters that make two keys differ although they print the same.
_INVISIBLE = {
    "\ufeff": "U+FEFF byte-order mark",
    "\u200b": "U+200B zero-width space",
    "\u200c": "U+200C zero-width non-joiner",
    "\u200d": "U+200D zero-width joiner",
    "\u2060": "U+2060 word joiner",
    "\u180e": "U+180E Mongolian vowel separator",
}
_INVISIBLE_RE = re.compile("[" + "".join(_INVISIBLE) + "]")

# Kaldi splits fields on ASCII white space only (not on e.g. U+00A0).
_ASCII_WS = re.compile(r"[ \t\r\f\v]+")


def split_fields(line: str) -> List[str]:
    """Split ``line`` on ASCII white space (Kaldi's convention), dropping empty fields."""
    if line.isascii():
        return line.split()
    return [f for f in _ASCII_WS.split(line) if f]


#: A text input or output whose name ends so is gzip-compressed (:func:`open_text_input`).
GZIP_SUFFIX = ".gz"


def is_gzip_name(path) -> bool:
    """Whether ``path``'s name ends in :data:`GZIP_SUFFIX` (read and written compressed)."""
    return os.fspath(path).endswith(GZIP_SUFFIX)


#: The streams opened (:func:`peek_stream`) and not yet read: spec -> handle.
_OPEN_STREAMS: dict = {}


def peek_stream(spec: str) -> bytes:
    """The first bytes of the stream ``spec`` (:func:`is_stream`), opened once and kept
    for :func:`open_text_input`: ``b""`` when it is empty. Raises DataError: the command
    gave nothing and failed (:func:`check_stream_exit`)."""
    if spec not in _OPEN_STREAMS:
        from kaldiio import open_like_kaldi

        _OPEN_STREAMS[spec] = open_like_kaldi(spec, "rb")
    head = _OPEN_STREAMS[spec].peek(4096)
    if not head:  # (at its end: a command that failed is said now)
        check_stream_exit(spec, _OPEN_STREAMS[spec])
        _OPEN_STREAMS[spec] = io.BufferedReader(io.BytesIO())
    return head


def check_stream_exit(spec: str, fh) -> None:
    """Close the stream ``spec``; for a command, wait for it. Raises DataError: it exited
    with a non-zero status or was killed."""
    status = fh.close()  # (kaldiio: the command's exit status << 8, or None)
    if status:
        code = status >> 8
        how = f"exited with status {code}" if code > 0 else f"was killed by signal {-code}"
        raise DataError(f"{spec}: the command {spec.rstrip()[:-1].strip()!r} {how}, so what it gave is not the whole "
                        f"input (its own message, if any, is above); run it alone to check it")


def open_text_input(path) -> IO[bytes]:
    """``path`` open for reading bytes, decompressed on the fly when its name ends in
    ``.gz`` (:func:`is_gzip_name`); a stream (:func:`is_stream`) opened by kaldiio's
    ``open_like_kaldi``. Raises DataError: missing or unreadable."""
    if is_stream(path):
        peek_stream(path)
        return _OPEN_STREAMS.pop(path)
    try:
        return gzip.open(path, "rb") if is_gzip_name(path) else open(path, "rb")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as e:
        raise DataError(f"{path}: cannot open: {e.strerror or e}") from None


def _gzip_error(path, line_no: int, exc: BaseException) -> DataError:
    """The one-line error of a ``.gz`` input that is not gzip data, or whose data is
    truncated or corrupt after ``line_no`` lines."""
    fix = f"check it with gzip -t {path}, or give the uncompressed file"
    if isinstance(exc, gzip.BadGzipFile) and line_no == 0:
        return DataError(f"{path}: is not gzip data ({exc}), but a name ending in {GZIP_SUFFIX} is read as gzip; "
                         f"{fix} (without {GZIP_SUFFIX} in its name)")
    return DataError(f"{path}: the gzip data is truncated or corrupt after line {line_no} of the decompressed text "
                     f"({str(exc) or type(exc).__name__}); {fix}")


def iter_lines(path) -> Iterator[Tuple[int, str]]:
    """Yield ``(line_no, line)`` for a UTF-8 text file, 1-based, line end removed; a
    file named ``*.gz`` is decompressed as it is read (line numbers of the
    decompressed text, :func:`open_text_input`).

    Only ``\\n`` ends a line (a trailing ``\\r`` is dropped). A final line without a
    newline is yielded; the empty remainder after a final newline is not. A UTF-8
    byte-order mark at the very start of the file (written by some Windows editors) is
    dropped, as Python's ``utf-8-sig`` codec does; one anywhere else is kept (key
    readers reject it with :func:`check_key`).

    Raises:
        DataError: the file does not exist or is not readable, a line is not UTF-8, or
            a ``.gz`` file is not gzip data or is truncated or corrupt (:func:`_gzip_error`).
    """
    fh = open_text_input(path)
    line_no = 0
    with fh:
        try:
            for line_no, raw in enumerate(fh, start=1):
                if line_no == 1:
                    raw = raw.removeprefix(UTF8_BOM)
                try:
                    line = raw.removesuffix(b"\n").removesuffix(b"\r").decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DataError(f"{format_location(path, line_no)}: not valid UTF-8 text (byte {e.start + 1} "
                                    f"of the line); expected UTF-8: convert the file, e.g. "
                                    f"`iconv -f LATIN1 -t UTF-8`") from None
                yield line_no, line
        except (EOFError, OSError, zlib.error) as e:
            if not isinstance(fh, gzip.GzipFile):
                raise
            raise _gzip_error(path, line_no, e) from None
    if is_stream(path):
        check_stream_exit(path, fh)


def iter_pairs(path, expected: str) -> Iterator[Tuple[int, str, str, str]]:
    """``(line_no, loc, first, second)`` per line of a two-column file (``loc``:
    ``file:line``). Raises DataError as :func:`iter_lines`, or ``"<loc>: <expected>"``
    (``{n}``: the number of fields) for a line without exactly two fields."""
    for line_no, line in iter_lines(path):
        loc, fields = format_location(path, line_no), split_fields(line)
        if len(fields) != 2:
            raise DataError(f"{loc}: " + expected.format(n=len(fields)))
        yield line_no, loc, fields[0], fields[1]


def parse_cost(token: str, loc: str, what: str) -> float:
    """Parse one cost or score strictly: the only number parser of the readers.

    Accepts decimal numbers only (``-12.5``, ``3``, ``1e-3``, ``1.5E+02``, ``+.5``; ASCII
    digits). Rejects what Python's ``float()`` would also accept: digit separators
    (``1_000``), ``nan``/``inf``/``infinity``, surrounding white space, non-ASCII
    digits; and hexadecimal, an empty token, or a value outside the float64 range.
    The value is returned unchanged (the caller knows whether it is a cost, i.e. a
    negated natural log, or a natural-log score).

    Args:
        token: the field as read from the file.
        loc: ``format_location(path, line)`` of the field.
        what: what the number is, e.g. ``"value of key 'utt-1'"`` or ``"acoustic score"``.

    Raises:
        DataError: ``"<loc>: <what>: <token> is not a decimal number (<why>); expected a
            number such as -12.5, 3, 1e-3 or 1.5E+02"``, or the value overflows float64.
    """
    if _DECIMAL.fullmatch(token) is not None:
        value = float(token)
        if value != math.inf and value != -math.inf:
            return value
        raise DataError(f"{loc}: {what}: {token!r} is outside the float64 range (about "
                        f"+-1.8e308); expected a finite number such as {NUMBER_EXAMPLES}")
    low = token.strip().lower().lstrip("+-")
    if not token:
        why = " (the field is empty)"
    elif low in ("nan", "inf", "infinity") or low.startswith("nan"):
        why = " (NaN and infinity are not allowed: a cost must be finite)"
    elif "_" in token:
        why = " ('_' digit separators are not allowed)"
    elif low.startswith("0x"):
        why = " (hexadecimal is not allowed)"
    elif token != token.strip() or _INVISIBLE_RE.search(token):
        why = " (it contains white space or an invisible character)"
    elif not token.isascii():
        why = " (only ASCII digits are allowed)"
    else:
        why = ""
    raise DataError(f"{loc}: {what}: {token!r} is not a decimal number{why}; "
                    f"expected a number such as {NUMBER_EXAMPLES}")


def check_key(key: str, loc: str, what: str = "key") -> str:
    """Return ``key`` unless it holds a byte-order mark or a zero-width character.

    Such characters are invisible when printed, so two keys that look the same would
    silently not match (typically a BOM left by a Windows editor at the start of a
    file that was later concatenated with others).

    Raises:
        DataError: naming ``loc`` (``file:line``), the key, the character and its
            position, and how to remove it.
    """
    if key.isascii():
        return key
    m = _INVISIBLE_RE.search(key)
    if m is None:
        return key
    raise DataError(f"{loc}: {what} {key!r} contains an invisible {_INVISIBLE[m.group()]} "
                    f"at character {m.start() + 1}, so it would not match the same "
                    f"{what} elsewhere; delete the character (e.g. "
                    f"`sed -i 's/\\xef\\xbb\\xbf//g' FILE` for byte-order marks)")


class DocumentOrder:
    """Checks, utterance by utterance in list order, that each document's utterances are
    consecutive (the one check of every reader): history is carried through a document in
    list order, so a document that reappears (A, B, A) would make it skip or interleave
    utterances. ``doc_path``: the file the documents came from (``utt2doc``/``utt2spk``, or
    a description); ``list_desc``: the N-best file that fixes the order. :attr:`count` is
    the number of documents so far."""

    def __init__(self, doc_path, list_desc: str):
        self.doc_path, self.list_desc = doc_path, list_desc
        self.closed: set = set()
        self.current: Optional[str] = None
        self.last_utt: Optional[str] = None
        self.last_at: dict = {}  # document -> where its latest utterance is (for messages)
        self.count = 0

    def add(self, utt: str, doc: str, doc_line: Optional[int] = None, utt_loc: Optional[str] = None) -> None:
        """The next utterance ``utt`` of document ``doc`` (``doc_line``: its line in
        ``doc_path``; ``utt_loc``: ``file:line`` of its first hypothesis).

        Raises:
            DataError: ``"<doc_path>:<line>: document 'A' reappears at utterance 'u3'
                after document 'B' ..."`` with the fix.
        """
        if doc != self.current:
            if doc in self.closed:
                at = f" ({utt_loc})" if utt_loc is not None else ""
                raise DataError(
                    f"{format_location(self.doc_path, doc_line)}: document {doc!r} reappears at "
                    f"utterance {utt!r}{at} after utterances of document {self.current!r} "
                    f"(last one {self.last_utt!r}), and {doc!r} was last seen at {self.last_at[doc]}; "
                    f"the utterances of a document must be "
                    f"consecutive in the order of {self.list_desc}, else the 1-best history "
                    f"would skip the utterances in between; fix: reorder {self.list_desc} so "
                    f"that each document's utterances are consecutive (in spoken order), "
                    f"or correct the document id of {utt!r} if it is wrong")
            if self.current is not None:
                self.closed.add(self.current)
            self.current = doc
            self.count += 1
        self.last_utt = utt
        self.last_at[doc] = utt_loc or format_location(self.doc_path, doc_line)


def keyed_lines(items: Iterable, who: str, check: Callable, line: Callable[..., str]) -> Iterator[str]:
    """``line(key, value)`` for each ``(key, value)`` of ``items`` (pairs, or a mapping),
    after ``check(key)`` (raises DataError for a bad key) and the duplicate check
    (``f"{who}: duplicate key ..."``, among ``items``)."""
    seen = set()
    for key, value in (items.items() if isinstance(items, Mapping) else items):
        check(key)
        if key in seen:
            raise DataError(f"{who}: duplicate key {key!r}")
        seen.add(key)
        yield line(key, value)


def file_kind(path, suffix: Union[str, Tuple[str, ...]], sniff: Callable[[str], bool]) -> bool:
    """Whether the file ``path`` is of a kind: its name ends in ``suffix`` (or one of them), else
    ``sniff(path)`` says so from its first bytes (False when it cannot be read, and
    for a folder). How the readers' ``is_*`` tell formats apart."""
    p = os.fspath(path)
    if os.path.isdir(p):
        return False
    if p.endswith(suffix):
        return True
    try:
        return sniff(p)
    except (OSError, DataError):
        return False


def float_text(value) -> str:
    """The shortest decimal text that reads back as the same float64 (Python's
    ``repr``: ``922.9875``, ``-0.5``, ``1e-07``), a negative zero written as ``0.0``.
    What the writers of the plain and JSON Lines formats use, so values survive exactly."""
    return repr(float(value) + 0.0)  # -0.0 + 0.0 == 0.0


def check_ranked_keys(utt_id: str, keys, what: str) -> None:
    """Formats that do not store hypothesis keys (plain, JSON Lines) rebuild them as
    ``<utt_id>-1 .. <utt_id>-N`` in list order; refuse to write a list whose keys are
    other ones (``what`` names the format), since they would not survive.

    Raises:
        DataError: naming the utterance, the first key that differs and the fix.
    """
    for n, key in enumerate(keys, start=1):
        if key != f"{utt_id}-{n}":
            raise DataError(f"utterance {utt_id!r}: hypothesis {n} has the key {key!r}, but {what} rebuilds keys as "
                            f"'<utt_id>-<rank>' ({utt_id}-{n}), so it would change; renumber the keys 1..N in list "
                            f"order first, or convert to kaldi, which keeps them")
