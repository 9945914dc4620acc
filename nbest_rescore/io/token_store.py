"""The token store: an LM text prepared once into memory-mapped ids (written by
``nbest-rescore prepare-text``, :mod:`nbest_rescore.training.text_store`; read by
``train``). docs/training.md ("Prepared text") describes it for users.

A store is a folder, written as a whole (:func:`~.atomic.atomic_dir`)::

    manifest.json   format, kind (words | hf), id dtype, vocabulary policy, word
                    budgets, and per source: its file, size, modification time,
                    BLAKE2b checksum, role (train | valid), documents, tokens, words,
                    sentences
    vocab.txt       (kind words) the vocabulary in id order: word and training count
    ids.bin         every source's documents, concatenated: uint16 (vocabularies up to
                    65,536 ids) or uint32 [N]
    docs.bin        int64 [D + 1]: document d is ids[docs[d]:docs[d + 1]], its start
                    token (``</s>``, or the tokenizer's BOS) first, then every sentence
                    and its end token; source s holds documents
                    ``documents[0] <= d < documents[1]`` of its manifest entry

Nothing here imports torch.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np

from ..errors import DataError

MANIFEST = "manifest.json"
VOCAB = "vocab.txt"
IDS = "ids.bin"
DOCS = "docs.bin"
FORMAT = "nbest-rescore token store"
VERSION = 1
FILES = (MANIFEST, VOCAB, IDS, DOCS)
#: the validation source's name (Kaldi's rnnlm data directories call it dev.txt)
DEV = "dev"


def id_dtype(num_ids: int) -> np.dtype:
    """uint16 where every id fits, else uint32."""
    return np.dtype(np.uint16 if num_ids <= 1 << 16 else np.uint32)


@dataclass(frozen=True)
class SourceFacts:
    """One source of a store (its manifest entry): ``name`` (the file's stem; ``dev``
    for validation), ``path`` (absolute, as prepared), ``role`` ``train`` or ``valid``,
    ``size`` and ``mtime_ns`` of the file then, ``checksum`` (``blake2b:HEX`` of the
    first ``checksum_bytes`` bytes of its text, all that was read: ``b2sum`` of an
    uncompressed file read whole), ``documents`` (first, end) document numbers,
    ``tokens`` (ids, start tokens included), ``words`` and ``sentences`` read."""

    name: str
    path: str
    role: str
    size: int
    mtime_ns: int
    checksum: str
    checksum_bytes: int
    documents: Tuple[int, int]
    tokens: int
    words: int
    sentences: int

    @classmethod
    def from_dict(cls, d: dict) -> "SourceFacts":
        return cls(**{**d, "documents": tuple(d["documents"])})


@dataclass(frozen=True)
class TokenStore:
    """An open store (:func:`open_store`): its folder, the manifest's settings
    (``kind``, ``encoding``: the vocabulary policy or tokenizer facts, ``budgets``: the
    word budgets it was cut to), the sources, the vocabulary words in id order (kind
    ``words``; ``()`` for ``hf``) with their counts, and the two memory maps."""

    path: str
    kind: str
    encoding: dict
    budgets: dict
    sources: Tuple[SourceFacts, ...]
    words: Tuple[str, ...]
    counts: Tuple[int, ...]
    ids: np.ndarray
    docs: np.ndarray

    def source(self, name: str) -> SourceFacts:
        """The source ``name``. Raises DataError naming the store's sources."""
        for s in self.sources:
            if s.name == name:
                return s
        raise DataError(f"{self.path}: no source {name!r}; it holds {', '.join(s.name for s in self.sources)}")

    def role(self, role: str) -> List[SourceFacts]:
        """The sources of ``role`` (``train`` or ``valid``), in the manifest's order."""
        return [s for s in self.sources if s.role == role]


def write_store(folder: Path, manifest: dict, words: Optional[List[Tuple[str, int]]]) -> None:
    """The manifest and (kind ``words``) ``vocab.txt`` into ``folder``, where
    ``ids.bin`` and ``docs.bin`` were written (the staging folder of an atomic write)."""
    if words is not None:
        with open(folder / VOCAB, "w", encoding="utf-8") as f:
            f.writelines(f"{w} {c}\n" for w, c in words)
    with open(folder / MANIFEST, "w", encoding="utf-8") as f:
        json.dump({"format": FORMAT, "version": VERSION, **manifest}, f, indent=1)
        f.write("\n")


def is_store(path) -> bool:
    """Whether ``path`` is a folder holding a store's manifest."""
    return os.path.isfile(os.path.join(os.fspath(path), MANIFEST))


def read_manifest(path) -> dict:
    """The manifest of the store ``path``. Raises DataError: not a store, or one of
    another format or version."""
    file = os.path.join(os.fspath(path), MANIFEST)
    try:
        with open(file, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise DataError(f"{path}: not a token store (no {MANIFEST}); make one with nbest-rescore prepare-text") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"{file}: cannot be read ({exc}); prepare the store again with nbest-rescore prepare-text") \
            from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise DataError(f"{file}: not a {FORMAT} of version {VERSION}; prepare it again with this version's "
                        f"nbest-rescore prepare-text")
    return manifest


def open_store(path) -> TokenStore:
    """Map the store at ``path`` (nothing is read into memory but the manifest and the
    vocabulary). Raises DataError: not a store, or its files do not match the manifest."""
    manifest = read_manifest(path)
    folder = Path(path)
    words, counts = _read_vocab(folder / VOCAB) if manifest["kind"] == "words" else ((), ())
    dtype = np.dtype(manifest["dtype"])
    try:
        ids = np.memmap(folder / IDS, dtype=dtype, mode="r") if manifest["tokens"] else np.zeros(0, dtype)
        docs = np.memmap(folder / DOCS, dtype=np.int64, mode="r")
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot map the store's ids ({exc}); prepare it again") from None
    if len(ids) != manifest["tokens"] or len(docs) != manifest["documents"] + 1:
        raise DataError(f"{path}: {IDS} holds {len(ids)} ids and {DOCS} {len(docs) - 1} documents, but the "
                        f"manifest says {manifest['tokens']} and {manifest['documents']}: the store is damaged; "
                        f"prepare it again")
    return TokenStore(str(path), manifest["kind"], manifest["encoding"], manifest["budgets"],
                      tuple(SourceFacts.from_dict(s) for s in manifest["sources"]), words, counts, ids, docs)


def _read_vocab(path: Path) -> Tuple[Tuple[str, ...], Tuple[int, ...]]:
    try:
        with open(path, encoding="utf-8") as f:
            rows = [line.rstrip("\n").rsplit(" ", 1) for line in f]  # (a word may hold non-ASCII spaces)
    except OSError as exc:
        raise DataError(f"{path}: cannot be read ({exc.strerror or exc}); prepare the store again") from None
    if any(len(r) != 2 for r in rows):
        raise DataError(f"{path}: expected 'word count' on every line; prepare the store again")
    return tuple(r[0] for r in rows), tuple(int(r[1]) for r in rows)


class IdRanges:
    """Ranges of an id array read as they are needed: where the array is a store's
    memory map (or that map reversed, as a backward model reads it), by ``os.pread`` from
    its file, so that nothing of the file is mapped into the process (a mapped page
    counts in the resident memory until it is unmapped, and the page cache may map a
    whole large folio, up to 2 MB, for one page read); else by slicing."""

    def __init__(self, ids: np.ndarray):
        self.ids, self.n = ids, len(ids)
        self.file, self.reverse, self._fd = None, False, None
        name = getattr(ids, "filename", None)
        if isinstance(ids, np.memmap) and name and ids.itemsize:
            step = ids.strides[0] // ids.itemsize if ids.strides else 0
            whole = (os.path.getsize(name) - ids.offset) // ids.itemsize == self.n
            if step in (1, -1) and whole:
                self.file, self.reverse = (name, int(ids.offset)), step == -1

    def read(self, lo: int, hi: int) -> np.ndarray:
        """``ids[lo:hi]`` (a new array)."""
        if self.file is None:
            return np.array(self.ids[lo:hi])
        a, b = (self.n - hi, self.n - lo) if self.reverse else (lo, hi)
        if self._fd is None:
            self._fd = os.open(self.file[0], os.O_RDONLY)
        size = self.ids.itemsize
        out = np.frombuffer(os.pread(self._fd, (b - a) * size, self.file[1] + a * size), dtype=self.ids.dtype)
        return out[::-1] if self.reverse else out

    def __del__(self):
        if self._fd is not None:
            os.close(self._fd)


def source_changes(facts: SourceFacts) -> Optional[str]:
    """None when the source file is as prepared: same size and modification time, or
    else the same checksum; otherwise what differs (one phrase). A file that no longer
    exists is not a change (the store holds its text)."""
    try:
        st = os.stat(facts.path)
    except OSError:
        return None
    if facts.checksum_bytes == facts.size and st.st_size != facts.size:
        return f"{facts.path} is {st.st_size} bytes, was {facts.size} when the store was prepared"
    if st.st_size == facts.size and st.st_mtime_ns == facts.mtime_ns:
        return None
    from .text_chunks import text_checksum

    now = text_checksum(facts.path, facts.checksum_bytes)
    if now != facts.checksum:
        return (f"{facts.path} changed since the store was prepared (its first {facts.checksum_bytes} bytes have "
                f"checksum {now}, were {facts.checksum})")
    return None
