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


_KILLED_WRITER = r'''
import os, signal, sys
from nbest_rescore.io.atomic import atomic_write
with atomic_write(sys.argv[1]) as fh:
    fh.write("half")
    fh.flush()
    os.kill(os.getpid(), signal.SIGKILL)
'''


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(tmp_path):
    """A writer killed before its rename leaves its temporary file (named with its pid);
    the next atomic_write of the same file removes it, but not the temporary file of a
    live writer (this process) nor that of another file."""
    import signal
    import subprocess
    import sys

    from nbest_rescore.io.atomic import _make_temp

    out = tmp_path / "n.jsonl"
    out.write_text("old\n")
    p = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(out)])
    assert p.wait() == -signal.SIGKILL
    stale = _leftovers(tmp_path, {"n.jsonl"})
    assert len(stale) == 1 and stale[0].startswith(f".n.jsonl.{p.pid}-") and stale[0].endswith(".tmp.jsonl")
    assert out.read_text() == "old\n"  # the killed write left the old file whole
    live = os.path.basename(_make_temp(out))  # this process's: alive
    other = tmp_path / ".m.jsonl.{}-abcdefgh.tmp.jsonl".format(p.pid)  # another file's
    other.write_text("")
    with atomic_write(out) as fh:
        fh.write("new\n")
    assert out.read_text() == "new\n"
    assert _leftovers(tmp_path, {"n.jsonl"}) == sorted([live, other.name])


# --- output sets (atomic_dir) --------------------------------------------------------------

_WRITER = r'''
import sys, time
from nbest_rescore.io.atomic import atomic_dir
out, tag, pause = sys.argv[1], sys.argv[2], float(sys.argv[3])
with atomic_dir(out, [f"f{i}" for i in range(20)]) as tmp:
    for i in range(20):
        (tmp / f"f{i}").write_text(tag)
        if i == 0:
            print("first", flush=True)
            time.sleep(pause)
'''


def _write_set(out, tag, pause=0.0):
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", _WRITER, str(out), tag, str(pause)], stdout=subprocess.PIPE,
                            text=True)


def _tags(out):
    from nbest_rescore.io.output_checks import RUN_MARKER

    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([f"f{i}" for i in range(20)] + [RUN_MARKER]), names
    return {(out / f"f{i}").read_text() for i in range(20)}


def test_kill_between_outputs_leaves_the_old_set(tmp_path):
    import signal

    out = tmp_path / "out"
    assert _write_set(out, "old").wait() == 0
    assert _tags(out) == {"old"}
    p = _write_set(out, "new", pause=60)
    assert p.stdout.readline().strip() == "first"  # one file of the new set is written
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert _tags(out) == {"old"}
    assert any(".partial-" in q.name for q in tmp_path.iterdir())  # the killed run's folder
    assert _write_set(out, "new").wait() == 0
    assert _tags(out) == {"new"}
    assert [q.name for q in tmp_path.iterdir()] == ["out"]  # stale partial folder removed


@pytest.mark.slow  # timing: "some kills before the swap, some after" rests on the measured pace
def test_kill_at_random_times_never_mixes_sets(tmp_path):
    import random
    import signal
    import time

    out = tmp_path / "out"
    t0 = time.monotonic()
    assert _write_set(out, "run0").wait() == 0
    whole = time.monotonic() - t0  # one whole run on this machine now (start-up included)
    # kill points from early in the run to after its end, in a seeded order: measured
    # against the machine's own pace, so a busy machine does not put every kill first
    points = [0.05, 0.2, 0.4, 0.6, 0.8, 1.0, 1.5, 2.5]
    random.Random(0).shuffle(points)
    seen, k = set(), 0
    for scale in (1, 2, 4):  # a machine that slowed after run0 stretches the points
        for point in points:
            k += 1
            p = _write_set(out, f"run{k}")
            time.sleep(point * scale * whole)
            p.send_signal(signal.SIGKILL)
            p.wait()
            tags = _tags(out)
            assert len(tags) == 1, tags  # one whole set, never a mix
            seen |= tags
        if len(seen) >= 2:
            break
    assert len(seen) >= 2  # some kills landed after the swap, some before


def test_output_dir_checks(tmp_path):
    from nbest_rescore.errors import DataError
    from nbest_rescore.io.atomic import atomic_dir
    from nbest_rescore.io.output_checks import check_output_dir

    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(DataError, match="is a file"):
        check_output_dir(f)
    with pytest.raises(DataError, match="is a file"):
        check_output_dir(f / "below")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(DataError, match="notes.txt"):
        check_output_dir(mine, ["text"])
    out = tmp_path / "deep" / "er" / "out"
    with pytest.raises(RuntimeError):
        with atomic_dir(out, ["text"]) as tmp:
            (tmp / "text").write_text("half")
            raise RuntimeError("failed mid-way")
    assert not out.exists() and not [p for p in out.parent.iterdir()]
    with atomic_dir(out, ["text"]) as tmp:
        (tmp / "text").write_text("done")
    assert (out / "text").read_text() == "done"


def test_atomic_entries_replace_their_names_only(tmp_path):
    from nbest_rescore.io.atomic import atomic_entries

    dec = tmp_path / "exp" / "decode"
    with pytest.raises(RuntimeError):
        with atomic_entries(dec) as tmp:
            (tmp / "wer_1").write_text("half")
            raise RuntimeError("failed mid-way")
    assert not (tmp_path / "exp").exists()  # the folders it made are gone again
    dec.mkdir(parents=True)
    (dec / "lat.1.gz").write_text("theirs")
    (dec / "sub").mkdir()
    (dec / "sub" / "old").write_text("old")
    (dec / "wer_1").write_text("old")
    with atomic_entries(dec) as tmp:
        (tmp / "wer_1").write_text("new")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "new").write_text("new")
    assert sorted(os.listdir(dec)) == ["lat.1.gz", "sub", "wer_1"]
    assert (dec / "wer_1").read_text() == "new" and os.listdir(dec / "sub") == ["new"]
    with pytest.raises(DataError, match="is a folder, but this job writes a file"):
        with atomic_entries(dec) as tmp:
            (tmp / "wer_1").write_text("newer")
            (tmp / "sub").write_text("a file")
    assert (dec / "wer_1").read_text() == "new" and sorted(os.listdir(dec)) == ["lat.1.gz", "sub", "wer_1"]
