"""prepare-text's token store (training/text_store.py, io/token_store.py) and what train
reads from it (training/data.py, corpus.Documents / StoreStreams): the store's documents
are the old reader's (read_lm_text + encode_document) at any chunk size and budget, and
through the worker processes; errors name ``file:line`` as read_lm_text does; a store
is reused while its inputs are unchanged, refused when a source or the vocabulary
policy changed, and appears whole or not at all; data_weights.txt repeats and weights
sources; StoreStreams equals the materialized streams of the same layout."""
import errno
import functools
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import numpy as np
import pytest
import torch

from nbest_rescore.config import DataConfig, TrainConfig, VocabConfig
from nbest_rescore.corpus import Documents, deal, encode_document, model_documents
from nbest_rescore.store_streams import StoreStreams
from stream_columns import materialize  # noqa: E402  (tests/ is on sys.path, see conftest.py)
from nbest_rescore.errors import DataError
from nbest_rescore.io import text_chunks
from nbest_rescore.io.lm_text import read_lm_text
from nbest_rescore.io.token_store import open_store
from nbest_rescore.training import text_store
from nbest_rescore.training.data import check_store, default_store, load_train_data, read_weights
from nbest_rescore.training.distributed import SINGLE
from nbest_rescore.training.text_store import Budgets, PrepareOptions, WordEncoding, prepare_text, text_sources
from nbest_rescore.vocab import Vocabulary

ONE_JOB = PrepareOptions(jobs=1, progress=False)
ALL_WORDS = WordEncoding(max_size=None)


def prep(sources, out, encoding=ALL_WORDS, budgets=Budgets(), options=ONE_JOB):
    return prepare_text(sources, encoding, str(out), budgets, options)


def store_docs(store, name):
    """The documents of source ``name``: arrays of ids."""
    d0, d1 = store.source(name).documents
    return [np.asarray(store.ids[store.docs[d]:store.docs[d + 1]]) for d in range(d0, d1)]


def as_words(store, doc):
    """A store document back as sentences of words (it must start and end with </s>)."""
    assert doc[0] == 0 and doc[-1] == 0, doc
    sents, cur = [], []
    for i in doc[1:].tolist():
        if i == 0:
            sents.append(tuple(cur))
            cur = []
        else:
            cur.append(store.words[i])
    return sents


def words_of(docs):
    return Counter(w for d in docs for s in d for w in s)


# -- 1. the store's documents are the old reader's -----------------------------------------

@pytest.fixture(scope="module")
def lm_store(DATA, tmp_path_factory):
    lm = DATA / "lm"
    store, reused = prepare_text(text_sources(str(lm / "lm_train.txt"), str(lm / "lm_valid.txt")),
                                 WordEncoding(max_size=3000, restrict_to=str(lm / "vocab.txt")),
                                 str(tmp_path_factory.mktemp("lm_store") / "store"),
                                 Budgets(max_words=60000, max_valid_words=20000), ONE_JOB)
    assert not reused
    train, valid = read_lm_text(lm / "lm_train.txt", 60000), read_lm_text(lm / "lm_valid.txt", 20000)
    counts = words_of(train)
    vocab = Vocabulary.from_counts(counts, 3000, 1, Vocabulary.from_file(lm / "vocab.txt").words)
    return store, {"lm_train": train, "dev": valid}, counts, vocab


def test_store_equals_read_lm_text(lm_store):
    store, docs, counts, vocab = lm_store
    assert store.words == tuple(vocab.words) and store.ids.dtype == np.uint16
    for name, want in docs.items():
        got = store_docs(store, name)
        enc = [encode_document(d, vocab) for d in want]
        assert len(got) == len(enc)
        for g, e in zip(got, enc):
            np.testing.assert_array_equal(g, e)
        facts = store.source(name)
        assert (facts.words, facts.sentences, facts.tokens) == \
            (sum(map(len, (s for d in want for s in d))), sum(map(len, want)), sum(map(len, enc)))
    assert [s.role for s in store.sources] == ["train", "valid"]
    train = docs["lm_train"]
    special = {"</s>": sum(map(len, train)), "<unk>": sum(counts.values()) - sum(counts[w] for w in vocab.words[2:])}
    assert store.counts == tuple(special.get(w, counts[w]) for w in store.words)


def test_backward_documents(lm_store):
    store, docs, _, vocab = lm_store
    d0, d1 = store.source("lm_train").documents
    back = Documents(store.ids, np.asarray(store.docs[d0:d1]), np.asarray(store.docs[d0 + 1:d1 + 1])).reversed()
    want = [encode_document(d, vocab) for d in model_documents(docs["lm_train"], "backward")]
    assert len(back) == len(want)
    for i, e in enumerate(want):
        np.testing.assert_array_equal(back.ids[back.starts[i]:back.ends[i]], e)


# -- 2./3. chunk stitching, budgets and errors, in-process at tiny chunk sizes --------------

SAMPLE = (b"\xef\xbb\xbf\n\n \t\nthe cat sat\n\xef\xbb\xbfmid bom\non the  mat\r\n"
          b"long-word-longer-than-thirteen-bytes x\n\n\n\n"
          b"caf\xc3\xa9 au lait\n\r\nx\n \r\nna\xc3\xafve sp\x0bace\x0cff\nfile\x1csep ascii\n\n"
          + b"".join(b"doc %d line %d %s\n" % (i, j, b"w" * (i * j % 7)) + (b"\n" if j == i % 3 else b"")
                     for i in range(5) for j in range(4)))
# Words holding white space that split_fields does not split a non-ASCII line on.
ODD_WORDS = (b"caf\xc3\xa9\xc2\xa0au lait\n\xc2\xa0\n\n\xe2\x80\x83em x\na\xe2\x80\xa8b\n\n"
             b"\xc3\xa0 file\x1csep\xc2\x85nel\n")


@pytest.fixture
def chunk_size(monkeypatch):
    """``chunk_size(n)``: prepare-text reads chunks of ``n`` bytes (in this process)."""
    real = text_chunks.read_chunks

    def set_size(n):
        monkeypatch.setattr(text_store.text_chunks, "read_chunks", functools.partial(real, size=n))

    return set_size


@pytest.mark.parametrize("ending", [b"end\n\n \n\n", b"last line without newline"])
@pytest.mark.parametrize("start", [0, SAMPLE.index(b"the")])  # blank lines first, or a sentence
def test_stitching_at_tiny_chunks(tmp_path, chunk_size, ending, start):
    path = tmp_path / "lm.txt"
    path.write_bytes(SAMPLE[start:] + ending)
    total = sum(len(s) for d in read_lm_text(path) for s in d)
    for size in (1, 7, 13, 29, 64, 4096):
        chunk_size(size)
        for budget in (None, 1, 3, 9, 23, total - 1):
            store, _ = prep(text_sources(str(path)), tmp_path / f"s{size}-{budget}", budgets=Budgets(budget))
            want = read_lm_text(path, budget)
            got = [as_words(store, d) for d in store_docs(store, "lm")]
            assert got == want, (size, budget)
            assert store.source("lm").words == sum(len(s) for d in want for s in d)


@pytest.mark.parametrize("size", [7, 4096])
def test_words_with_unicode_spaces(tmp_path, chunk_size, size):
    path = tmp_path / "lm.txt"
    path.write_bytes(SAMPLE + ODD_WORDS)
    chunk_size(size)
    store, _ = prep(text_sources(str(path)), tmp_path / "s")
    assert [as_words(store, d) for d in store_docs(store, "lm")] == read_lm_text(path)


BAD_LATE = b"".join(b"line %d of doc\n" % i + (b"\n" if i % 5 == 4 else b"") for i in range(30)) + b"bad \xe9t\xe9\nz\n"


def test_not_utf8_is_file_line_error(tmp_path, chunk_size):
    path = tmp_path / "bad.txt"
    path.write_bytes(BAD_LATE)
    with pytest.raises(DataError) as want:
        read_lm_text(path)
    for size in (13, 64, 1 << 20):  # the bad line in a later chunk, then in the only one
        chunk_size(size)
        with pytest.raises(DataError) as got:
            prep(text_sources(str(path)), tmp_path / f"out{size}")
        assert str(got.value) == str(want.value)
        assert not (tmp_path / f"out{size}").exists()
    chunk_size(64)  # a budget that ends before the bad line (in an earlier chunk): no error
    store, _ = prep(text_sources(str(path)), tmp_path / "cut", budgets=Budgets(max_words=20))
    assert [as_words(store, d) for d in store_docs(store, "bad")] == read_lm_text(path, 20)


def test_budget_before_bad_line_in_same_chunk(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(BAD_LATE)
    store, _ = prep(text_sources(str(path)), tmp_path / "cut", budgets=Budgets(max_words=20))
    assert [as_words(store, d) for d in store_docs(store, "bad")] == read_lm_text(path, 20)


# -- the real worker processes ---------------------------------------------------------------

@pytest.fixture(scope="module")
def big_text(DATA, tmp_path_factory):
    """Whole documents of lm_train, a little over one chunk (8 MiB)."""
    out, n = [], 0
    with open(DATA / "lm" / "lm_train.txt", "rb") as f:
        for line in f:
            out.append(line)
            n += len(line)
            if n > text_chunks.CHUNK_BYTES + (256 << 10) and not line.strip():
                break
    path = tmp_path_factory.mktemp("big") / "big.txt"
    path.write_bytes(b"".join(out))
    assert n > text_chunks.CHUNK_BYTES
    return path


def test_worker_processes(big_text, tmp_path, monkeypatch):
    pools = []
    real = text_store._pool
    monkeypatch.setattr(text_store, "_pool", lambda *a: pools.append(a) or real(*a))
    t0 = time.monotonic()
    store, _ = prep(text_sources(str(big_text)), tmp_path / "s", WordEncoding(max_size=3000),
                    options=PrepareOptions(jobs=2, progress=False))
    took = time.monotonic() - t0
    assert len(pools) == 2 and took < 30, took  # both passes in a pool; no slow worker start (torch)
    docs = read_lm_text(big_text)
    vocab = Vocabulary.from_counts(words_of(docs), 3000)
    got = store_docs(store, "big")
    assert store.words == tuple(vocab.words) and len(got) == len(docs)
    for g, d in zip(got, docs):
        np.testing.assert_array_equal(g, encode_document(d, vocab))


# -- 4./5. reuse and refusal -----------------------------------------------------------------

@pytest.fixture
def small_text(DATA, tmp_path):
    path = tmp_path / "small.txt"
    with open(DATA / "lm" / "lm_train.txt", "rb") as f:
        path.write_bytes(b"".join(f.readline() for _ in range(300)))
    return path


def test_checksum_of_source(small_text, tmp_path):
    store, _ = prep(text_sources(str(small_text)), tmp_path / "s")
    facts = store.source("small")
    if subprocess.run(["which", "b2sum"], capture_output=True).returncode:
        pytest.skip("b2sum not installed")
    out = subprocess.run(["b2sum", str(small_text)], capture_output=True, check=True).stdout
    assert facts.checksum == "blake2b:" + out.split()[0].decode() and facts.checksum_bytes == facts.size


def test_reuse(small_text, tmp_path):
    out = tmp_path / "s"
    enc = WordEncoding(max_size=100)
    _, reused = prep(text_sources(str(small_text)), out, enc)
    ids_time = os.stat(out / "ids.bin").st_mtime_ns
    assert not reused
    _, reused = prep(text_sources(str(small_text)), out, enc)
    assert reused and os.stat(out / "ids.bin").st_mtime_ns == ids_time
    st = os.stat(small_text)
    os.utime(small_text, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))  # touched: same text
    _, reused = prep(text_sources(str(small_text)), out, enc)
    assert reused and os.stat(out / "ids.bin").st_mtime_ns == ids_time
    small_text.write_bytes(b"new text here\n\nand more\n")
    store, reused = prep(text_sources(str(small_text)), out, enc)
    assert not reused and [as_words(store, d) for d in store_docs(store, "small")] == read_lm_text(small_text)
    _, reused = prep(text_sources(str(small_text)), out, WordEncoding(max_size=101))  # another policy
    assert not reused


def test_changed_source_or_policy_refused(small_text, tmp_path):
    out = tmp_path / "s"
    enc, budgets = WordEncoding(max_size=60), Budgets(max_words=2000)
    prep(text_sources(str(small_text)), out, enc, budgets)
    check_store(open_store(out), enc, budgets)  # as prepared: fine
    with pytest.raises(DataError) as exc:
        check_store(open_store(out), WordEncoding(max_size=50), budgets)
    assert "max_size" in str(exc.value) and "60" in str(exc.value) and "50" in str(exc.value)
    with pytest.raises(DataError, match="max_words"):
        check_store(open_store(out), enc, Budgets(max_words=1000))
    data = bytearray(small_text.read_bytes())
    i = data.index(b" ", 10) - 1
    data[i] = ord(b"Q") if data[i] != ord(b"Q") else ord(b"R")  # same size, another word early on
    small_text.write_bytes(bytes(data))
    with pytest.raises(DataError) as exc:
        check_store(open_store(out), enc, budgets)
    assert str(small_text) in str(exc.value) and "changed" in str(exc.value)
    cfg = TrainConfig(data=DataConfig(train=str(out), max_words=2000), vocab=VocabConfig(max_size=60))
    with pytest.raises(DataError) as exc2:
        load_train_data(cfg, enc, tmp_path / "m.pt", SINGLE, "forward", progress=False)
    assert str(small_text) in str(exc2.value) and "changed" in str(exc2.value)


# -- 6. atomicity ----------------------------------------------------------------------------

def test_no_space_leaves_nothing(small_text, tmp_path, monkeypatch):
    def full(scan, start, dtype, pool, ids_f, docs_f, pos, progress):
        ids_f.write(b"\0" * 1000)
        ids_f.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(text_store, "_encode_source", full)
    with pytest.raises(DataError) as exc:
        prep(text_sources(str(small_text)), tmp_path / "out")
    assert "\n" not in str(exc.value) and "space" in str(exc.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.txt"]


KILLED = """
import sys, time
from nbest_rescore.training import text_store as ts
real = ts._encode_source
def encode_then_hang(*a, **k):
    out = real(*a, **k)
    a[4].flush()
    print("encoded", flush=True)
    time.sleep(60)  # (killed here: ids.bin written, docs.bin and the manifest not)
ts._encode_source = encode_then_hang
ts.prepare_text(ts.text_sources(sys.argv[1]), ts.WordEncoding(3000), sys.argv[2], ts.Budgets(),
                ts.PrepareOptions(jobs=1, progress=False))
"""


def test_killed_prepare_leaves_no_store(DATA, tmp_path):
    text, out = DATA / "lm" / "lm_valid.txt", tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(text), str(out)], stdout=subprocess.PIPE, text=True)
    try:
        said = proc.stdout.readline()
    finally:
        proc.kill()  # SIGKILL
        proc.wait()
        proc.stdout.close()
    assert said == "encoded\n" and proc.returncode == -signal.SIGKILL
    leftover = list(tmp_path.glob(".out.partial-*"))
    assert not out.exists() and len(leftover) == 1 and (leftover[0] / "ids.bin").stat().st_size > 0
    store, reused = prep(text_sources(str(text)), out, WordEncoding(max_size=3000))
    assert not reused and len(store.docs) - 1 == len(read_lm_text(text))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# -- 7. data directories and data_weights.txt ------------------------------------------------

@pytest.fixture(scope="module")
def data_dir(DATA, tmp_path_factory):
    """a.txt, b.txt (documents of lm_train), dev.txt (of lm_valid) and the store
    load_train_data makes of them with weights ``a 2 1.0`` / ``b 1 0.5``."""
    root = tmp_path_factory.mktemp("datadir")
    folder = root / "data"
    folder.mkdir()
    train = read_lm_text(DATA / "lm" / "lm_train.txt", 4000)
    parts = {"a": train[:len(train) // 2], "b": train[len(train) // 2:],
             "dev": read_lm_text(DATA / "lm" / "lm_valid.txt", 1000)}
    for name, docs in parts.items():
        (folder / f"{name}.txt").write_text("\n\n".join("\n".join(" ".join(s) for s in d) for d in docs) + "\n")
    weights = root / "data_weights.txt"
    weights.write_text("a 2 1.0\nb 1 0.5\n")
    cfg = TrainConfig(data=DataConfig(train=str(folder), weights=str(weights)), vocab=VocabConfig(max_size=200))
    data = load_train_data(cfg, WordEncoding(max_size=200), root / "m.pt", SINGLE, "forward", progress=False)
    return root, parts, data


def test_weights_repeat_and_weight_sources(data_dir):
    root, parts, data = data_dir
    assert data.store.path == default_store(root / "m.pt") == str(root / "m.store")
    vocab = Vocabulary.from_counts(words_of(parts["a"] + parts["b"]), 200)
    a = [encode_document(d, vocab) for d in parts["a"]]
    b = [encode_document(d, vocab) for d in parts["b"]]
    want = a + a + b
    got = data.train
    assert len(got) == len(want)
    for i, e in enumerate(want):
        np.testing.assert_array_equal(got.ids[got.starts[i]:got.ends[i]], e)
    np.testing.assert_array_equal(got.weights, np.array([1.0] * 2 * len(a) + [0.5] * len(b), np.float32))
    dev = [encode_document(d, vocab) for d in parts["dev"]]
    assert [data.valid.ids[s:e].tolist() for s, e in zip(data.valid.starts, data.valid.ends)] == \
        [d.tolist() for d in dev]
    # every target token carries its document's weight in the streams, 0 on padding
    token_weights = np.concatenate([np.full(len(d) - 1, w, np.float32) for d, w in zip(want, got.weights)])
    for align in (1, 5):
        layout = deal(got, 3, align=align)
        full = StoreStreams(layout).segment(0, layout.length)
        assert len(full) == 5
        mask, weight = full[2], full[4]
        assert (weight[~mask] == 0).all()
        np.testing.assert_array_equal(weight[mask].numpy(), token_weights)
        part = StoreStreams(layout).rows(slice(1, 3)).segment(0, layout.length)
        assert torch.equal(part[4], weight[1:3]) and torch.equal(part[0], full[0][1:3])


@pytest.mark.parametrize("text, line", [
    ("a 2 1.0\nb 1\n", 2), ("a 2 1.0 x\nb 1 1\n", 1), ("\nc 1 1.0\na 1 1\nb 1 1\n", 2),
    ("a 0 1.0\nb 1 1\n", 1), ("b 1 1\n\na 1 -1\n", 3), ("a 1 1\nb 1 1\na 2 1\n", 3),
    ("a 1.5 1\nb 1 1\n", 1), ("a 1 nan\nb 1 1\n", 1), ("a 1 1\nb 1 0\n", 2)])
def test_bad_weights_line(data_dir, tmp_path, text, line):
    path = tmp_path / "w.txt"
    path.write_text(text)
    with pytest.raises(DataError, match=f"^{path}:{line}: "):
        read_weights(str(path), data_dir[2].store)


def test_weights_missing_source(data_dir, tmp_path):
    path = tmp_path / "w.txt"
    path.write_text("b 3 2.5\n")
    with pytest.raises(DataError) as exc:
        read_weights(str(path), data_dir[2].store)
    assert str(exc.value).startswith(f"{path}: ") and "source(s) a" in str(exc.value)
    path.write_text("\nb 3 2.5\n\na 1 1e-3\n")
    got = read_weights(str(path), data_dir[2].store)
    assert {k: (v.repeats, v.weight) for k, v in got.items()} == {"a": (1, 1e-3), "b": (3, 2.5)}


# -- 9. StoreStreams is materialize of the same layout ---------------------------------------

try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # (not a dependency of the package: only this test needs it)
    given = None


@pytest.mark.skipif(given is None, reason="hypothesis not installed")
def test_store_streams_equal_materialized():
    @settings(max_examples=20, deadline=None, database=None)
    @given(lens=st.lists(st.integers(1, 25), max_size=12), gaps=st.integers(0, 3), batch=st.integers(1, 9),
           align=st.integers(1, 9), seed=st.one_of(st.none(), st.integers(0, 5)),
           max_piece=st.one_of(st.none(), st.integers(1, 8)), rows=st.tuples(st.integers(0, 9), st.integers(0, 9)))
    def check(lens, gaps, batch, align, seed, max_piece, rows):
        same_streams(lens, gaps, batch, align, seed, max_piece, slice(min(rows), max(rows)))

    check()


def same_streams(lens, gaps, batch, align, seed, max_piece, rows):
    """StoreStreams of a random layout (documents of ``lens`` ids, ``gaps`` junk ids
    between them) against materialize: all segments, segment_tokens, a row slice."""
    rng = np.random.default_rng(len(lens) * 31 + batch)
    parts, starts, ends, pos = [], [], [], 0
    for n in lens:
        parts += [rng.integers(50, 60, gaps), np.concatenate([[0], rng.integers(0, 10, n - 1)])]
        starts.append(pos + gaps)
        ends.append(pos + gaps + n)
        pos += gaps + n
    ids = np.concatenate(parts).astype(np.uint16) if parts else np.zeros(0, np.uint16)
    layout = deal(Documents(ids, np.array(starts, np.int64), np.array(ends, np.int64)), batch, align, max_piece, seed)
    ref, lazy = materialize(layout), StoreStreams(layout)
    mask = ref[2]
    assert lazy.shape == tuple(mask.shape) and lazy.num_tokens == int(mask.sum()) == sum(n - 1 for n in lens)
    length = mask.shape[1]
    counts = mask.sum(0).numpy()
    for bptt in sorted({1, 3, align, length + 2}):
        want = np.add.reduceat(counts, np.arange(0, length, bptt)) if length else np.zeros(0, np.int64)
        assert lazy.segment_tokens(bptt).tolist() == want.tolist()
        segs = [lazy.segment(s, bptt) for s in range(0, length, bptt)]
        for k, t in enumerate(ref):
            got = torch.cat([s[k] for s in segs], 1) if segs else lazy.segment(0, bptt)[k]
            assert torch.equal(got, t), (k, bptt)
    part = lazy.rows(rows)
    assert part.shape == tuple(mask[rows].shape) and part.num_tokens == int(mask[rows].sum())
    for g, w in zip(part.segment(0, length + 1), ref):
        assert torch.equal(g, w[rows])
