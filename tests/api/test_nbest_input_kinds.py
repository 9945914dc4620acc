"""N-best input the readers cannot take is refused in one line before any work: a
compressed file (by its first bytes, whatever its name) with the command that
decompresses it, and a pipe (every reader reads its input twice) with the fix."""
import bz2
import gzip
import os

import pytest
from click.testing import CliRunner

from nbest_rescore.cli import main


def _jsonl(DATA, tmp_path):
    out = tmp_path / "ci.jsonl"
    res = CliRunner().invoke(main, ["convert", "--nbest", str(DATA / "ci"), "--to", "jsonl", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


@pytest.mark.parametrize("kind,name,opener,command", [("gzip", "ci.jsonl.gz", gzip.open, "gunzip -k"),
                                                      ("bzip2", "ci.jsonl.bz2", bz2.open, "bunzip2 -k"),
                                                      ("gzip", "renamed.jsonl", gzip.open, "gunzip -k")])
def test_compressed_lists_are_refused_with_the_command_that_decompresses_them(DATA, tmp_path, kind, name, opener,
                                                                              command):
    src = tmp_path / name
    with opener(src, "wb") as fh:
        fh.write(_jsonl(DATA, tmp_path).read_bytes())
    want = (f"Error: {src}: is {kind}-compressed; N-best files are read as text: decompress it first ({command} "
            f"{src}) and give the decompressed file\n")
    for args in (["tune", "--nbest", str(src), "--ref", str(DATA / "ci" / "ref.txt"), "--lm-weights", "9.5"],
                 ["convert", "--nbest", str(src), "--to", "kaldi", "--out", str(tmp_path / "k")]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 1 and res.output == want, res.output
    assert not (tmp_path / "k").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_pipe_is_refused_without_reading_it(DATA, tmp_path):
    fifo = tmp_path / "lists.jsonl"
    os.mkfifo(fifo)  # nothing ever writes to it: opening it to read would block the test
    for args in (["tune", "--nbest", str(fifo), "--ref", str(DATA / "ci" / "ref.txt"), "--lm-weights", "9.5"],
                 ["convert", "--nbest", str(fifo), "--to", "kaldi", "--out", str(tmp_path / "k")]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 1 and "Traceback" not in res.output
        assert res.output.startswith(f"Error: {fifo}: is a pipe or device, not a file; N-best input is read twice"), \
            res.output
        assert "write it to a file first" in res.output
