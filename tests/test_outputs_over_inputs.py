"""Issue 39, item 1: no command writes over, around or into one of its inputs. An output
that is, contains or lies inside an input (links resolved) is refused before any work
with one line naming both, and the input is left byte for byte as it was."""
import hashlib
import json
import os
import shutil

import pytest
import yaml
from click.testing import CliRunner

from nbest_rescore.cli import main


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def snapshot(path):
    """Every file below ``path`` (or the file) -> its bytes."""
    if os.path.isfile(path):
        return {"": open(path, "rb").read()}
    return {os.path.relpath(os.path.join(d, f), path): open(os.path.join(d, f), "rb").read()
            for d, _, files in os.walk(path) for f in files}


@pytest.fixture
def nb(DATA, tmp_path):
    """A Kaldi N-best folder (ci's text, ac_cost, lm_cost, utt2doc) and its JSON Lines twin."""
    d = tmp_path / "data" / "nb"
    d.mkdir(parents=True)
    for name in ("text", "ac_cost", "lm_cost", "utt2doc", "ref.txt"):
        shutil.copy(DATA / "ci" / name, d / name)
    assert run("convert", "--nbest", d, "--to", "jsonl", "--out", tmp_path / "x.jsonl").exit_code == 0
    return d, tmp_path / "x.jsonl"


def refused(res, how, option="--out"):
    assert res.exit_code != 0, res.output
    assert f": {how} the input " in res.output and option in res.output, res.output
    assert "Traceback" not in res.output and "unexpected" not in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output


def test_convert_never_writes_over_its_input(nb, tmp_path):
    d, x = nb
    before, before_x = snapshot(d), snapshot(x)
    refused(run("convert", "--nbest", d, "--to", "kaldi", "--out", d), "is")  # the data loss
    refused(run("convert", "--nbest", x, "--to", "jsonl", "--out", x), "is")
    refused(run("convert", "--nbest", d, "--to", "plain", "--out", d / "plain"), "lies inside")
    refused(run("convert", "--nbest", d, "--to", "kaldi", "--out", tmp_path / "data"), "contains")
    link = tmp_path / "link"
    link.symlink_to(d, target_is_directory=True)
    refused(run("convert", "--nbest", link, "--to", "kaldi", "--out", d), "is")  # through a link
    assert snapshot(d) == before and snapshot(x) == before_x
    assert run("convert", "--nbest", d, "--to", "kaldi", "--out", tmp_path / "copy").exit_code == 0


def test_score_tune_split_merge_refuse_their_inputs(nb, tiny_lm, tmp_path):
    d, _ = nb
    before = snapshot(d)
    refused(run("score", "--lm", tiny_lm, "--nbest", d, "--out", tmp_path / "data"), "contains")
    refused(run("score", "--lm", tiny_lm, "--nbest", d, "--out", d / "rescored"), "lies inside")
    refused(run("split", "--nj", 2, d, d), "is", "OUT_DIR")
    assert snapshot(d) == before
    out = tmp_path / "score"
    assert run("score", "--lm", tiny_lm, "--nbest", d, "--out", out).exit_code == 0
    refused(run("tune", "--nbest", d, "--ref", d / "ref.txt", "--nn-cost", out / "nn_cost", "--out", out),
            "contains")
    refused(run("merge", "--out", out / "merged", out), "lies inside")
    res = run("merge", "--out", out, out)  # (the older check's own words for this one)
    assert res.exit_code != 0 and "is also a job folder" in res.output
    assert (out / "nn_cost").is_file() and (out / "text").is_file()  # still the score run's output


def test_train_and_curves_refuse_their_inputs(DATA, tmp_path):
    text = tmp_path / "train.txt"
    text.write_text("a b c\n\nb c a\n")
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"model": "gru", "model_config": {"embedding_dim": 4, "hidden_size": 4},
                                      "data": {"train": str(text), "valid": None}, "vocab": {"max_size": 10}}))
    before = text.read_bytes()
    refused(run("train", "--config", config, "--out", text, "--no-progress"), "is")
    refused(run("train", "--config", config, "--out", config, "--no-progress"), "is")
    assert text.read_bytes() == before
    runs = tmp_path / "run.json"
    runs.write_text(json.dumps({"curve": [{"words": 1, "cpu_seconds": 1, "valid_ppl": 9}]}))
    refused(run("curves", runs, "--out", runs), "is")


# --- issue 47, item 5: the files a reader finds are inputs too --------------------------

def digest(path):
    """Every file below ``path`` -> its SHA-256, links followed (what an overwrite changes)."""
    return {k: hashlib.sha256(v).hexdigest() for k, v in snapshot(path).items()}


def refused_found(res, out, found, option="--out", how="is"):
    """One line naming the output, the file the reader found, the option it came through and the fix."""
    refused(res, how, option)
    assert f"{option} {out}: {how} the input {found} (read with --nbest " in res.output or \
        f"{option} {out}: {how} the input {found} (read with NBEST_DIR " in res.output, res.output
    assert f"choose an {option} outside every input (nothing was written)" in res.output, res.output


@pytest.fixture
def plain(DATA, tmp_path):
    """ci as a plain list ``x/nbest.txt`` with its score files ``x/nbest.ac`` and
    ``x/nbest.ngram`` beside it (found by name), and the Kaldi copy ``data/nb``."""
    d = tmp_path / "data" / "nb"
    shutil.copytree(DATA / "ci", d)
    assert run("convert", "--nbest", d, "--to", "plain", "--out", tmp_path / "p").exit_code == 0
    x = tmp_path / "x"
    x.mkdir()
    for name in ("nbest.txt", "nbest.ac", "nbest.ngram"):
        shutil.copy(tmp_path / "p" / name, x / name)
    return x, d


def test_convert_never_writes_over_a_score_file_the_plain_reader_finds(plain, tmp_path):
    """The issue's case: a plain list's NAME.ac / NAME.ngram beside it are read, so an
    output there is refused before any work, and every byte stays."""
    x, _ = plain
    before = digest(x)
    for name in ("nbest.ac", "nbest.ngram"):
        for to in ("jsonl", "kaldi", "plain"):
            res = run("convert", "--nbest", x / "nbest.txt", "--to", to, "--out", x / name)
            refused_found(res, x / name, x / name)
    assert digest(x) == before and sorted(os.listdir(x)) == ["nbest.ac", "nbest.ngram", "nbest.txt"]
    # the lists convert when the output is elsewhere, reading the score files found beside them
    assert run("convert", "--nbest", x / "nbest.txt", "--to", "jsonl", "--out", tmp_path / "ok.jsonl").exit_code == 0
    assert digest(x) == before


def test_the_files_a_directory_reader_finds_through_links_are_inputs(plain, tmp_path):
    """A Kaldi directory whose files are links elsewhere: convert, score, tune and split
    refuse an output that is or holds one of the files the reader reads there."""
    from nbest_rescore.api.inputs import load_nbest
    from tiny_models import random_checkpoint

    _, d = plain
    k = tmp_path / "k"
    k.mkdir()
    for name in ("text", "ac_cost", "lm_cost"):
        shutil.copy(d / name, k / name)
    (k / "utt2doc").symlink_to(d / "utt2doc")  # the reader reads d/utt2doc through the link
    ref = shutil.copy(d / "ref.txt", tmp_path / "ref.txt")
    before, before_k = digest(d), digest(k)
    refused_found(run("convert", "--nbest", k, "--to", "jsonl", "--out", d / "utt2doc"), d / "utt2doc", k / "utt2doc")
    lm = random_checkpoint(load_nbest(d), tmp_path / "m.pt")
    refused_found(run("score", "--lm", lm, "--nbest", k, "--out", d), d, k / "utt2doc", how="contains")
    refused_found(run("tune", "--nbest", k, "--ref", ref, "--lm-weights", "9.5", "--out", d), d,
                  k / "utt2doc", how="contains")
    refused_found(run("split", "--nj", 2, k, d), d, k / "utt2doc", "OUT_DIR", how="contains")
    assert digest(d) == before and digest(k) == before_k


def test_nbest_files_lists_what_each_reader_reads(plain, tmp_path):
    from nbest_rescore.api.inputs import nbest_files

    x, d = plain
    assert nbest_files(x / "nbest.txt") == tuple(str(x / n) for n in ("nbest.txt", "nbest.ac", "nbest.ngram"))
    assert nbest_files(x / "nbest.txt", utt_ids=tmp_path / "p" / "utt_ids") == \
        tuple(str(p) for p in (x / "nbest.txt", x / "nbest.ac", x / "nbest.ngram", tmp_path / "p" / "utt_ids"))
    assert nbest_files(d) == tuple(str(d / n) for n in ("text", "ac_cost", "lm_cost", "utt2doc"))
    assert nbest_files(tmp_path / "missing") == ()  # the reader says why, before anything is written
