"""``--nbest -`` and ``--nbest 'COMMAND |'`` (Kaldi's rxspecifiers, kaldiio's
``open_like_kaldi``): N-best lists read once from standard input or a command's output,
run through the real CLI. The lists give the same files as the file itself; a command
that fails, a bad line late in the stream, and a format that needs a path are each one
line, with nothing written."""
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nbest_rescore.api.convert_job import ConvertJob
from nbest_rescore.api.inputs import job_inputs

REPO = Path(__file__).resolve().parents[2]
KALDI_FILES = ("text", "ac_cost", "lm_cost", "utt2doc")


def cli(*args, stdin=None, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "nbest_rescore", *map(str, args)], stdin=stdin, capture_output=True,
                          text=True, timeout=600, env=env, cwd=cwd)


@pytest.fixture(scope="module")
def ci_jsonl(DATA, tmp_path_factory):
    """The ci lists as JSON Lines, and gzip-compressed beside it."""
    out = tmp_path_factory.mktemp("streams") / "ci.jsonl"
    res = cli("convert", "--nbest", DATA / "ci", "--to", "jsonl", "--out", out)
    assert res.returncode == 0, res.stderr
    with gzip.open(f"{out}.gz", "wb") as fh:
        fh.write(out.read_bytes())
    return out


def _outputs(DATA, tmp_path, name, nbest, stdin_path=None):
    """The files that ``convert --to kaldi`` and ``tune`` write from ``--nbest nbest``."""
    out = tmp_path / name
    for args in (("convert", "--nbest", nbest, "--to", "kaldi", "--out", out / "kaldi"),
                 ("tune", "--nbest", nbest, "--ref", DATA / "ci" / "ref.txt", "--out", out / "tune")):
        with open(stdin_path or os.devnull, "rb") as stdin:
            res = cli(*args, stdin=stdin)
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    tune = json.loads((out / "tune" / "tune.json").read_text())
    tune.pop("title")  # (names --nbest)
    for k in ("seconds",):
        tune.pop(k, None)
    return {n: (out / "kaldi" / n).read_bytes() for n in KALDI_FILES}, tune


@pytest.mark.parametrize("how", ["cat", "gunzip", "stdin"])
def test_a_stream_gives_the_files_of_the_file(DATA, ci_jsonl, tmp_path, how):
    want = _outputs(DATA, tmp_path, "file", ci_jsonl)
    spec = {"cat": f"cat {ci_jsonl} |", "gunzip": f"gunzip -c {ci_jsonl}.gz |", "stdin": "-"}[how]
    got = _outputs(DATA, tmp_path, how, spec, stdin_path=ci_jsonl if how == "stdin" else None)
    assert got[0] == want[0]  # byte for byte
    assert json.dumps(got[1], sort_keys=True) == json.dumps(want[1], sort_keys=True)


@pytest.mark.parametrize("command,status,guess", [
    ("head -n 5 {f} && exit 3 |", 3, " [read as JSON Lines: a stream whose first character is '{' (or an empty one)]"),  # after 5 good lines
    ("gunzip -c {f}.missing.gz |", 1, "")])  # nothing: said before a format is guessed
def test_a_command_that_fails_is_one_line_and_nothing_is_written(ci_jsonl, tmp_path, command, status, guess):
    spec = command.format(f=ci_jsonl)
    res = cli("convert", "--nbest", spec, "--to", "kaldi", "--out", tmp_path / "k")
    error = [line for line in res.stderr.splitlines() if line.startswith("Error:")]
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert error == [f"Error: {spec}: the command {spec[:-1].strip()!r} exited with status {status}, so what it gave is "
                     f"not the whole input (its own message, if any, is above); run it alone to check it{guess}"], \
        res.stderr
    assert not (tmp_path / "k").exists()


def test_a_bad_line_late_in_a_stream_names_the_line_and_nothing_is_written(DATA, ci_jsonl, tmp_path):
    lines = ci_jsonl.read_text().splitlines()
    lines[57] = lines[57].replace('"hypotheses": [', '"hypotheses": [}', 1)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    for args in (("convert", "--to", "kaldi", "--out", tmp_path / "k"),
                 ("tune", "--ref", DATA / "ci" / "ref.txt", "--out", tmp_path / "t")):
        res = cli(*args, "--nbest", f"cat {bad} |")
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        assert res.stderr.startswith(f"Error: cat {bad} |:58: invalid JSON (") and res.stderr.count("\n") == 1, \
            res.stderr
    assert not (tmp_path / "k").exists() and not (tmp_path / "t").exists()


def test_an_empty_stream_is_empty_lists(tmp_path):
    res = cli("convert", "--nbest", "-", "--to", "kaldi", "--out", tmp_path / "k")
    assert res.returncode == 1 and res.stderr.startswith("Error: -: no utterances (the file is empty or blank)"), \
        res.stderr
    assert res.stderr.endswith(" [read as JSON Lines: a stream whose first character is '{' (or an empty one)]\n")


def test_a_format_that_needs_a_path_says_so(DATA, tmp_path):
    res = cli("convert", "--nbest", DATA / "ci", "--to", "plain", "--out", tmp_path / "p")
    assert res.returncode == 0, res.stderr
    spec = f"cat {tmp_path / 'p' / 'nbest.txt'} |"
    res = cli("convert", "--nbest", spec, "--to", "jsonl", "--out", tmp_path / "x.jsonl")
    assert res.returncode == 1 and res.stderr == (
        f"Error: {spec}: its score files are found beside it by name (NAME.ac, NAME.ngram), so a plain N-best file is "
        f"given as a path, not as a stream; give the file's path, or JSON Lines (nbest-rescore convert --to jsonl), "
        f"which can come from standard input or a command [read as a plain N-best file: not a folder, not named "
        f".jsonl or .tsv, its first character is not '{{' and its first line has no tab]\n"), res.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_a_stream_is_no_path_for_the_output_check(ci_jsonl, tmp_path):
    """``-`` and ``COMMAND |`` name no file, so no output can be over them (resolved as
    paths, ``-`` would lie inside the working folder)."""
    for spec in ("-", f"cat {ci_jsonl} |"):
        job = ConvertJob(nbest=spec, to="jsonl", out=str(tmp_path / "out.jsonl"))
        assert job_inputs(job, ("nbest",)) == []
