"""Gzip-compressed JSON Lines (``*.jsonl.gz``, nbest_rescore.io.jsonl_nbest): read and
written compressed when the name ends in ``.gz``; the real ci lists make the same file
as ``.jsonl`` once decompressed (checked with the standard ``gzip`` module, not the code
under test), read back as the same lists, whole or span by span; errors keep the line
numbers of the decompressed text; a truncated, corrupt or not gzip file is one line
naming it; writing is atomic."""
import gzip
import json
import os
from dataclasses import replace

import pytest
from click.testing import CliRunner

from nbest_rescore.api import load_nbest
from nbest_rescore.api.inputs import open_nbest
from nbest_rescore.cli import main
from nbest_rescore.errors import DataError
from nbest_rescore.io.jsonl_nbest import is_jsonl, read_jsonl_nbest, write_jsonl_nbest
from nbest_rescore.types import NbestSet


def convert(nbest, to, out, code=0):
    res = CliRunner().invoke(main, ["convert", "--nbest", str(nbest), "--to", to, "--out", str(out)])
    assert res.exit_code == code, res.output
    return res.output


@pytest.fixture(scope="module")
def ci_gz(DATA, tmp_path_factory):
    """ci converted to ``ci.jsonl`` and ``ci.jsonl.gz`` (the folder)."""
    d = tmp_path_factory.mktemp("gz")
    convert(DATA / "ci", "jsonl", d / "ci.jsonl")
    convert(DATA / "ci", "jsonl", d / "ci.jsonl.gz")
    return d


def lists(nbest):
    return [(u.utt_id, u.doc_id, u.keys, u.hyps, u.ac_cost.tolist(), u.lm_cost.tolist(), u.graph_cost.tolist())
            for u in nbest.utterances]


def test_ci_through_jsonl_gz_is_the_jsonl_compressed(ci_gz, tmp_path):
    raw = (ci_gz / "ci.jsonl").read_bytes()
    packed = (ci_gz / "ci.jsonl.gz").read_bytes()
    assert packed[:2] == b"\x1f\x8b" and len(packed) < len(raw) / 5
    assert gzip.decompress(packed) == raw
    convert(ci_gz / "ci.jsonl", "jsonl", tmp_path / "again.jsonl.gz")
    assert (tmp_path / "again.jsonl.gz").read_bytes() == packed  # no name or time in the header
    convert(ci_gz / "ci.jsonl.gz", "jsonl", tmp_path / "back.jsonl")
    assert (tmp_path / "back.jsonl").read_bytes() == raw


def test_ci_jsonl_gz_reads_as_the_jsonl_whole_and_by_spans(ci_gz):
    plain, packed = load_nbest(ci_gz / "ci.jsonl"), load_nbest(ci_gz / "ci.jsonl.gz")
    assert lists(packed) == lists(plain) and packed.doc_source == plain.doc_source == "document fields"
    source = open_nbest(ci_gz / "ci.jsonl.gz")
    spans = list(source.spans(1000))
    assert len(spans) > 1 and [u for s in spans for u in lists(s)] == lists(plain)
    assert source.index.doc_source == "document fields"


def test_detected_by_name_or_decompressed_first_byte(ci_gz, tmp_path):
    assert is_jsonl(ci_gz / "ci.jsonl.gz")
    other = tmp_path / "lists.gz"  # not named .jsonl.gz: the decompressed first byte decides
    other.write_bytes((ci_gz / "ci.jsonl.gz").read_bytes())
    assert is_jsonl(other) and lists(load_nbest(other)) == lists(load_nbest(ci_gz / "ci.jsonl"))
    plain = tmp_path / "plain.gz"
    plain.write_bytes(gzip.compress(b"0 a b <eos>\n"))
    assert not is_jsonl(plain)
    with pytest.raises(DataError, match=r"plain.gz: a name ending in .gz is read as gzip-compressed JSON Lines, but "
                                        r"its decompressed text does not start with '\{'"):
        load_nbest(plain)


def test_errors_name_the_line_of_the_decompressed_text(tmp_path):
    good = {"utt_id": "u1", "hypotheses": [{"words": ["a"], "scores": {"ac_cost": 1, "lm_cost": 2}}]}
    p = tmp_path / "bad.jsonl.gz"
    p.write_bytes(gzip.compress((json.dumps(good) + "\n\n" + '{"utt_id": "u2"}\n').encode()))
    with pytest.raises(DataError, match=rf"^{p}:3: no 'hypotheses' field"):
        read_jsonl_nbest(p)


def _damaged(ci_gz, tmp_path):
    packed = (ci_gz / "ci.jsonl.gz").read_bytes()
    crc = bytearray(packed)
    crc[-8] ^= 0xFF  # the CRC-32 of the trailer
    return {"truncated.jsonl.gz": (packed[:len(packed) // 2], "the gzip data is truncated or corrupt after line "),
            "crc.jsonl.gz": (bytes(crc), "the gzip data is truncated or corrupt after line 60 "),
            "text.jsonl.gz": ((ci_gz / "ci.jsonl").read_bytes(), "is not gzip data")}


@pytest.mark.parametrize("name", ["truncated.jsonl.gz", "crc.jsonl.gz", "text.jsonl.gz"])
def test_a_damaged_gzip_is_one_line_naming_the_file(ci_gz, tmp_path, name):
    data, want = _damaged(ci_gz, tmp_path)[name]
    src = tmp_path / name
    src.write_bytes(data)
    out = convert(src, "kaldi", tmp_path / "k", code=1)
    assert out.startswith(f"Error: {src}: {want}") and out.count("\n") == 1 and "Traceback" not in out, out
    assert f"gzip -t {src}" in out and not (tmp_path / "k").exists()


def test_writing_is_atomic(ci_gz, tmp_path):
    nbest = load_nbest(ci_gz / "ci.jsonl")
    u = nbest.utterances[-1]
    bad = NbestSet(nbest.utterances[:-1] + (replace(u, hyps=(("a b",),) + u.hyps[1:]),))
    out = tmp_path / "x.jsonl.gz"
    with pytest.raises(DataError, match="word 'a b' must be a non-empty string without white space"):
        write_jsonl_nbest(bad, out)
    assert os.listdir(tmp_path) == []
    out.write_bytes(b"old")
    with pytest.raises(DataError):
        write_jsonl_nbest(bad, out)
    assert os.listdir(tmp_path) == ["x.jsonl.gz"] and out.read_bytes() == b"old"


def test_references_and_lm_text_named_gz_are_read_decompressed(DATA, tmp_path):
    """The one line reader (io/_common.iter_lines) decompresses any text input named *.gz."""
    from nbest_rescore.io.lm_text import read_lm_text
    from nbest_rescore.io.references import read_references

    ref = tmp_path / "ref.txt.gz"
    ref.write_bytes(gzip.compress((DATA / "ci" / "ref.txt").read_bytes()))
    assert read_references(ref) == read_references(DATA / "ci" / "ref.txt")
    text = tmp_path / "valid.txt.gz"
    text.write_bytes(gzip.compress((DATA / "lm" / "lm_valid.txt").read_bytes()[:20000]))
    plain = tmp_path / "valid.txt"
    plain.write_bytes((DATA / "lm" / "lm_valid.txt").read_bytes()[:20000])
    assert read_lm_text(text) == read_lm_text(plain)
