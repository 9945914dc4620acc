"""N-best input the readers cannot take is refused in one line before any work: a
compressed file (by its first bytes, whatever its name; but gzip in a file named
``*.gz``, read as JSON Lines: tests/io/test_jsonl_gz.py) with the command that
decompresses it, and a named pipe (its format is told from its first bytes, then it is
read) with the fix: give it as ``-`` or ``'cat PIPE |'`` (tests/api/test_nbest_streams.py)."""
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


@pytest.mark.parametrize("kind,name,opener,command", [("bzip2", "ci.jsonl.bz2", bz2.open, "bunzip2 -k"),
                                                      ("gzip", "renamed.jsonl", gzip.open, "gunzip -k")])
def test_compressed_lists_are_refused_with_the_command_that_decompresses_them(DATA, tmp_path, kind, name, opener,
                                                                              command):
    src = tmp_path / name
    with opener(src, "wb") as fh:
        fh.write(_jsonl(DATA, tmp_path).read_bytes())
    want = (f"Error: {src}: is {kind}-compressed; N-best files are read as text: decompress it first ({command} "
            f"{src}) and give the decompressed file (JSON Lines may stay gzip-compressed in a file named *.jsonl.gz)\n")
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
        assert res.output == (f"Error: {fifo}: is a pipe or device, not a file; give a stream of N-best lists as "
                              f"standard input (--nbest - < {fifo}) or as a command's output (--nbest 'cat {fifo} |'), "
                              f"or write it to a file first\n"), res.output


def test_an_error_names_the_format_guessed_and_why(DATA, tmp_path):
    """An empty folder named x.jsonl is read as a Kaldi directory (it is a folder), and
    the reader's message says so; a plain list's error says why it was read as plain."""
    folder = tmp_path / "x.jsonl"
    folder.mkdir()
    plain = tmp_path / "lists.txt"
    plain.write_text("not a plain N-best line\n")
    for path, why in ((folder, "[read as a Kaldi N-best directory: x.jsonl is a folder]"),
                      (plain, "[read as a plain N-best file: not a folder, not named .jsonl or .tsv, its first "
                              "character is not '{' and its first line has no tab]")):
        res = CliRunner().invoke(main, ["tune", "--nbest", str(path), "--ref", str(DATA / "ci" / "ref.txt")])
        assert res.exit_code == 1 and res.output.startswith(f"Error: {path}"), res.output
        assert res.output.rstrip("\n").endswith(why) and res.output.count("\n") == 1, res.output


@pytest.mark.parametrize("search", ["grid", "line"])
def test_huge_finite_costs_end_in_one_line_not_a_numpy_warning(DATA, tmp_path, search):
    """Costs near float64's limit pass the readers (finite) but overflow once weighted:
    one line naming the largest costs, with numpy's warnings turned into errors."""
    import json
    import warnings

    lines = _jsonl(DATA, tmp_path).read_text().splitlines()
    first = json.loads(lines[0])
    first["hypotheses"][2]["scores"]["lm_cost"] = 1.7e308
    huge = tmp_path / "huge.jsonl"
    huge.write_text("\n".join([json.dumps(first)] + lines[1:]) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning would end in "unexpected ..."
        res = CliRunner().invoke(main, ["tune", "--nbest", str(huge), "--ref", str(DATA / "ci" / "ref.txt"),
                                        "--search", search, "--out", str(tmp_path / "t")])
    assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
    assert "passes float64's range" in res.output and "1.7e+308 n-gram" in res.output, res.output
    assert not (tmp_path / "t").exists()
