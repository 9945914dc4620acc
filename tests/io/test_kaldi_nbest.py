import shutil

import numpy as np
import pytest

from nbest_rescore.errors import DataError
from nbest_rescore.io import read_kaldi_nbest_dir, read_utt_map
from nbest_rescore.types import NbestSet


def naive_costs(path):
    out = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            key, value = line.split()
            out[key] = float(value)
    return out


def naive_text(path):
    out = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            parts = line.rstrip("\n").split(maxsplit=1)
            out[parts[0]] = tuple(parts[1].split()) if len(parts) > 1 else ()
    return out


@pytest.fixture(scope="module")
def ci(DATA):
    return DATA / "ci"


@pytest.fixture(scope="module")
def ci_set(ci):
    return read_kaldi_nbest_dir(ci, log=lambda m: None)


def copy_files(src, dst, names):
    dst.mkdir(exist_ok=True)
    for name in names:
        shutil.copy(src / name, dst / name)
    return dst


def test_ci_structure(ci, ci_set):
    assert isinstance(ci_set, NbestSet)
    assert len(ci_set) == 60
    with open(ci / "text", encoding="utf-8") as fh:
        n_lines = sum(1 for _ in fh)
    assert ci_set.num_hyps() == n_lines
    assert ci_set.doc_source == "utt2doc"
    assert ci_set.source == str(ci)
    utt2doc = dict(line.split() for line in open(ci / "utt2doc", encoding="utf-8"))
    assert ci_set.utt_ids == list(utt2doc)
    assert [u.doc_id for u in ci_set.utterances] == [utt2doc[u] for u in ci_set.utt_ids]
    assert len(ci_set.documents()) == len(set(utt2doc.values()))


def test_ci_hyps_and_costs_match_naive_parse(ci, ci_set):
    text = naive_text(ci / "text")
    ac = naive_costs(ci / "ac_cost")
    lm = naive_costs(ci / "lm_cost")
    keys = [k for u in ci_set.utterances for k in u.keys]
    assert keys == list(text)  # file order
    for u in ci_set.utterances:
        assert all(k.rsplit("-", 1)[0] == u.utt_id for k in u.keys)
        assert [int(k.rsplit("-", 1)[1]) for k in u.keys] == list(range(1, len(u) + 1))
        assert u.hyps == tuple(text[k] for k in u.keys)
        for name, ref in (("ac_cost", ac), ("lm_cost", lm)):
            arr = getattr(u, name)
            assert arr.dtype == np.float64
            assert arr.tolist() == [ref[k] for k in u.keys]
        assert u.graph_cost.dtype == np.float64 and not u.graph_cost.any()


def test_rank1_is_first_pass_argmax(ci_set):
    # README: first-pass score = -ac - 9.5 * lm - 0.629606 * nwords; rank 1 is its
    # argmax (ties keep rank order).
    for u in ci_set.utterances:
        scores = [-float(a) - 9.5 * float(l) - 0.629606 * len(h)
                  for a, l, h in zip(u.ac_cost, u.lm_cost, u.hyps)]
        assert scores[0] >= max(scores) - 1e-6, u.utt_id


def test_words_and_symbol_table_give_same_hyps(ci, ci_set, tmp_path):
    d = copy_files(ci, tmp_path / "nb", ["words", "words.txt", "ac_cost", "lm_cost", "utt2doc"])
    messages = []
    s = read_kaldi_nbest_dir(d, log=messages.append)
    assert [u.hyps for u in s.utterances] == [u.hyps for u in ci_set.utterances]
    assert [u.keys for u in s.utterances] == [u.keys for u in ci_set.utterances]
    assert len(messages) == 1 and "words words" in messages[0] and "utt2doc" in messages[0]


def test_rnnlmrescore_names(ci, ci_set, tmp_path):
    d = tmp_path / "nb"
    d.mkdir()
    shutil.copy(ci / "text", d / "words_text")
    shutil.copy(ci / "ac_cost", d / "acwt")
    lm = naive_costs(ci / "lm_cost")
    (d / "lmwt.nolm").write_text("".join(f"{k} 1.5\n" for k in lm))
    (d / "lmwt.withlm").write_text("".join(f"{k} {v + 1.5:.4f}\n" for k, v in lm.items()))
    messages = []
    s = read_kaldi_nbest_dir(d, log=messages.append)
    assert s.doc_source == "none" and len(s.documents()) == 60
    assert "one document per utterance" in messages[0]
    for u, ref in zip(s.utterances, ci_set.utterances):
        assert u.hyps == ref.hyps and u.doc_id == u.utt_id
        np.testing.assert_array_equal(u.ac_cost, ref.ac_cost)
        np.testing.assert_allclose(u.lm_cost, ref.lm_cost, rtol=0, atol=1e-4)
        assert (u.graph_cost == 1.5).all()
    # lmwt.lmonly takes precedence over withlm - nolm
    (d / "lmwt.lmonly").write_text("".join(f"{k} {v}\n" for k, v in lm.items()))
    s2 = read_kaldi_nbest_dir(d, log=lambda m: None)
    assert [u.lm_cost.tolist() for u in s2.utterances] == \
        [u.lm_cost.tolist() for u in ci_set.utterances]
    assert all((u.graph_cost == 1.5).all() for u in s2.utterances)


# ---------------------------------------------------------------- small synthetic dirs

def make_dir(tmp_path, text="u1-1 a b\nu1-2 a\nu2-1 c\n", ac=None, lm=None, extra=None):
    d = tmp_path / "nb"
    d.mkdir(exist_ok=True)
    if text is not None:
        (d / "text").write_text(text)
    keys = [line.split()[0] for line in (text or "").splitlines() if line.strip()]
    (d / "ac_cost").write_text(ac if ac is not None else "".join(f"{k} 10\n" for k in keys))
    (d / "lm_cost").write_text(lm if lm is not None else "".join(f"{k} 2.5\n" for k in keys))
    for name, content in (extra or {}).items():
        (d / name).write_text(content)
    return d


def read(d):
    return read_kaldi_nbest_dir(d, log=lambda m: None)


def test_small_dir_and_empty_hypothesis(tmp_path):
    d = make_dir(tmp_path, text="u1-1 a b\nu1-2\nu1-3 d\nu2-1 c\n")
    s = read(d)
    assert s.utt_ids == ["u1", "u2"]
    assert s.utterances[0].keys == ("u1-1", "u1-2", "u1-3")
    assert s.utterances[0].hyps == (("a", "b"), (), ("d",))
    assert s.utterances[0].num_words.tolist() == [2, 0, 1]
    assert s.utterances[0].ac_cost.tolist() == [10.0, 10.0, 10.0]


def test_hypotheses_of_an_utterance_on_non_consecutive_lines_are_an_error(tmp_path):
    """Issue 27: read whole, such a list used to be regrouped, but it cannot be read in
    lock-step (spans); one line names the file, the line, what was expected and a fix."""
    d = make_dir(tmp_path, text="u1-1 a b\nu1-2\nu2-1 c\nu1-3 d\n")
    with pytest.raises(DataError) as e:
        read(d)
    msg = str(e.value)
    assert msg.startswith(f"{d / 'text'}:4: hypothesis 'u1-3' of utterance 'u1' follows utterance 'u2'")
    assert "from line 1" in msg and "expected the hypotheses of an utterance on consecutive lines" in msg
    assert "fix: move all lines of 'u1' together" in msg and "\n" not in msg


def test_key_missing_from_ac_cost_is_listed(tmp_path):
    d = make_dir(tmp_path, ac="u1-1 1\nu2-1 1\nu9-1 1\n")
    with pytest.raises(DataError) as e:
        read(d)
    msg = str(e.value)
    assert "1 keys in text are missing from ac_cost: u1-2 (1 in all)" in msg
    assert "1 keys in ac_cost are missing from text: u9-1 (1 in all)" in msg


def test_many_missing_keys_are_summarised(tmp_path):
    text = "".join(f"u-{i} w\n" for i in range(1, 21))
    d = make_dir(tmp_path, text=text, lm="u-1 1\n")
    with pytest.raises(DataError, match=r"19 keys in text are missing from lm_cost: .* \.\.\. "
                                        r"\(19 in all\)"):
        read(d)


def test_bad_hypothesis_key_names_line(tmp_path):
    d = make_dir(tmp_path, text="u1-1 a\nfoo b\n")
    with pytest.raises(DataError, match=rf"{d / 'text'}:2: hypothesis key 'foo'"):
        read(d)
    d = make_dir(tmp_path, text="u1-1 a\nu1-0 b\n")
    with pytest.raises(DataError, match=rf"{d / 'text'}:2: .*'u1-0'"):
        read(d)


def test_malformed_and_nan_costs(tmp_path):
    d = make_dir(tmp_path, ac="u1-1 1\nu1-2 abc\nu2-1 1\n")
    with pytest.raises(DataError, match=rf"{d / 'ac_cost'}:2: key 'u1-2'"):
        read(d)
    d = make_dir(tmp_path, lm="u1-1 1\nu1-2 1\nu2-1 nan\n")
    with pytest.raises(DataError, match=rf"{d / 'lm_cost'}:3: key 'u2-1': 'nan' is not a "
                                        r"decimal number \(NaN and infinity"):
        read(d)


def test_missing_files_list_names(tmp_path):
    d = make_dir(tmp_path)
    (d / "text").unlink()
    with pytest.raises(DataError, match=r"looked for 'text', 'words_text', and 'words' \+ "):
        read(d)
    d = make_dir(tmp_path)
    (d / "ac_cost").unlink()
    with pytest.raises(DataError, match=r"looked for 'ac_cost', 'acwt'"):
        read(d)
    d = make_dir(tmp_path)
    (d / "lm_cost").unlink()
    (d / "lmwt.withlm").write_text("u1-1 1\nu1-2 1\nu2-1 1\n")
    with pytest.raises(DataError, match=r"'lm_cost', 'lmwt.lmonly', and 'lmwt.withlm' \+ "
                                        r"'lmwt.nolm'"):
        read(d)
    with pytest.raises(DataError, match="not found"):
        read(tmp_path / "nothing")


def test_unknown_word_id(tmp_path):
    d = make_dir(tmp_path, text=None, ac="u-1 1\nu-2 1\n", lm="u-1 1\nu-2 1\n",
                 extra={"words": "u-1 1 2\nu-2 \n", "words.txt": "<eps> 0\na 1\nb 2\n"})
    assert read(d).utterances[0].hyps == (("a", "b"), ())
    (d / "words").write_text("u-1 1 2\nu-2 7\n")
    with pytest.raises(DataError, match=rf"{d / 'words'}:2: key 'u-2': word id 7 is not in"):
        read(d)


def test_document_sources(tmp_path):
    d = make_dir(tmp_path, extra={"utt2spk": "u1 s1\nu2 s1\n"})
    s = read(d)
    assert s.doc_source == "utt2spk" and s.documents() == [[0, 1]]
    (d / "utt2doc").write_text("u1 d1\nu2 d2\n")
    s = read(d)
    assert s.doc_source == "utt2doc" and [u.doc_id for u in s.utterances] == ["d1", "d2"]
    (d / "utt2doc").write_text("u1 d1\n")
    with pytest.raises(DataError, match=r"utt2doc: 1 utterances of text have no entry: u2"):
        read(d)


def test_default_log_uses_logging(tmp_path, caplog):
    d = make_dir(tmp_path)
    with caplog.at_level("INFO", logger="nbest_rescore.io.kaldi_nbest"):
        read_kaldi_nbest_dir(d)
    assert "one document per utterance" in caplog.text


def test_read_utt_map_errors(tmp_path):
    p = tmp_path / "utt2doc"
    p.write_text("u1 d1\nu2 d2 extra\n")
    with pytest.raises(DataError, match=rf"{p}:2: expected 2 fields"):
        read_utt_map(p)
    p.write_text("u1 d1\nu1 d2\n")
    with pytest.raises(DataError, match=rf"{p}:2: duplicate utterance id 'u1'"):
        read_utt_map(p)
    p.write_text("u1 d1\nu2 d2\n")
    assert read_utt_map(p) == {"u1": "d1", "u2": "d2"}
