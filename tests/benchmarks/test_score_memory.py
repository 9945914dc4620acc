"""benchmarks/score_memory.py (``rescore_memory.py --scale K``): the lists copied K times
are K distinct copies of every file (keys, utterances and documents renamed per copy),
read back as K times the set; bad arguments are usage errors, never a traceback."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nbest_rescore.io.kaldi_nbest import read_kaldi_nbest_dir
from nbest_rescore.io.references import read_references

REPO = Path(__file__).resolve().parents[2]
from benchmarks import score_memory


def test_copies_are_distinct_and_read_back_as_k_sets(ci_nbest, DATA, tmp_path):
    score_memory.copy_lists(str(DATA / "ci"), str(tmp_path / "x3"), 3)
    got = read_kaldi_nbest_dir(tmp_path / "x3")
    assert len(got) == 3 * len(ci_nbest) and len(got.documents()) == 3 * len(ci_nbest.documents())
    for c in range(3):
        part = got.utterances[c * len(ci_nbest):(c + 1) * len(ci_nbest)]
        suffix = "" if c == 0 else f"_c{c + 1}"
        for a, b in zip(part, ci_nbest.utterances):
            assert a.utt_id == b.utt_id + suffix and a.doc_id == b.doc_id + suffix and a.hyps == b.hyps
            assert a.keys == tuple(f"{b.utt_id}{suffix}-{k.rsplit('-', 1)[1]}" for k in b.keys)
            assert np.array_equal(a.ac_cost, b.ac_cost) and np.array_equal(a.lm_cost, b.lm_cost)
    refs = read_references(tmp_path / "x3" / "ref.txt")
    assert set(refs) == {u.utt_id for u in got.utterances}
    ones = (tmp_path / "x3" / "words.txt").read_text().count("\n")
    assert ones == (DATA / "ci" / "words.txt").read_text().count("\n")  # copied once
    words = (tmp_path / "x3" / "words").read_text().splitlines()
    assert len(words) == 3 * 6000 and words[6000].startswith(f"{ci_nbest.utterances[0].utt_id}_c2-1 ")


def test_bad_arguments_are_usage_errors(tmp_path, DATA):
    for args in (["--lm", tmp_path / "nope.pt", "--nbest", DATA / "ci", "--scale", "1"],
                 ["--lm", REPO / "README.md", "--nbest", tmp_path, "--scale", "1"],
                 ["--lm", REPO / "README.md", "--nbest", DATA / "ci", "--scale", "1", "4", "--repeat", "1", "2", "3"]):
        res = subprocess.run([sys.executable, "-m", "benchmarks.rescore_memory", *map(str, args)],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr


@pytest.mark.slow
def test_copies_scored_in_other_spans_get_the_same_costs(tiny_lm, DATA, tmp_path):
    """The check behind ``copies_identical``: ci copied twice and scored a few documents
    per span writes ci's own text and nn_cost twice over, byte for byte (each copy sits
    in other spans and batches); a changed last digit is caught."""
    from nbest_rescore.api import ScoreJob

    score_memory.copy_lists(str(DATA / "ci"), str(tmp_path / "x2"), 2)
    ScoreJob(lm=str(tiny_lm), nbest=str(DATA / "ci"), out=str(tmp_path / "x1_out"), threads=2).run()
    ScoreJob(lm=str(tiny_lm), nbest=str(tmp_path / "x2"), out=str(tmp_path / "x2_out"), threads=2,
             span_hyps=2500).run()
    same = score_memory.copies_identical(str(tmp_path / "x1_out"), str(tmp_path / "x2_out"), 1, 2)
    assert same == {"text": True, "nn_cost": True}
    cost = tmp_path / "x2_out" / "nn_cost"
    lines = cost.read_text().splitlines(keepends=True)
    key, value = lines[-1].split()
    lines[-1] = f"{key} {value[:-1]}{(int(value[-1]) + 1) % 10}\n"
    cost.write_text("".join(lines))
    assert score_memory.copies_identical(str(tmp_path / "x1_out"), str(tmp_path / "x2_out"), 1, 2)["nn_cost"] is False
