"""``prepare-text``: LM text into a token store (:mod:`nbest_rescore.io.token_store`),
once, with memory independent of the text's size (docs/training.md "Prepared text").

Two streaming passes over each source, in chunks (:mod:`nbest_rescore.io.text_chunks`)
spread over worker processes: the first counts the words (the vocabulary's counts),
finds where ``max_words`` ends the text and computes each file's checksum; the second
encodes the chunks and appends their ids to the store. At most two chunks per worker
are in flight, so memory stays flat; the store appears as a whole or not at all
(:func:`~nbest_rescore.io.atomic.atomic_dir`), and a store whose manifest already
matches the inputs and settings is reused as it is.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import glob
import hashlib
import logging
import multiprocessing
import os
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, List, Optional, Tuple

import numpy as np

from ..errors import DataError
from ..io import text_chunks
from ..io.atomic import atomic_dir
from ..io.output_checks import check_output_dir
from ..io.token_store import (DEV, DOCS, FILES, IDS, SourceFacts, TokenStore, id_dtype, is_store, open_store,
                              read_manifest, source_changes, write_store)
from ..progress import Progress
from ..vocab import SPECIALS, Vocabulary

log = logging.getLogger(__name__)

#: worker processes by default at most (each holds a chunk's words, ~150 MB at peak;
#: past about this many the one process that reads, hashes and writes is the bound)
MAX_DEFAULT_JOBS = 8
#: a file of these names in a data directory is a source (Kaldi rnnlm: ``*.txt``)
SOURCE_SUFFIXES = (".txt", ".txt.gz")


@dataclass(frozen=True)
class TextSource:
    """One text: ``name`` (the weights file's key), ``path``, ``role`` train or valid."""

    name: str
    path: str
    role: str


def text_sources(train: str, valid: Optional[str] = None) -> Tuple[TextSource, ...]:
    """The sources of ``data.train``: a text file (one source named by its stem), or a
    Kaldi rnnlm-style data directory: every ``NAME.txt`` (or ``.txt.gz``) a training
    source ``NAME``, ``dev.txt`` the validation text unless ``valid`` is given.

    Raises:
        DataError: a missing path, a directory without ``*.txt``, two files of one name.
    """
    if os.path.isdir(train):
        files = sorted(f for s in SOURCE_SUFFIXES for f in glob.glob(os.path.join(glob.escape(train), "*" + s)))
        named = [(_stem(f), f) for f in files]
        dupes = sorted({n for n, _ in named if sum(m == n for m, _ in named) > 1})
        if dupes:
            raise DataError(f"{train}: two files for source(s) {', '.join(dupes)} (NAME.txt and NAME.txt.gz); "
                            f"keep one")
        out = [TextSource(n, f, "train") for n, f in named if n != DEV]
        if not out:
            raise DataError(f"{train}: a data directory needs one or more NAME.txt files (one per text source, "
                            f"dev.txt for validation, as Kaldi's rnnlm data directories)")
        dev = dict(named).get(DEV)
        if valid is None and dev is not None:
            valid = dev
    elif os.path.exists(train):
        out = [TextSource(_stem(train), str(train), "train")]
    else:
        raise DataError(f"data.train {train}: file not found")
    if valid is not None:
        if not os.path.isfile(valid):
            raise DataError(f"data.valid {valid}: file not found")
        out.append(TextSource(DEV, str(valid), "valid"))
    return tuple(out)


def _stem(path) -> str:
    name = os.path.basename(os.fspath(path))
    for s in SOURCE_SUFFIXES:
        if name.endswith(s):
            return name[:-len(s)]
    return name.split(".")[0] or name


def file_digest(path) -> Optional[str]:
    """``blake2b:HEX`` of a small file (a word list), None for no path."""
    if not path:
        return None
    return text_chunks.text_checksum(path)


@dataclass(frozen=True)
class WordEncoding:
    """Word ids by the ``vocab`` section's policy (the ``max_size`` most frequent words
    of the training sources with count >= ``min_count``, within ``restrict_to``; or the
    words of ``file``), or exactly ``words`` (a checkpoint's vocabulary, id order kept)."""

    max_size: Optional[int] = 20000
    min_count: int = 1
    restrict_to: Optional[str] = None
    file: Optional[str] = None
    words: Optional[Tuple[str, ...]] = None
    kind = "words"

    def settings(self) -> dict:
        """What the manifest records and a reuse or ``train`` compares (word lists by
        content, not by path)."""
        if self.words is not None:
            return {"words": hashlib.blake2b("\n".join(self.words).encode()).hexdigest()[:32]}
        if self.file:
            return {"file": file_digest(self.file)}
        return {"max_size": self.max_size, "min_count": self.min_count, "restrict_to": file_digest(self.restrict_to)}

    def vocabulary(self, counts: Counter) -> Vocabulary:
        """The vocabulary of this policy for the training ``counts`` (ids by decreasing
        count after ``</s>``, ``<unk>``; ``words`` as given)."""
        if self.words is not None:
            return Vocabulary(self.words)
        if self.file:
            return Vocabulary.from_file(self.file).by_frequency(counts)
        restrict = Vocabulary.from_file(self.restrict_to).words if self.restrict_to else None
        return Vocabulary.from_counts(counts, self.max_size, self.min_count, restrict)


@dataclass(frozen=True)
class HfEncoding:
    """Token ids of a Hugging Face tokenizer folder (``model: hf``; the convention of
    :class:`~nbest_rescore.models.hf.HfText`)."""

    tokenizer: str
    kind = "hf"

    def settings(self) -> dict:
        files = sorted(p for p in Path(self.tokenizer).iterdir() if p.is_file())
        h = hashlib.blake2b()
        for p in files:
            h.update(p.name.encode() + b"\0" + p.read_bytes())
        return {"tokenizer": h.hexdigest()[:32]}


@dataclass(frozen=True)
class Budgets:
    """Word budgets: each training source's first ``max_words`` words (whole lines), the
    validation text's first ``max_valid_words`` (``data.max_words``, ``data.max_valid_words``)."""

    max_words: Optional[int] = None
    max_valid_words: Optional[int] = None

    def of(self, role: str) -> Optional[int]:
        return self.max_words if role == "train" else self.max_valid_words


@dataclass(frozen=True)
class PrepareOptions:
    """How to run: ``jobs`` worker processes (None: the usable cores, at most
    :data:`MAX_DEFAULT_JOBS`), a progress bar."""

    jobs: Optional[int] = None
    progress: bool = True


@dataclass
class _Scan:
    """What the first pass found of one source."""

    source: TextSource
    counts: Counter = field(default_factory=Counter)
    words: int = 0
    limit: Optional[int] = None  # bytes of text read (None: all)
    checksum: str = ""
    read: int = 0


def store_settings(encoding, budgets: Budgets, sources: Iterable[TextSource]) -> dict:
    """The manifest's settings a reuse must match."""
    return {"kind": encoding.kind, "encoding": encoding.settings(),
            "budgets": {"max_words": budgets.max_words, "max_valid_words": budgets.max_valid_words},
            "inputs": [[s.name, os.path.abspath(s.path), s.role] for s in sources]}


def prepare_text(sources: Tuple[TextSource, ...], encoding, out, budgets: Budgets = Budgets(),
                 options: PrepareOptions = PrepareOptions()) -> Tuple[TokenStore, bool]:
    """Prepare ``sources`` into the store ``out`` (or reuse the one there when its
    settings and inputs match). Returns (the open store, whether it was reused).

    Raises:
        DataError: ``out`` not writable, a source missing, empty or not UTF-8 (``file:line``),
            a vocabulary file unusable, writing failed (no space: nothing is left at ``out``).
    """
    settings = store_settings(encoding, budgets, sources)
    if _up_to_date(out, settings):
        log.info("token store %s is up to date: reused", out)
        return open_store(out), True
    check_output_dir(out, FILES, option="--out")
    jobs = options.jobs or min(MAX_DEFAULT_JOBS, len(os.sched_getaffinity(0)))
    sizes = [min(os.path.getsize(s.path), BUDGET_BYTES_PER_WORD * budgets.of(s.role))
             if budgets.of(s.role) else os.path.getsize(s.path) for s in sources]
    with _pooled(jobs, sizes) as pool:
        scans = [_scan(s, budgets.of(s.role), encoding.kind == "words" and s.role == "train", pool, options.progress)
                 for s in sources]
        counts = sum((s.counts for s in scans if s.source.role == "train"), Counter())
        vocab = encoding.vocabulary(counts) if encoding.kind == "words" else None
        size = len(vocab) if vocab is not None else len(_hf_text(encoding.tokenizer).tokenizer)
        dtype = id_dtype(size)
        with atomic_dir(out, FILES, settings={"command": "prepare-text"}, option="--out") as tmp:
            facts, tokens = _encode_all(scans, encoding, vocab, dtype, tmp, jobs, options.progress)
            manifest = {**settings, "dtype": dtype.name, "tokens": tokens, "documents": facts[-1].documents[1],
                        "sources": [{**dataclasses.asdict(f), "documents": list(f.documents)} for f in facts]}
            write_store(tmp, manifest, _vocab_rows(vocab, counts, facts) if vocab is not None else None)
    return open_store(out), False


def _up_to_date(out, settings: dict) -> bool:
    """A store at ``out`` with these settings whose every source is unchanged."""
    if not is_store(out):
        return False
    try:
        manifest = read_manifest(out)
    except DataError:
        return False
    if any(manifest.get(k) != v for k, v in settings.items()):
        return False
    facts = [SourceFacts.from_dict(s) for s in manifest["sources"]]
    return all(os.path.exists(f.path) and source_changes(f) is None for f in facts)


#: bytes a word takes at most in the estimate of how much of a text a word budget reads
BUDGET_BYTES_PER_WORD = 16


@contextlib.contextmanager
def _pooled(jobs: int, sizes: List[int], init: Optional[Callable] = None,
            args: tuple = ()) -> Iterator[Optional[multiprocessing.pool.Pool]]:
    """A pool of ``jobs`` processes (:func:`_pool`), ended on exit; or None (``init`` run
    in this process) for one job or when no text needs more than one chunk read
    (``sizes``: the bytes read of each)."""
    if jobs <= 1 or max(sizes, default=0) <= text_chunks.CHUNK_BYTES:
        if init is not None:
            init(*args)
        yield None
        return
    pool = _pool(jobs, init, args)
    try:
        yield pool
    finally:
        pool.terminate()
        pool.join()


def _pool(jobs: int, init: Optional[Callable] = None, args: tuple = ()):
    """``jobs`` worker processes forked from a server process that has loaded
    :mod:`~nbest_rescore.io.text_chunks` (no torch); each imports the caller's main
    module as multiprocessing's workers do (``nbest-rescore``'s is light; a script's
    should keep its work under ``if __name__ == "__main__"``)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([text_chunks.__name__])
    return ctx.Pool(jobs, init, args)


def _ordered(pool, fn: Callable, chunks: Iterable) -> Iterator[tuple]:
    """(chunk, ``fn(chunk)``) in order, at most two chunks per worker in flight (``pool``
    None: computed here)."""
    if pool is None:
        for c in chunks:
            yield c, fn(c)
        return
    pending: deque = deque()
    for c in chunks:
        pending.append((c, pool.apply_async(fn, (c,))))
        if len(pending) >= 2 * pool._processes:
            c0, r = pending.popleft()
            yield c0, r.get()
    while pending:
        c0, r = pending.popleft()
        yield c0, r.get()


def _scan(source: TextSource, max_words: Optional[int], counts: bool, pool, progress: bool) -> _Scan:
    """The first pass over one source: counts, the byte where ``max_words`` ends it,
    the checksum of what was read."""
    scan = _Scan(source)
    size = os.path.getsize(source.path)
    h = hashlib.blake2b()
    bar = Progress("MB", not progress, desc=f"count {source.name}", leave=False)
    fn = functools.partial(_count_or_error, counts=counts)
    with contextlib.closing(bar):
        for chunk, found in _ordered(pool, fn, text_chunks.read_chunks(source.path)):
            if isinstance(found, DataError) and max_words is None:
                raise found
            if isinstance(found, DataError) or (max_words is not None and scan.words + found.words >= max_words):
                error = found if isinstance(found, DataError) else None
                cut, found = text_chunks.prefix_cut(chunk, max_words - scan.words, counts)
                if error is not None and scan.words + found.words < max_words:
                    raise error  # (the bad line comes before the budget is reached)
                h.update(chunk.data[:cut])
                scan.limit = scan.read = chunk.offset + cut
                _add(scan, found)
                break
            h.update(chunk.data)
            scan.read += len(chunk.data)
            _add(scan, found)
            bar(int((chunk.offset + len(chunk.data)) >> 20), max(1, size >> 20))
    scan.checksum = "blake2b:" + h.hexdigest()
    if not scan.words:
        raise DataError(f"{source.path}: no sentences (the file is empty or holds only blank lines); "
                        f"expected one sentence per line")
    return scan


def _count_or_error(chunk: text_chunks.Chunk, counts: bool):
    """:func:`~nbest_rescore.io.text_chunks.count_chunk`, or the DataError it raised
    (a pool task: a bad line after ``max_words`` ends the text is no error)."""
    try:
        return text_chunks.count_chunk(chunk, counts)
    except DataError as exc:
        return exc


def _add(scan: _Scan, found: text_chunks.ChunkCounts) -> None:
    if found.counts is not None:
        scan.counts.update(found.counts)
    scan.words += found.words


def init_hf_worker(tokenizer: str, dtype: str) -> None:
    """Pool initializer: the encoder of the tokenizer folder ``tokenizer``
    (:func:`~nbest_rescore.io.text_chunks.hf_encoder`; imports transformers)."""
    text_chunks.init_encoder(text_chunks.hf_encoder(_hf_text(tokenizer), np.dtype(dtype)))


def _hf_text(tokenizer: str):
    """The :class:`~nbest_rescore.models.hf.HfText` of the tokenizer folder ``tokenizer``,
    which must start a document with one token."""
    from ..models.hf import HfText, import_transformers, load_tokenizer

    text = HfText(load_tokenizer(import_transformers(), "hf.tokenizer", tokenizer))
    if len(text.start_ids) != 1:
        raise DataError(f"the tokenizer starts a document with {len(text.start_ids)} tokens {text.start_ids}; "
                        f"training needs one (a tokenizer with a bos_token or eos_token)")
    return text


def _encode_all(scans: List[_Scan], encoding, vocab: Optional[Vocabulary], dtype, folder: Path, jobs: int,
                progress: bool) -> Tuple[List[SourceFacts], int]:
    """The second pass: every source's ids into ``folder`` (``ids.bin``, ``docs.bin``);
    returns the sources' facts and the ids written."""
    if encoding.kind == "words":
        init, args = text_chunks.init_word_worker, (vocab.words, dtype.name)
    else:
        init, args = init_hf_worker, (encoding.tokenizer, dtype.name)
    start = 0 if encoding.kind == "words" else _hf_text(encoding.tokenizer).start_ids[0]
    sizes = [s.limit if s.limit is not None else os.path.getsize(s.source.path) for s in scans]
    facts, pos, docs = [], 0, 0
    with (_pooled(jobs, sizes, init, args) as pool,
          open(folder / IDS, "wb") as ids_f, open(folder / DOCS, "wb") as docs_f):
        for scan in scans:
            n_pos, n_docs, sentences = _encode_source(scan, start, dtype, pool, ids_f, docs_f, pos, progress)
            if n_docs == docs:
                raise DataError(f"{scan.source.path}: no sentences (the file is empty or holds only blank "
                                f"lines); expected one sentence per line")
            st = os.stat(scan.source.path)
            facts.append(SourceFacts(scan.source.name, os.path.abspath(scan.source.path), scan.source.role,
                                     st.st_size, st.st_mtime_ns, scan.checksum, scan.read,
                                     (docs, n_docs), n_pos - pos, scan.words, sentences))
            pos, docs = n_pos, n_docs
        np.asarray([pos], dtype=np.int64).tofile(docs_f)
    return facts, pos


def _encode_source(scan: _Scan, start: int, dtype, pool, ids_f, docs_f, pos: int,
                   progress: bool) -> Tuple[int, int, int]:
    """Append one source's documents; returns (ids, documents) written so far and the
    source's sentences."""
    docs, sentences = docs_f.tell() // 8, 0
    in_doc = False  # the text read so far ends inside a document
    size = scan.limit if scan.limit is not None else os.path.getsize(scan.source.path)
    bar = Progress("MB", not progress, desc=f"encode {scan.source.name}", leave=False)
    with contextlib.closing(bar):
        chunks = text_chunks.read_chunks(scan.source.path, scan.limit)
        for chunk, enc in _ordered(pool, text_chunks.encode_task, chunks):
            breaks = enc.breaks[enc.breaks < len(enc.ids)]
            if enc.sentences and not in_doc and (not len(breaks) or breaks[0] != 0):
                breaks = np.concatenate([[0], breaks])
            ids = np.insert(enc.ids.astype(dtype, copy=False), breaks, start)
            (pos + breaks + np.arange(len(breaks))).astype(np.int64).tofile(docs_f)
            ids.tofile(ids_f)
            pos += len(ids)
            docs += len(breaks)
            sentences += enc.sentences
            if enc.sentences:
                in_doc = not (len(enc.breaks) and enc.breaks[-1] == len(enc.ids))
            elif enc.blank:
                in_doc = False
            bar(int((chunk.offset + len(chunk.data)) >> 20), max(1, size >> 20))
    return pos, docs, sentences


def _vocab_rows(vocab: Vocabulary, counts: Counter, facts: List[SourceFacts]) -> List[Tuple[str, int]]:
    """``vocab.txt``'s rows: each word and its training count (``</s>``: the training
    sentences; ``<unk>``: the training words outside the vocabulary)."""
    train = [f for f in facts if f.role == "train"]
    known = sum(counts.get(w, 0) for w in vocab.words[len(SPECIALS):])
    special = {SPECIALS[0]: sum(f.sentences for f in train), SPECIALS[1]: sum(f.words for f in train) - known}
    return [(w, special[w] if w in special else counts.get(w, 0)) for w in vocab.words]


__all__ = ["Budgets", "HfEncoding", "PrepareOptions", "TextSource", "WordEncoding", "prepare_text", "text_sources"]
