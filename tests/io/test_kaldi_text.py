import pytest

from nbest_rescore.errors import DataError
from nbest_rescore.io import read_kaldi_text, read_references, write_kaldi_text


def test_read_ci_text_matches_naive_parse(DATA):
    path = DATA / "ci" / "text"
    expected = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            parts = line.rstrip("\n").split(maxsplit=1)
            expected[parts[0]] = tuple(parts[1].split()) if len(parts) > 1 else ()
    got = read_kaldi_text(path)
    assert got == expected
    assert list(got) == list(expected)  # file order


def test_read_references_ci(DATA):
    refs = read_references(DATA / "ci" / "ref.txt")
    assert len(refs) == 60
    assert refs["abcr0004-000"] == ("sa", "farmers", "help", "fire", "ravaged", "neighbours")


def test_bare_key_is_empty_hypothesis(tmp_path):
    p = tmp_path / "text"
    p.write_text("a-1 x y\nb-1\nc-1   \nd-1\tz\n")
    assert read_kaldi_text(p) == {"a-1": ("x", "y"), "b-1": (), "c-1": (), "d-1": ("z",)}


def test_no_final_newline_and_crlf(tmp_path):
    p = tmp_path / "text"
    p.write_bytes(b"a-1 x\r\nb-1 y")
    assert read_kaldi_text(p) == {"a-1": ("x",), "b-1": ("y",)}


def test_blank_line_is_error(tmp_path):
    p = tmp_path / "text"
    p.write_text("a-1 x\n   \nb-1 y\n")
    with pytest.raises(DataError, match=rf"{p}:2: blank line"):
        read_kaldi_text(p)


def test_duplicate_key_is_error(tmp_path):
    p = tmp_path / "text"
    p.write_text("a-1 x\nb-1 y\na-1 z\n")
    with pytest.raises(DataError, match=rf"{p}:3: duplicate key 'a-1' \(first seen on line 1\)"):
        read_kaldi_text(p)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="not found"):
        read_kaldi_text(tmp_path / "nope")


def test_non_utf8(tmp_path):
    p = tmp_path / "text"
    p.write_bytes(b"a-1 x\nb-1 \xff\n")
    with pytest.raises(DataError, match=rf"{p}:2: not valid UTF-8"):
        read_kaldi_text(p)


def test_write_round_trip(tmp_path):
    p = tmp_path / "out"
    items = [("u-1", ("a", "b")), ("u-2", ()), ("u-3", ("c",))]
    write_kaldi_text(p, items)
    assert p.read_text() == "u-1 a b\nu-2\nu-3 c\n"
    assert list(read_kaldi_text(p).items()) == items
    write_kaldi_text(p, dict(items))  # a mapping works too
    assert list(read_kaldi_text(p).items()) == items


def test_write_rejects_bad_tokens_and_keeps_old_file(tmp_path):
    p = tmp_path / "out"
    p.write_text("old\n")
    with pytest.raises(DataError, match="white space"):
        write_kaldi_text(p, [("u-1", ("a b",))])
    with pytest.raises(DataError, match="duplicate"):
        write_kaldi_text(p, [("u-1", ()), ("u-1", ())])
    assert p.read_text() == "old\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out"]
