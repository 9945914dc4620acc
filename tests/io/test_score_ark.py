import math

import kaldiio
import numpy as np
import pytest

from nbest_rescore.errors import DataError
from nbest_rescore.io import read_cost_ark, write_cost_ark


def naive_costs(path):
    out = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            key, value = line.split()
            out[key] = float(value)
    return out


@pytest.mark.parametrize("name", ["ac_cost", "lm_cost"])
def test_ci_text_ark_matches_naive_parse(DATA, name):
    got = read_cost_ark(DATA / "ci" / name)
    expected = naive_costs(DATA / "ci" / name)
    assert got == expected
    assert list(got) == list(expected)
    assert all(type(v) is float for v in got.values())


def test_binary_ark_reads_like_text_ark(DATA, tmp_path):
    text = read_cost_ark(DATA / "ci" / "ac_cost")
    b64 = tmp_path / "ac64.ark"
    kaldiio.save_ark(str(b64), {k: np.array([v], dtype=np.float64) for k, v in text.items()})
    assert b"\x00B" in b64.read_bytes()[:64]
    assert read_cost_ark(b64) == text
    b32 = tmp_path / "ac32.ark"
    kaldiio.save_ark(str(b32), {k: np.array([[v]], dtype=np.float32) for k, v in text.items()})
    got = read_cost_ark(b32)
    assert list(got) == list(text)
    assert all(got[k] == float(np.float32(text[k])) for k in text)  # float32 storage


def test_text_variants(tmp_path):
    p = tmp_path / "ark"
    p.write_text("a 5\nb [ 1.5 ]\nc [2.25]\nd  [\n  -3 ]\ne\t-1e-3\n")
    got = read_cost_ark(p)
    assert got == {"a": 5.0, "b": 1.5, "c": 2.25, "d": -3.0, "e": -0.001}
    assert type(got["a"]) is float


@pytest.mark.parametrize("content, line, pattern", [
    ("k1 1.0\nk2 abc\n", 2, r"key 'k2': 'abc' is not a decimal number; expected a number "
                            r"such as -12.5"),
    ("k1 1.0\nk2\n", 2, r"key 'k2' has no value"),
    ("k1 1.0\nk2 1.0 2.0\n", 2, r"key 'k2' has 2 values"),
    ("k1 [ 1.0 2.0 ]\n", 1, r"key 'k1' has 2 values"),
    ("k1 1.0\n\nk2 1.0\n", 2, r"blank line"),
    ("k1 1.0\nk2 2.0\nk1 3.0\n", 3, r"duplicate key 'k1'"),
    ("k1 1.0\nk2 nan\n", 2, r"key 'k2': 'nan' is not a decimal number \(NaN and infinity"),
    ("k1 -inf\n", 1, r"key 'k1': '-inf' is not a decimal number \(NaN and infinity"),
    ("k1 1_000\n", 1, r"key 'k1': '1_000' is not a decimal number \('_' digit separators"),
    ("k1 [ 1_0 ]\n", 1, r"key 'k1': '1_0' is not a decimal number"),
    ("k1 Infinity\n", 1, r"'Infinity' is not a decimal number \(NaN"),
    ("k1 0x1A\n", 1, r"'0x1A' is not a decimal number \(hexadecimal"),
    ("k1 \u0661\n", 1, r"only ASCII digits"),
    ("k1 1e999\n", 1, r"'1e999' is outside the float64 range"),
    ("k1 2\n\ufeffk2 3\n", 2, r"key '\\ufeffk2' contains an invisible U\+FEFF byte-order mark"),
    ("k1 2\nk\u200b2 3\n", 2, r"zero-width space at character 2"),
])
def test_text_errors_name_file_line_key(tmp_path, content, line, pattern):
    p = tmp_path / "cost"
    p.write_text(content)
    with pytest.raises(DataError, match=rf"{p}:{line}: .*{pattern}"):
        read_cost_ark(p)


def test_binary_errors(tmp_path):
    p = tmp_path / "bad.ark"
    kaldiio.save_ark(str(p), {"k1": np.array([1.0]), "k2": np.array([1.0, 2.0])})
    with pytest.raises(DataError, match=r"entry 2, key 'k2'.*2 values"):
        read_cost_ark(p)
    kaldiio.save_ark(str(p), {"k1": np.array([1.0]), "k2": np.array([math.nan])})
    with pytest.raises(DataError, match=r"key 'k2' is nan"):
        read_cost_ark(p)
    p.write_bytes(b"k1 \x00Bgarbage")
    with pytest.raises(DataError, match=rf"{p}: cannot read Kaldi archive entry 1"):
        read_cost_ark(p)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="not found"):
        read_cost_ark(tmp_path / "nope")


def test_write_round_trip(tmp_path):
    p = tmp_path / "out"
    items = {"a-1": 922.98751234, "a-2": -0.5, "b-1": 7}
    write_cost_ark(p, items)
    assert p.read_text() == "a-1 922.987512\na-2 -0.500000\nb-1 7.000000\n"
    got = read_cost_ark(p)
    assert list(got) == list(items)
    assert all(abs(got[k] - items[k]) < 1e-6 for k in items)


def test_write_rejects_non_finite(tmp_path):
    p = tmp_path / "out"
    with pytest.raises(DataError, match="'b'"):
        write_cost_ark(p, [("a", 1.0), ("b", math.inf)])
    assert not p.exists()
    assert list(tmp_path.iterdir()) == []
