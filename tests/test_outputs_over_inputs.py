"""Issue 39, item 1: no command writes over, around or into one of its inputs. An output
that is, contains or lies inside an input (links resolved) is refused before any work
with one line naming both, and the input is left byte for byte as it was."""
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
