"""OS-level failures while writing (issue 29): every command that writes, run through
the CLI onto a full, a read-only and a not-writable file system (a small tmpfs), ends
in one line naming the output option and path, what happened and a fix; no traceback,
no partial output, and an earlier output set survives byte for byte. Mounting needs
root: the tests skip with one line where it is not permitted."""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nbest_rescore.cli import main
from nbest_rescore.errors import DataError
from nbest_rescore.io.atomic import atomic_dir, atomic_path
from nbest_rescore.os_errors import is_output_error, note_space, os_error_of, os_error_message

REPO = Path(__file__).resolve().parents[2]

#: Every command that writes: its arguments ({i}: the inputs, {m}: the mount) and how the
#: message names its output.
WRITERS = {
    "score": ("score --lm {i}/g.pt --nbest {i}/lst --ref {i}/lst/ref.txt --no-progress --out {m}/out",
              "--out {m}/out"),
    "tune": ("tune --nbest {i}/lst --ref {i}/lst/ref.txt --nn-cost {i}/job/nn_cost --interps 0,1 --lm-weights 9,10 "
             "--replications 20 --out {m}/out", "--out {m}/out"),
    "train": ("train --config {i}/tiny.yaml --out {m}/m.pt --no-progress", "--out {m}/m.pt"),
    "merge": ("merge --out {m}/out --ref {i}/lst/ref.txt {i}/job", "--out {m}/out"),
    "split": ("split --nj 2 {i}/lst {m}/out", "OUT_DIR {m}/out"),
    "convert-kaldi": ("convert --nbest {i}/lst --to kaldi --out {m}/out", "--out {m}/out"),
    "convert-jsonl": ("convert --nbest {i}/lst --to jsonl --out {m}/out.jsonl", "--out {m}/out.jsonl"),
    "kaldi-score": ("kaldi-score --lm-cost lm_cost --ref {i}/lst/ref.txt --out {m}/out {i}/lst", "--out {m}/out"),
    "analyze": ("analyze --lm {i}/amn.pt --text {i}/small.txt --out {m}/out", "--out {m}/out"),
}


def _argv(name, i, m):
    return WRITERS[name][0].format(i=i, m=m).split()


def invoke(argv):
    return CliRunner().invoke(main, [str(a) for a in argv])


def assert_one_line(res, *words):
    """Exit 1, one line of output (the error), the words in it, no traceback."""
    assert res.exit_code == 1, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def snapshot(root: Path) -> dict:
    """Every entry below ``root``: its bytes (None for a folder)."""
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def fill(root: Path, leave: int = 0) -> Path:
    """Write a file into ``root`` until the file system is full, then give back ``leave`` bytes."""
    path = root / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    os.truncate(path, os.path.getsize(path) - leave)
    return path


@pytest.fixture
def tmpfs(tmp_path_factory):
    """``tmpfs(size, mode)``: a fresh tmpfs (world-traversable mount point), unmounted at
    teardown; skips when this process may not mount."""
    mounts = []

    def mount(size="2m", mode="755") -> Path:
        if os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("mounting a tmpfs needs root and mount(8)")
        d = tmp_path_factory.mktemp("mnt")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode={mode}", "tmpfs", str(d)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")
        mounts.append(d)
        return d

    yield mount
    for d in reversed(mounts):
        if subprocess.run(["umount", str(d)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(d)], capture_output=True)  # busy: detach it all the same


@pytest.fixture(scope="module")
def inputs(DATA, tmp_path_factory):
    """Small inputs for every writer: two documents of ci (``lst``), a random GRU and an
    AMN over their words, a score job's folder, a tiny training config, a short text."""
    from tiny_models import random_checkpoint

    from nbest_rescore.api.shards import SplitJob
    from nbest_rescore.io.kaldi_nbest import read_kaldi_nbest_dir

    i = tmp_path_factory.mktemp("oserr-inputs")
    SplitJob(nbest=str(DATA / "ci"), out=str(i / "sp"), nj=4).run()
    (i / "sp" / "1").rename(i / "lst")
    nbest = read_kaldi_nbest_dir(i / "lst")
    random_checkpoint(nbest, i / "g.pt")
    random_checkpoint(nbest, i / "amn.pt", "amn")
    (i / "small.txt").write_text("".join((DATA / "lm" / "lm_valid.txt").read_text().splitlines(True)[:30]))
    (i / "tiny.yaml").write_text(json.dumps({
        "model": "gru", "model_config": {"embedding_dim": 8, "hidden_size": 8},
        "data": {"train": str(DATA / "lm" / "lm_train.txt"), "valid": None, "max_words": 2000},
        "vocab": {"max_size": 300}, "optim": {"batch_size": 8, "bptt": 10, "max_epochs": 1}}))
    res = invoke(_argv("score", i, i)[:-1] + [i / "job"])
    assert res.exit_code == 0, res.output
    return i


@pytest.mark.parametrize("name", list(WRITERS))
def test_full_then_read_only_disk(name, inputs, tmpfs):
    """A first run writes the set; with the disk full, then read-only, a rerun fails in
    one line naming the output and the fix, and the first set is left byte for byte."""
    m = tmpfs()
    res = invoke(_argv(name, inputs, m))
    assert res.exit_code == 0, res.output
    before = snapshot(m)
    filler = fill(m)
    label = WRITERS[name][1].format(m=m)
    line = assert_one_line(invoke(_argv(name, inputs, m)), f"{label}: no space left on device",
                           f"free on {m}); free space on {m} or choose another")
    assert {k: v for k, v in snapshot(m).items() if k != "filler"} == before, line
    filler.unlink()
    subprocess.run(["mount", "-o", "remount,ro", str(m)], check=True)
    assert_one_line(invoke(_argv(name, inputs, m)), f"{label}: read-only file system",
                    f"{m} is mounted read-only: choose another")
    assert snapshot(m) == before


def test_no_space_says_how_far_the_output_got(inputs, tmpfs):
    """With some room left, the message says how much of the set was written when the
    disk filled (the least it needs), and nothing of it stays."""
    m = tmpfs(size="256k")
    fill(m, leave=16384)
    assert_one_line(invoke(_argv("score", inputs, m)), f"--out {m}/out: no space left on device while writing {m}/out/",
                    "(the output had reached ", f"; 0 bytes free on {m}); free space on {m}")
    assert sorted(os.listdir(m)) == ["filler"]


_AS_ROOT_WITHOUT_OVERRIDE = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]

_RUN_ALL = """
import json, sys
from click.testing import CliRunner
from nbest_rescore.cli import main
print(json.dumps({k: (r.exit_code, r.output) for k, r in
                  ((k, CliRunner().invoke(main, argv)) for k, argv in json.loads(sys.argv[1]).items())}))
"""


def test_permission_denied(inputs, tmpfs):
    """Every writer into a folder this user may not write in (root without the
    capability to override file permissions, a real EACCES): one line naming the
    output, the folder and the fix; nothing is written."""
    if shutil.which("setpriv") is None or subprocess.run(_AS_ROOT_WITHOUT_OVERRIDE + ["true"]).returncode != 0:
        pytest.skip("setpriv cannot drop the capability to override file permissions here")
    m = tmpfs(mode="555")
    before = snapshot(m)
    argvs = {name: _argv(name, inputs, m) for name in WRITERS}
    proc = subprocess.run(_AS_ROOT_WITHOUT_OVERRIDE + [sys.executable, "-c", _RUN_ALL, json.dumps(argvs)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, (code, output) in results.items():
        label = WRITERS[name][1].format(m=m)
        assert code == 1 and len(output.strip().splitlines()) == 1 and "Traceback" not in output, (name, output)
        assert f"{label}: permission denied; user " in output and f"may not write in {m}" in output, (name, output)
    assert snapshot(m) == before


def test_stdout_and_log_file_on_a_full_disk(inputs, tmpfs):
    """Results redirected to a full disk: one line naming that file (not an unexpected
    OSError); a --log-file there: one warning, and the command goes on."""
    m = tmpfs(size="64k")
    fill(m)
    with open(m / "out.txt", "w") as out:
        proc = subprocess.run([sys.executable, "-m", "nbest_rescore", "--log-file", str(m / "run.log"), "split",
                               "--nj", "2", str(inputs / "lst"), str(inputs / "split-out")],
                              stdout=out, stderr=subprocess.PIPE, text=True, cwd=REPO, timeout=120)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, err
    assert err[0].startswith(f"warning: --log-file {m}/run.log: no space left on device") and \
        "the log goes on without it" in err[0], err
    assert err[1].startswith(f"Error: stdout: no space left on device while writing {m}/out.txt"), err
    assert len(err) == 2


# --- the helper itself --------------------------------------------------------------------

@pytest.mark.parametrize("code,words", [
    (errno.ENOSPC, ["--out exp/x: no space left on device while writing exp/x/text (the output had reached 2.0 KiB; ",
                    " free on ", "); free space on ", " or choose another --out on a disk with room"]),
    (errno.EROFS, ["--out exp/x: read-only file system while writing exp/x/text; ", "mounted read-only"]),
    (errno.EACCES, ["--out exp/x: permission denied while writing exp/x/text; user ", "may not write in",
                    "choose another --out"]),
    (errno.EISDIR, ["is a directory", "move it away"]),
    (errno.ENAMETOOLONG, ["file name too long", "shorter names"]),
    (errno.EDQUOT, ["disk quota exceeded", "within your quota"]),
])
def test_messages(code, words, tmp_path):
    exc = OSError(code, os.strerror(code))
    (tmp_path / "part").write_bytes(b"x" * 2048)
    note_space(exc, tmp_path)  # the partial output, before it is removed
    line = os_error_message(exc, "exp/x", "--out", file="exp/x/text", writing=True)
    assert "\n" not in line
    for w in words:
        assert w in line, (w, line)


def test_reading_and_unknown_direction():
    exc = PermissionError(errno.EACCES, "Permission denied", "/data/ref.txt")
    assert "may not read it" in os_error_message(exc, writing=False)
    line = os_error_message(exc)
    assert line.startswith("/data/ref.txt: permission denied; ") and "lacks the permission" in line


def test_errors_of_torch_and_rust_libraries():
    """torch's checkpoint writer and Rust libraries (safetensors) report a failed write
    in their own exceptions: the OSError behind them is found."""
    disk = OSError(errno.ENOSPC, "No space left on device")
    try:
        try:
            raise disk
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")
    except RuntimeError as exc:
        assert os_error_of(exc) is disk
    rust = os_error_of(Exception("Error while serializing: I/O error: No space left on device (os error 28)"))
    assert rust.errno == errno.ENOSPC
    assert os_error_of(RuntimeError("shapes differ")) is None and os_error_of(KeyboardInterrupt()) is None


def test_only_errors_of_the_output_are_worded(tmp_path):
    """An input's error inside an output block propagates as it is; a failed write of
    the output is worded, naming the file as it would have appeared."""
    assert is_output_error(OSError(errno.ENOSPC, "x"), [tmp_path])
    assert not is_output_error(PermissionError(errno.EACCES, "x", "/elsewhere/in.txt"), [tmp_path])
    with pytest.raises(PermissionError):
        with atomic_dir(tmp_path / "out") as tmp:
            (tmp / "a").write_text("x")
            raise PermissionError(errno.EACCES, "Permission denied", "/elsewhere/input.txt")
    with pytest.raises(DataError, match=r"--out .*/out: permission denied while writing .*/out/sub/f; "):
        with atomic_dir(tmp_path / "out") as tmp:
            raise PermissionError(errno.EACCES, "Permission denied", str(tmp / "sub" / "f"))
    with pytest.raises(DataError, match=r"^--out .*m\.pt: no space left on device \(the output had reached 3 bytes"):
        with atomic_path(tmp_path / "m.pt", "--out") as tmp:
            with open(tmp, "wb") as f:
                f.write(b"abc")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert sorted(os.listdir(tmp_path)) == []


def test_a_special_file_or_a_long_name_as_out(inputs, tmp_path):
    """A device or named pipe where a file is written is refused by name before any
    work (it was replaced by the output); a name too long for the file system too."""
    os.mkfifo(tmp_path / "fifo")
    assert_one_line(invoke(["convert", "--nbest", inputs / "lst", "--to", "jsonl", "--out", tmp_path / "fifo"]),
                    f"--out {tmp_path / 'fifo'}: is a named pipe, but a regular file is written there")
    assert_one_line(invoke(["train", "--config", inputs / "tiny.yaml", "--out", "/dev/null"]),
                    "--out /dev/null: is a device, but a regular file is written there")
    long = tmp_path / "new" / ("x" * 240)
    assert_one_line(invoke(["split", "--nj", "2", inputs / "lst", long]), f"OUT_DIR {long}: file name too long",
                    "choose another OUT_DIR with shorter names")
    assert sorted(os.listdir(tmp_path)) == ["fifo"]
