import numpy as np
import pytest

from nbest_rescore.errors import DataError
from nbest_rescore.io import read_plain_nbest

NBEST = """\
0 the cat sat <eos>
0 the cat sad <eos>
0 a cat sat </s>
1 hello world <eos>
1 <eos>
2 yes
"""
AC = "-100.5\n-101.25\n-99\n-50\n-60.5\n-7\n"
LM = "-10\n-12.5\n-11\n-5\n-9\n-1.5\n"


def write(tmp_path, nbest=NBEST, ac=AC, lm=LM):
    paths = []
    for name, content in (("nbest.txt", nbest), ("ac.txt", ac), ("lm.txt", lm)):
        p = tmp_path / name
        p.write_text(content)
        paths.append(p)
    return paths


def test_thesis_layout(tmp_path):
    nb, ac, lm = write(tmp_path)
    messages = []
    s = read_plain_nbest(nb, ac, lm, log=messages.append)
    assert s.utt_ids == ["0", "1", "2"]
    assert s.doc_source == "file" and s.documents() == [[0, 1, 2]]
    assert "one document" in messages[0]
    u0, u1, u2 = s.utterances
    assert u0.keys == ("0-1", "0-2", "0-3")
    assert u0.hyps == (("the", "cat", "sat"), ("the", "cat", "sad"), ("a", "cat", "sat"))
    assert u1.hyps == (("hello", "world"), ())
    assert u2.hyps == (("yes",),)
    # scores are negated into costs
    ac_scores = [float(x) for x in AC.split()]
    lm_scores = [float(x) for x in LM.split()]
    got_ac = [c for u in s.utterances for c in u.ac_cost]
    got_lm = [c for u in s.utterances for c in u.lm_cost]
    assert got_ac == [-x for x in ac_scores]
    assert got_lm == [-x for x in lm_scores]
    assert all(u.ac_cost.dtype == np.float64 and not u.graph_cost.any() for u in s.utterances)


def test_scores_are_costs_and_utt2doc(tmp_path):
    nb, ac, lm = write(tmp_path)
    s = read_plain_nbest(nb, ac, lm, scores_are_costs=True,
                         utt2doc={"0": "dA", "1": "dA", "2": "dB"}, log=lambda m: None)
    assert s.doc_source == "utt2doc" and s.documents() == [[0, 1], [2]]
    assert s.utterances[0].ac_cost.tolist() == [-100.5, -101.25, -99.0]
    with pytest.raises(DataError, match=r"utt2doc: no entry for 1 utterances.*: 2 \(1 in all\)"):
        read_plain_nbest(nb, ac, lm, utt2doc={"0": "d", "1": "d"}, log=lambda m: None)


def test_reappearing_index(tmp_path):
    nb, ac, lm = write(tmp_path, nbest="0 a <eos>\n1 b <eos>\n0 c <eos>\n",
                       ac="1\n2\n3\n", lm="1\n2\n3\n")
    with pytest.raises(DataError, match=rf"{nb}:3: utterance index 0 reappears"):
        read_plain_nbest(nb, ac, lm)


def test_non_integer_index(tmp_path):
    nb, ac, lm = write(tmp_path, nbest="0 a <eos>\nx b <eos>\n", ac="1\n2\n", lm="1\n2\n")
    with pytest.raises(DataError, match=rf"{nb}:2: utterance index 'x'"):
        read_plain_nbest(nb, ac, lm)


def test_count_mismatch(tmp_path):
    nb, ac, lm = write(tmp_path, lm="-1\n-2\n")
    with pytest.raises(DataError, match=rf"{lm} has 2 score lines but {nb} has 6 "
                                        r"hypothesis lines"):
        read_plain_nbest(nb, ac, lm)


def test_bad_score_values(tmp_path):
    nb, ac, lm = write(tmp_path, ac=AC.replace("-99", "oops"))
    with pytest.raises(DataError, match=rf"{ac}:3: acoustic score: 'oops' is not a decimal "
                                        r"number; expected a number such as -12.5"):
        read_plain_nbest(nb, ac, lm)
    nb, ac, lm = write(tmp_path, lm=LM.replace("-9", "inf"))
    with pytest.raises(DataError, match=rf"{lm}:5: n-gram score: 'inf' is not a decimal "
                                        r"number \(NaN and infinity are not allowed"):
        read_plain_nbest(nb, ac, lm)
    nb, ac, lm = write(tmp_path, lm=LM.replace("-9", "-9_0"))
    with pytest.raises(DataError, match=rf"{lm}:5: n-gram score: '-9_0' is not a decimal "
                                        r"number \('_' digit separators"):
        read_plain_nbest(nb, ac, lm)
    nb, ac, lm = write(tmp_path, ac=AC.replace("-99", "-99 1"))
    with pytest.raises(DataError, match=rf"{ac}:3: expected one number per line"):
        read_plain_nbest(nb, ac, lm, scores_are_costs=True)
