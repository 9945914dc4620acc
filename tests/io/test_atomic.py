import os

import pytest

from nbest_rescore.errors import DataError
from nbest_rescore.io.atomic import atomic_path, atomic_write


def _leftovers(directory, keep):
    return sorted(p for p in os.listdir(directory) if p not in keep)


def test_atomic_write_creates_file(tmp_path):
    out = tmp_path / "out.txt"
    with atomic_write(out) as fh:
        fh.write("hello\n")
        assert not out.exists()  # not visible before the block ends
    assert out.read_text() == "hello\n"
    assert _leftovers(tmp_path, {"out.txt"}) == []


def test_atomic_write_new_file_is_not_private(tmp_path):
    out = tmp_path / "out.txt"
    with atomic_write(out) as fh:
        fh.write("x")
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(out).st_mode & 0o777 == 0o666 & ~mask


def test_atomic_write_exception_keeps_original(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("original\n")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_write(out) as fh:
            fh.write("partial")
            raise RuntimeError("boom")
    assert out.read_text() == "original\n"
    assert _leftovers(tmp_path, {"out.txt"}) == []


def test_atomic_write_binary(tmp_path):
    out = tmp_path / "out.bin"
    with atomic_write(out, mode="wb") as fh:
        fh.write(b"\x00\x01")
    assert out.read_bytes() == b"\x00\x01"


def test_atomic_write_rejects_append_mode(tmp_path):
    with pytest.raises(ValueError):
        with atomic_write(tmp_path / "x", mode="a"):
            pass


def test_atomic_write_missing_directory(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        with atomic_write(tmp_path / "no" / "out.txt"):
            pass


def test_atomic_path_success_and_suffix(tmp_path):
    out = tmp_path / "plot.png"
    with atomic_path(out) as tmp:
        assert os.path.dirname(tmp) == str(tmp_path)
        assert tmp.endswith(".png")
        with open(tmp, "wb") as fh:
            fh.write(b"png")
    assert out.read_bytes() == b"png"
    assert _leftovers(tmp_path, {"plot.png"}) == []


def test_atomic_path_exception_removes_temp(tmp_path):
    out = tmp_path / "model.pt"
    out.write_bytes(b"old")
    with pytest.raises(KeyError):
        with atomic_path(out) as tmp:
            with open(tmp, "wb") as fh:
                fh.write(b"new")
            raise KeyError("x")
    assert out.read_bytes() == b"old"
    assert _leftovers(tmp_path, {"model.pt"}) == []
