"""Kaldi ``text`` files: ``<key> w1 w2 ...``, one entry per line; and a symbol table
``words.txt`` (``<sym> <id>``) with integer ``words`` files mapped through it.

A line holding only the key (with or without trailing spaces) is a valid *empty*
word sequence. Fields are separated by ASCII white space, as in Kaldi. A UTF-8
byte-order mark at the start of the file is ignored; one (or a zero-width character)
inside a key is an error, since the key would silently not match.
"""
from __future__ import annotations

from typing import Dict, Iterable, Iterator, Tuple

from ..errors import DataError, format_location
from ..types import Words
from ._common import check_key, iter_lines, iter_pairs, keyed_lines, split_fields
from .atomic import atomic_write

__all__ = ["iter_int_words", "iter_kaldi_text", "kaldi_text_line", "kaldi_text_lines", "read_kaldi_text",
           "read_symbol_table", "write_kaldi_text"]


def iter_kaldi_text(path) -> Iterator[Tuple[int, str, Words]]:
    """Stream a Kaldi text file: ``(line_no, key, words)`` per line, 1-based, in file
    order, without keeping anything (duplicate keys are the caller's to find).

    Raises:
        DataError: the file is missing or not UTF-8, a line is blank or white space
            only, or a key holds a byte-order mark or zero-width character
            (``path:line``).
    """
    for line_no, line in iter_lines(path):
        fields = split_fields(line)
        if not fields:
            raise DataError(f"{format_location(path, line_no)}: blank line; expected '<key> [word ...]' "
                            f"(an empty hypothesis is written as the bare key)")
        key = fields[0] if fields[0].isascii() else check_key(fields[0], format_location(path, line_no))
        yield line_no, key, tuple(fields[1:])


def read_kaldi_text(path) -> Dict[str, Words]:
    """A Kaldi ``text`` file as ``{key: (w1, w2, ...)}`` in file order (a bare key is an
    empty tuple; nothing is normalised: no case folding, no ``</s>`` handling).

    Raises:
        DataError: as :func:`iter_kaldi_text`, or a key occurs twice (``path:line``).
    """
    entries: Dict[str, Words] = {}
    first_line: Dict[str, int] = {}
    for line_no, key, words in iter_kaldi_text(path):
        if key in entries:
            raise DataError(f"{format_location(path, line_no)}: duplicate key {key!r} "
                            f"(first seen on line {first_line[key]})")
        entries[key] = words
        first_line[key] = line_no
    return entries


def _check_token(token, what: str, key) -> None:
    if not isinstance(token, str) or not token or split_fields(token) != [token]:
        raise DataError(f"write_kaldi_text: {what} {token!r} (key {key!r}) must be a non-empty "
                        f"string without white space")


def kaldi_text_line(key, words: Iterable[str]) -> str:
    """The line ``<key> w1 w2 ...\\n`` (a bare key for no words) that
    :func:`write_kaldi_text` writes for one entry.

    Raises:
        DataError: the key or a word is empty or contains white space.
    """
    _check_token(key, "key", key)
    words = tuple(words)
    for w in words:
        _check_token(w, "word", key)
    return " ".join((key,) + words) + "\n"


def write_kaldi_text(path, items: Iterable[Tuple[str, Iterable[str]]]) -> None:
    """Write ``items`` (``(key, words)`` pairs in output order, or a mapping) as
    :func:`kaldi_text_line` lines to ``path``, atomically (replaced only when every line
    was written).

    Raises:
        DataError: a key or word is empty or contains white space, or a key repeats
            (nothing is written then).
        OSError: the file cannot be written.
    """
    with atomic_write(path) as fh:
        fh.writelines(kaldi_text_lines(items))


def kaldi_text_lines(items: Iterable[Tuple[str, Iterable[str]]]) -> Iterator[str]:
    """The lines :func:`write_kaldi_text` writes for ``items``, for a writer that appends
    part after part (keys checked unique within ``items``). Raises DataError as it."""
    return keyed_lines(items, "write_kaldi_text", lambda key: _check_token(key, "key", key), kaldi_text_line)


def read_symbol_table(path) -> Dict[int, str]:
    """``words.txt`` (``<sym> <id>``) as ``{id: sym}``. Raises DataError for a
    malformed line or an id used twice (``file:line``)."""
    table: Dict[int, str] = {}
    for _, loc, sym, sid in iter_pairs(path, "expected '<symbol> <integer id>', found {n} fields"):
        if not (sid.isascii() and sid.isdigit()):
            raise DataError(f"{loc}: id {sid!r} of symbol {sym!r} is not a non-negative "
                            f"integer (ASCII digits only, e.g. 42)")
        i = int(sid)
        if i in table:
            raise DataError(f"{loc}: id {i} is used twice ({table[i]!r} and {sym!r})")
        table[i] = sym
    return table


def iter_int_words(words_path, table: Dict[int, str], table_path) -> Iterator[Tuple[int, str, Words]]:
    """Stream ``words`` (``<key> id id ...``; bare key = empty) mapped through the
    symbol table of ``words.txt`` (:func:`read_symbol_table`): ``(line_no, key,
    words)`` per line. Duplicate keys are the caller's to find.

    Raises:
        DataError: a blank line, a key holding an invisible character, a word id that
            is not a non-negative integer or not in the table (``file:line``).
    """
    for line_no, line in iter_lines(words_path):
        fields, loc = split_fields(line), format_location(words_path, line_no)
        if not fields:
            raise DataError(f"{loc}: blank line; expected '<key> [id ...]'")
        key = fields[0] if fields[0].isascii() else check_key(fields[0], loc)
        for tok in fields[1:]:
            if not (tok.isascii() and tok.isdigit()):
                raise DataError(f"{loc}: key {key!r}: word id {tok!r} is not a non-negative integer (ASCII "
                                f"digits only, e.g. 42)")
            if int(tok) not in table:
                raise DataError(f"{loc}: key {key!r}: word id {tok} is not in {table_path}")
        yield line_no, key, tuple(table[int(tok)] for tok in fields[1:])
