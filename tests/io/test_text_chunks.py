"""LM text in line-aligned byte chunks (io/text_chunks.py): the chunks give back the
file's bytes; their words, counts and budget cuts are read_lm_text's at any chunk size
(BOM, CRLF, blank and white-space-only lines, U+00A0 inside non-ASCII words); a line
that is not UTF-8 gives read_lm_text's ``file:line`` message; ``text_checksum`` is
``b2sum``'s."""
import gzip
import shutil
import subprocess

import pytest

from nbest_rescore.errors import DataError
from nbest_rescore.io.lm_text import read_lm_text
from nbest_rescore.io.text_chunks import chunk_words, count_chunk, prefix_cut, read_chunks, text_checksum

# Every awkward case of the format, in one text (documents cross chunk boundaries at
# any small chunk size).
SAMPLE = (
    b"\xef\xbb\xbf\n"                        # a byte-order mark, then a blank first line
    b"\n  \t \n"                              # more blank, and white space only
    b"the cat sat\n"
    b"\xef\xbb\xbfmid bom\n"                   # a byte-order mark elsewhere: part of a word
    b"on the  mat\r\n"                        # CRLF
    b"a-word-much-longer-than-a-chunk-of-thirteen-bytes indeed\n"
    b"\n\n\n"
    b"caf\xc3\xa9\xc2\xa0au lait\n"           # U+00A0 inside a word of a non-ASCII line
    b"\xc2\xa0\n"                             # a lone U+00A0: a word, not a blank line
    b"\r\n"                                   # a CRLF blank line
    b"x\n"
    b" \r\n"
    b"\xe2\x80\x83em space \xe2\x80\xa8sep\n"  # U+2003, U+2028: not ASCII white space
    b"na\xc3\xafve \t words\x0bhere\x0cend\n"
    b"file\x1csep ascii\n"                    # \x1c in an ASCII line (str.split splits it)
    b"\xc3\xa0 file\x1csep\xc2\x85nel\n"      # ... and in a non-ASCII one (it does not)
    b"\n"
    + b"".join(b"doc %d line %d %s\n" % (i, j, b"w" * (i * j % 9)) + (b"\n" if j == i % 4 else b"")
               for i in range(6) for j in range(5))
)
ENDINGS = {"blank-lines": b"end\n\n \n\n", "no-newline": b"last line without newline",
           "newline": b"last\n"}
SIZES = [1, 2, 3, 7, 13, 64, 4096]


@pytest.fixture(params=sorted(ENDINGS))
def sample(request, tmp_path):
    path = tmp_path / "lm.txt"
    path.write_bytes(SAMPLE + ENDINGS[request.param])
    return path


def lines_of(docs):
    """read_lm_text's documents as the sentences, with None between documents."""
    out = []
    for d in docs:
        out += [list(s) for s in d] + [None]
    return out


def chunked_sentences(path, size, limit=None):
    """The sentences of the chunks, None for each run of blank lines between sentences."""
    out = []
    for chunk in read_chunks(path, limit, size=size):
        for words in chunk_words(chunk):
            if words:
                out.append(words)
            elif out and out[-1] is not None:
                out.append(None)
    return out + ([None] if out and out[-1] is not None else [])


@pytest.mark.parametrize("size", SIZES)
def test_chunks_are_the_files_lines(sample, size):
    data = sample.read_bytes()
    chunks = list(read_chunks(sample, size=size))
    assert b"".join(c.data for c in chunks) == data
    for c in chunks[:-1]:
        assert c.data.endswith(b"\n")
    for c in chunks:
        assert data[c.offset:c.offset + len(c.data)] == c.data and data[:c.offset].count(b"\n") + 1 == c.line
    assert chunked_sentences(sample, size) == lines_of(read_lm_text(sample))


@pytest.mark.parametrize("size", [1, 7, 13, 64])
def test_limit_reads_a_prefix(sample, size):
    data = sample.read_bytes()
    for limit in (1, 5, 17, 100, len(data) - 1, len(data), len(data) + 50):
        got = b"".join(c.data for c in read_chunks(sample, limit, size=size))
        assert got == data[:limit]


def test_non_ascii_words_keep_no_break_space(sample):
    words = [w for c in read_chunks(sample, size=4096) for line in chunk_words(c) for w in line]
    assert "caf\u00e9\u00a0au" in words and "\u00a0" in words and "\u2003em" in words
    assert "file\x1csep" not in words and "file\x1csep\x85nel" in words  # ASCII vs non-ASCII line
    assert words[0] == "the" and "\ufeffmid" in words


@pytest.mark.parametrize("size", [1, 13, 4096])
def test_counts_and_prefix_cut_match_read_lm_text(sample, size):
    docs = read_lm_text(sample)
    total = sum(len(s) for d in docs for s in d)
    found = [count_chunk(c) for c in read_chunks(sample, size=size)]
    assert sum(f.words for f in found) == total
    assert sum((f.counts for f in found), start=type(found[0].counts)()) == \
        type(found[0].counts)(w for d in docs for s in d for w in s)
    # a budget cut inside a chunk keeps the lines read_lm_text keeps with max_words
    for quota in (1, 2, 4, 9, 17, 30, total):
        words, cut = 0, None
        for c in read_chunks(sample, size=size):
            f = count_chunk(c, counts=False)
            if words + f.words >= quota:
                pos, part = prefix_cut(c, quota - words)
                cut = c.offset + pos
                words += part.words
                break
            words += f.words
        want = read_lm_text(sample, quota)
        assert words == sum(len(s) for d in want for s in d)
        assert chunked_sentences(sample, 4096, cut) == lines_of(want)


BAD = {
    "first-line": b"ab\xff cd\nok\n",
    "after-bom": b"\xef\xbb\xbfab \xfe\nok\n",
    "truncated-before-crlf": b"ok line\n\nabc\xc3\r\nmore\n",
    "late": b"".join(b"line %d here\n" % i for i in range(40)) + b"\n\nx y \xe9t\xe9\nz\n",
}


@pytest.mark.parametrize("name", sorted(BAD))
@pytest.mark.parametrize("size", [1, 13, 4096])
def test_not_utf8_names_file_and_line(tmp_path, name, size):
    path = tmp_path / "bad.txt"
    path.write_bytes(BAD[name])
    with pytest.raises(DataError) as want:
        read_lm_text(path)
    with pytest.raises(DataError) as got:
        for c in read_chunks(path, size=size):
            chunk_words(c)
    assert str(got.value) == str(want.value)
    with pytest.raises(DataError) as got:
        for c in read_chunks(path, size=size):
            prefix_cut(c, 10 ** 6)
    assert str(got.value) == str(want.value)


def b2sum(data: bytes) -> str:
    out = subprocess.run(["b2sum"], input=data, capture_output=True, check=True).stdout
    return "blake2b:" + out.split()[0].decode()


@pytest.mark.skipif(shutil.which("b2sum") is None, reason="b2sum not installed")
def test_checksum_is_b2sum(sample, tmp_path, DATA):
    valid = DATA / "lm" / "lm_valid.txt"
    out = subprocess.run(["b2sum", str(valid)], capture_output=True, check=True).stdout
    assert text_checksum(valid) == "blake2b:" + out.split()[0].decode()
    data = sample.read_bytes()
    assert text_checksum(sample) == b2sum(data)
    for limit in (1, 40, len(data) - 3):
        assert text_checksum(sample, limit) == b2sum(data[:limit])
    gz = tmp_path / "lm.txt.gz"
    gz.write_bytes(gzip.compress(data))
    assert text_checksum(gz) == b2sum(data)
    assert b"".join(c.data for c in read_chunks(gz, size=7)) == data
