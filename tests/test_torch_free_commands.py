"""The commands that only read and write lists (split, merge, convert, tune, kaldi-score)
run in a Python where ``import torch`` fails, and write the same bytes as in a process
that has torch: they start without torch's seconds of import time (the Kaldi step runs
split, merge and kaldi-score once per step)."""
import json
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

import nbest_rescore as nr
import nbest_rescore.api  # noqa: F401  (nr.api)
from nbest_rescore.cli import main
from fault_table import snapshot  # tests/fault_table.py: path -> bytes, JSON without timing fields
from tiny_models import random_checkpoint

#: Runs ``nbest_rescore.cli.main`` once per argument list (JSON on stdin) with torch
#: unimportable (a None entry in sys.modules makes ``import torch`` raise ImportError).
NO_TORCH = """
import json, sys
sys.modules["torch"] = None
from nbest_rescore.cli import main
for argv in json.load(sys.stdin):
    try:
        main(argv, prog_name="nbest-rescore")
    except SystemExit as exc:
        if exc.code:
            raise
print("torch" in sys.modules and sys.modules["torch"] is not None)
"""


def _commands(DATA, work):
    """The command lines; their outputs are relative to the working folder."""
    ci, ref = DATA / "ci", str(DATA / "ci" / "ref.txt")
    archive = work / "archive"
    return [
        ["split", "--nj", "2", str(ci), "shards"],
        ["convert", "--nbest", str(ci), "--to", "jsonl", "--out", "n.jsonl"],
        ["merge", "--out", "merged", "--ref", ref, str(work / "score.1"), str(work / "score.2")],
        ["tune", "--nbest", str(ci), "--nn-cost", str(work / "score.whole" / "nn_cost"), "--ref", ref,
         "--interps", "0:1:0.5", "--lm-weights", "8:10:1", "--out", "tuned"],
        ["kaldi-score", "--ref", ref, "--lm-cost", "lmwt.interp", "--min-lmwt", "9", "--max-lmwt", "10",
         "--out", "decode", str(archive)],
    ]


@pytest.fixture(scope="module")
def work(DATA, ci_nbest, tmp_path_factory):
    """Two score jobs of a random GRU (ci split in two) and the whole list's, and ci as
    one Kaldi archive folder."""
    work = tmp_path_factory.mktemp("torch_free")
    lm = random_checkpoint(ci_nbest, work / "gru.pt")
    run = CliRunner().invoke
    assert run(main, ["split", "--nj", "2", str(DATA / "ci"), str(work / "shards")]).exit_code == 0
    for name, nbest in (("1", work / "shards" / "1"), ("2", work / "shards" / "2"), ("whole", DATA / "ci")):
        res = run(main, ["score", "--lm", str(lm), "--nbest", str(nbest), "--out", str(work / f"score.{name}"),
                         "--threads", "1", "--no-progress"])
        assert res.exit_code == 0, res.output
    archive = work / "archive"
    archive.mkdir()
    for src, dst in (("text", "words_text"), ("ac_cost", "acwt"), ("lm_cost", "lmwt.interp")):
        shutil.copyfile(DATA / "ci" / src, archive / dst)
    return work


def test_list_commands_run_without_torch_and_write_what_they_write_with_it(DATA, work, monkeypatch):
    without, with_torch = work / "without_torch", work / "with_torch"
    without.mkdir()
    with_torch.mkdir()
    res = subprocess.run([sys.executable, "-c", NO_TORCH], input=json.dumps(_commands(DATA, work)),
                         capture_output=True, text=True, timeout=600, cwd=without)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines()[-1] == "False"  # torch never came in
    monkeypatch.chdir(with_torch)
    for argv in _commands(DATA, work):
        r = CliRunner().invoke(main, argv)
        assert r.exit_code == 0, (argv, r.output)
    got, want = snapshot(without), snapshot(with_torch)
    assert sorted(got) == sorted(want) and sum(v is not None for v in want.values()) > 20
    assert not [p for p in want if got[p] != want[p]]


def test_the_api_package_imports_its_names_when_first_used():
    code = ("import sys, nbest_rescore.api as api; a = 'torch' in sys.modules; api.Weights; b = 'torch' in sys.modules;"
            " api.score; print(a, b, 'torch' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.stdout.split() == ["False", "False", "True"], res.stderr
    for name in nr.api.__all__:  # every exported name resolves, to the object of its module
        assert getattr(nr.api, name) is not None, name
    assert nr.api.score is nr.api.score_job.score and nr.score is nr.api.score
    assert set(nr.__all__) - {"__version__"} <= set(nr.api.__all__)
    assert set(nr.api.__all__) <= set(dir(nr.api))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        nr.api.nothing
