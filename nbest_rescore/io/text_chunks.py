"""LM text (:mod:`.lm_text`'s format) read in line-aligned byte chunks, for the
parallel passes of ``prepare-text`` (:mod:`nbest_rescore.training.text_store`).

The parent process reads a file (``.gz`` decompressed on the fly) as a sequence of
:class:`Chunk` s of about :data:`CHUNK_BYTES`, each ending after a ``\\n`` (the last one
may not); worker processes turn each chunk into word counts (:func:`count_chunk`) or
token ids (:func:`encode_chunk`). A chunk is split exactly as :func:`~.lm_text.read_lm_text`
splits the file: lines on ``\\n`` alone, words on ASCII white space, a UTF-8 byte-order
mark dropped at the very start, a line that is not UTF-8 an error naming ``file:line``.
This module imports no torch, so that workers start fast.
"""
from __future__ import annotations

import functools
import hashlib
import re
from collections import Counter
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import DataError, format_location
from ._common import UTF8_BOM, _gzip_error, is_gzip_name, open_text_input, split_fields

#: nominal bytes of a chunk (a chunk ends at the first ``\n`` after it)
CHUNK_BYTES = 8 << 20

# Characters str.split() splits on that split_fields does not for a non-ASCII line: a
# chunk without them splits alike with the fast str.split().
_OTHER_WS = re.compile("[\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")


@dataclass(frozen=True)
class Chunk:
    """Whole lines of ``path``: ``data`` (bytes) starting at byte ``offset`` of the
    (decompressed) text, its first line being line ``line`` (1-based)."""

    path: str
    data: bytes
    offset: int
    line: int


def read_chunks(path, limit: Optional[int] = None, size: Optional[int] = None) -> Iterator[Chunk]:
    """The chunks of ``path`` in order (at most the first ``limit`` bytes), of about
    ``size`` bytes (None: :data:`CHUNK_BYTES`). Raises DataError: missing, unreadable,
    or a ``.gz`` that is not gzip data or is truncated."""
    size = size or CHUNK_BYTES
    fh = open_text_input(path)
    offset, line, rest = 0, 1, b""
    with fh:
        while limit is None or offset < limit:
            want = size if limit is None else min(size, limit - offset - len(rest))
            try:
                block = fh.read(max(0, want)) if want > 0 else b""
            except (EOFError, OSError) as exc:
                if not is_gzip_name(path):
                    raise DataError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
                raise _gzip_error(path, line + rest.count(b"\n") - 1, exc) from None
            data = rest + block
            if not block or (limit is not None and offset + len(data) >= limit):
                if data:
                    yield Chunk(str(path), data, offset, line)
                return
            cut = data.rfind(b"\n") + 1
            if cut == 0:  # a line longer than a chunk: read on
                rest = data
                continue
            chunk, rest = data[:cut], data[cut:]
            yield Chunk(str(path), chunk, offset, line)
            offset, line = offset + len(chunk), line + chunk.count(b"\n")


def chunk_words(chunk: Chunk) -> List[List[str]]:
    """The words of each line of the chunk (line ends and a leading byte-order mark
    removed), split as :func:`~._common.split_fields` splits them (the fast ``str.split``
    where it splits alike). Raises DataError ``file:line: not valid UTF-8 ...`` as
    :func:`~._common.iter_lines`."""
    data = chunk.data.removeprefix(UTF8_BOM) if chunk.offset == 0 else chunk.data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        line = chunk.line + data.count(b"\n", 0, exc.start)
        raise DataError(f"{format_location(chunk.path, line)}: not valid UTF-8 text (byte {exc.start - line_start + 1} "
                        f"of the line); expected UTF-8: convert the file, e.g. `iconv -f LATIN1 -t UTF-8`") from None
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    plain = text.isascii() or _OTHER_WS.search(text) is None
    return list(map(str.split if plain else split_fields, lines))


@dataclass(frozen=True)
class ChunkCounts:
    """What :func:`count_chunk` found: word counts (None when not asked) and words
    (:func:`encode_chunk` counts the sentences)."""

    counts: Optional[Counter]
    words: int


# ASCII separators str.split() splits on and bytes.split() does not: a chunk without
# them splits alike as bytes (split_fields' ASCII white space is bytes.split()'s).
_C0_SEPARATORS = (b"\x1c", b"\x1d", b"\x1e", b"\x1f")


def _plain_bytes(chunk: Chunk) -> Optional[bytes]:
    """The chunk's bytes (a leading byte-order mark removed) when ``bytes.split`` splits
    its words as :func:`chunk_words` does, after checking it is UTF-8 (the error of
    :func:`chunk_words`); None when only the text path splits it right."""
    data = chunk.data.removeprefix(UTF8_BOM) if chunk.offset == 0 else chunk.data
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        chunk_words(chunk)  # (raises the file:line error)
    return None if any(c in data for c in _C0_SEPARATORS) else data


def count_chunk(chunk: Chunk, counts: bool = True) -> ChunkCounts:
    """The words of a chunk counted (``counts``: also each word's count), on its bytes
    where they split alike (no word object per line)."""
    data = _plain_bytes(chunk)
    if data is None:
        words = chunk_words(chunk)
        return ChunkCounts(Counter(chain.from_iterable(words)) if counts else None, sum(map(len, words)))
    tokens = data.split()
    found = Counter({w.decode("utf-8"): c for w, c in Counter(tokens).items()}) if counts else None
    return ChunkCounts(found, len(tokens))


def prefix_cut(chunk: Chunk, quota: int, counts: bool = True) -> Tuple[int, ChunkCounts]:
    """Where a chunk reaches ``quota`` words: (bytes of the chunk up to the end of the
    line whose words reach it, the counts of those lines), as ``data.max_words`` cuts
    the text (:func:`~.lm_text.read_lm_text`); lines after it are not decoded. A
    chunk with fewer words gives its whole length."""
    pos, total, counter = 0, 0, Counter() if counts else None
    raw_lines = chunk.data.split(b"\n")
    for k, raw in enumerate(raw_lines):
        if k == len(raw_lines) - 1 and not raw:
            break
        end = pos + len(raw) + 1
        part = Chunk(chunk.path, chunk.data[pos:min(end, len(chunk.data))], chunk.offset + pos, chunk.line + k)
        words = chunk_words(part)
        words = words[0] if words else []
        if counter is not None:
            counter.update(words)
        total += len(words)
        pos = min(end, len(chunk.data))
        if total >= quota:
            break
    return pos, ChunkCounts(counter, total)


@dataclass(frozen=True)
class EncodedChunk:
    """A chunk's sentences as ids (:func:`encode_chunk`): ``ids`` every sentence's ids
    and end tokens, concatenated; ``breaks`` int64: offsets in ``ids`` before which one
    or more blank lines stand (a document starts there; ``len(ids)`` when the chunk ends
    with a blank line); ``blank``: the chunk holds a blank line; words and sentences."""

    ids: np.ndarray
    breaks: np.ndarray
    blank: bool
    words: int
    sentences: int


#: An encoder: the words of each sentence -> (ids of all sentences with their end
#: tokens, concatenated, int64 or the store's dtype; tokens of each sentence, int64 [S]).
Encoder = Callable[[List[List[str]]], Tuple[np.ndarray, np.ndarray]]


def encode_chunk(chunk: Chunk, encoder: Encoder) -> EncodedChunk:
    """The chunk's non-blank lines encoded by ``encoder``, with where documents break."""
    words = chunk_words(chunk)
    lens = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    nonblank = lens > 0
    ids, sent_tokens = encoder([w for w in words if w])
    starts = np.concatenate([[0], np.cumsum(sent_tokens)])
    before_blank = np.cumsum(nonblank)[~nonblank]  # sentences before each blank line
    return EncodedChunk(ids, np.unique(starts[before_blank]), bool((~nonblank).any()), int(lens.sum()),
                        int(nonblank.sum()))


def word_encoder(index: dict, unk: int, eos: int, dtype) -> Encoder:
    """The word-level :data:`Encoder`: each word's id (``unk`` outside ``index``), then
    ``eos`` after every sentence (vectorised: no per-token Python)."""

    def encode(sentences: List[List[str]]) -> Tuple[np.ndarray, np.ndarray]:
        lens = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
        n = int(lens.sum())
        flat = np.fromiter(map(index.get, chain.from_iterable(sentences), repeat(unk)), dtype=dtype, count=n)
        out = np.empty(n + len(sentences), dtype=dtype)
        out[np.arange(n) + np.repeat(np.arange(len(sentences)), lens)] = flat
        out[np.cumsum(lens + 1) - 1] = eos
        return out, lens + 1

    return encode


_LINE_END = b"\xff"  # (never a byte of UTF-8 text: marks line ends among the words)


def encode_words_chunk(chunk: Chunk, index: dict, dtype, fallback: Encoder) -> EncodedChunk:
    """:func:`encode_chunk` for word ids, on the chunk's bytes: its words and line ends
    (a marker token) split at once, every token mapped through ``index`` (UTF-8 bytes
    -> id; ``<unk>`` 1 outside it; the marker -> one id past the vocabulary), then the
    markers after a word made ``</s>`` and those of blank lines dropped, with numpy (no
    per-line or per-token Python). ``fallback``: the sentence :data:`Encoder` for a
    chunk only the text path splits right."""
    data = _plain_bytes(chunk)
    if data is None:
        return encode_chunk(chunk, fallback)
    if not data.endswith(b"\n"):
        data += b"\n"
    tokens = data.replace(b"\n", b" " + _LINE_END + b" ").split()
    marker = index[_LINE_END]
    ids = np.fromiter(map(index.get, tokens, repeat(1)), dtype=np.uint32 if marker > 0xFFFF else dtype,
                      count=len(tokens))
    end = ids == marker
    after_word = np.concatenate([[False], ~end[:-1]])
    keep = ~end | after_word  # a marker after a word ends a sentence; others are blank lines
    kept_before = np.cumsum(keep) - keep
    blank = end & ~after_word
    ids[end] = 0  # (</s>)
    return EncodedChunk(ids[keep].astype(dtype, copy=False), np.unique(kept_before[blank]), bool(blank.any()),
                        int((~end).sum()), int((end & after_word).sum()))


def text_checksum(path, limit: Optional[int] = None) -> str:
    """``blake2b:HEX`` (BLAKE2b-512, ``b2sum``'s) of the first ``limit`` bytes of the
    (decompressed) text of ``path`` (None: all of it)."""
    h = hashlib.blake2b()
    for chunk in read_chunks(path, limit):
        h.update(chunk.data)
    return "blake2b:" + h.hexdigest()


# The chunk encoder of a worker process (chunk -> EncodedChunk), set once by its
# initializer (a pool's workers encode many chunks with one vocabulary or tokenizer).
_ENCODER: Optional[Callable[[Chunk], "EncodedChunk"]] = None


def init_word_worker(words: Sequence[str], dtype: str) -> None:
    """Pool initializer: the word encoder of the vocabulary ``words`` (id order,
    ``</s>`` 0 and ``<unk>`` 1; :func:`encode_words_chunk`)."""
    global _ENCODER
    dtype = np.dtype(dtype)
    index = {w.encode("utf-8"): i for i, w in enumerate(words)}
    index[_LINE_END] = len(words)
    fallback = word_encoder({w: i for i, w in enumerate(words)}, 1, 0, dtype)
    _ENCODER = functools.partial(encode_words_chunk, index=index, dtype=dtype, fallback=fallback)


def init_encoder(encoder: Encoder) -> None:
    """Set this process's sentence encoder (:func:`encode_chunk`: a tokenizer's)."""
    global _ENCODER
    _ENCODER = functools.partial(encode_chunk, encoder=encoder)


def hf_encoder(text, dtype) -> Encoder:
    """The :data:`Encoder` of a Hugging Face tokenizer's convention ``text``
    (:class:`~nbest_rescore.models.hf.HfText`: every sentence's tokens and end tokens,
    one batched tokenizer call per chunk)."""

    def encode(sentences: List[List[str]]) -> Tuple[np.ndarray, np.ndarray]:
        ids = text.sentences(sentences)
        lens = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        return np.fromiter(chain.from_iterable(ids), dtype=dtype, count=int(lens.sum())), lens

    return encode


def encode_task(chunk: Chunk) -> EncodedChunk:
    """The chunk encoded by this process's encoder (a pool task)."""
    return _ENCODER(chunk)
