"""Strict numbers, byte-order marks and document order, on copies of the benchmark's ``ci/``.

Expected values come from naive parses of the original ci files (``str.split``) or
from reading the unmodified copy; line numbers are found by searching the file text.
"""
import re
import shutil

import pytest

from nbest_rescore.errors import DataError
from nbest_rescore.io import (read_cost_ark, read_kaldi_nbest_dir, read_kaldi_text,
                              read_lm_text, read_references, read_utt_map)
from nbest_rescore.io._common import parse_cost

BOM = "\ufeff"


def quiet(msg):
    pass


@pytest.fixture
def ci_copy(DATA, tmp_path):
    d = tmp_path / "ci"
    d.mkdir()
    for name in ("text", "ac_cost", "lm_cost", "utt2doc", "ref.txt"):
        shutil.copy(DATA / "ci" / name, d / name)
    return d


def lines_of(path):
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def same_sets(a, b):
    assert a.utt_ids == b.utt_ids and a.documents() == b.documents()
    assert a.doc_source == b.doc_source
    for x, y in zip(a.utterances, b.utterances):
        assert (x.doc_id, x.keys, x.hyps) == (y.doc_id, y.keys, y.hyps)
        assert x.ac_cost.tolist() == y.ac_cost.tolist()
        assert x.lm_cost.tolist() == y.lm_cost.tolist()


# ---------------------------------------------------------------- strict numbers

@pytest.mark.parametrize("token", ["-12.5", "3", "1e-3", "1.5E+02", "+7", ".5", "5.", "-0",
                                   "922.9875", "1e-400"])
def test_parse_cost_accepts_decimals(token):
    assert parse_cost(token, "f:1", "x") == float(token)


@pytest.mark.parametrize("token, why", [
    ("1_000", r"\('_' digit separators are not allowed\)"),
    (" nan", r"\(NaN and infinity are not allowed: a cost must be finite\)"),
    ("nan", r"\(NaN and infinity are not allowed: a cost must be finite\)"),
    ("-inf", r"\(NaN and infinity are not allowed: a cost must be finite\)"),
    ("infinity", r"\(NaN and infinity are not allowed: a cost must be finite\)"),
    ("0x1p3", r"\(hexadecimal is not allowed\)"),
    ("", r"\(the field is empty\)"),
    ("\u0663", r"\(only ASCII digits are allowed\)"),
    ("1.2.3", ""),
    ("e5", ""),
    ("1e", ""),
])
def test_parse_cost_rejects(token, why):
    tok = re.escape(repr(token))
    with pytest.raises(DataError, match=rf"^f:7: key 'u-1': {tok} is not a decimal "
                                        rf"number ?{why}; expected a number such as "
                                        r"-12\.5, 3, 1e-3 or 1\.5E\+02$"):
        parse_cost(token, "f:7", "key 'u-1'")
    with pytest.raises(DataError, match=r"outside the float64 range"):
        parse_cost("1e999", "f:7", "key 'u-1'")


@pytest.mark.parametrize("name, bad", [("ac_cost", "1_000"), ("lm_cost", "nan"),
                                       ("ac_cost", "inf"), ("lm_cost", "0x10")])
def test_ci_bad_number_names_file_line_key(ci_copy, name, bad):
    lines = lines_of(ci_copy / name)
    key = lines[1234].split()[0]
    lines[1234] = f"{key} {bad}\n"
    (ci_copy / name).write_text("".join(lines))
    with pytest.raises(DataError, match=rf"^{ci_copy / name}:1235: key '{key}': '{bad}' is "
                                        r"not a decimal number.*such as -12\.5"):
        read_kaldi_nbest_dir(ci_copy, log=quiet)


def test_ci_lmwt_files_are_strict(ci_copy):
    lm = dict(line.split() for line in lines_of(ci_copy / "lm_cost"))
    (ci_copy / "lm_cost").unlink()
    keys = list(lm)
    (ci_copy / "lmwt.nolm").write_text("".join(f"{k} 0\n" for k in keys))
    withlm = [f"{k} {v}\n" for k, v in lm.items()]
    withlm[9] = f"{keys[9]} 4_9.5\n"
    (ci_copy / "lmwt.withlm").write_text("".join(withlm))
    with pytest.raises(DataError, match=rf"{ci_copy / 'lmwt.withlm'}:10: key '{keys[9]}': "
                                        r"'4_9.5' is not a decimal number \('_'"):
        read_kaldi_nbest_dir(ci_copy, log=quiet)


def test_ci_word_ids_are_strict(DATA, tmp_path):
    d = tmp_path / "ci"
    d.mkdir()
    for name in ("words", "words.txt", "ac_cost", "lm_cost"):
        shutil.copy(DATA / "ci" / name, d / name)
    lines = lines_of(d / "words")
    key, first, *rest = lines[4].split()
    lines[4] = " ".join([key, "0_" + first] + rest) + "\n"  # int() would accept it
    (d / "words").write_text("".join(lines))
    with pytest.raises(DataError, match=rf"{d / 'words'}:5: key '{key}': word id "
                                        rf"'0_{first}' is not a non-negative integer"):
        read_kaldi_nbest_dir(d, log=quiet)


# ---------------------------------------------------------------- byte-order marks

def add_bom(path):
    path.write_bytes(BOM.encode("utf-8") + path.read_bytes())


def test_ci_files_with_bom_read_like_the_originals(DATA, ci_copy):
    ci = DATA / "ci"
    for name in ("text", "ac_cost", "lm_cost", "utt2doc", "ref.txt"):
        add_bom(ci_copy / name)
        assert (ci_copy / name).read_bytes()[:3] == b"\xef\xbb\xbf"
    assert read_kaldi_text(ci_copy / "text") == read_kaldi_text(ci / "text")
    assert list(read_kaldi_text(ci_copy / "text"))[0] == lines_of(ci / "text")[0].split()[0]
    expected_docs = dict(line.split() for line in lines_of(ci / "utt2doc"))
    assert read_utt_map(ci_copy / "utt2doc") == expected_docs
    assert read_references(ci_copy / "ref.txt") == read_references(ci / "ref.txt")
    assert read_cost_ark(ci_copy / "ac_cost") == {
        k: float(v) for k, v in (line.split() for line in lines_of(ci / "ac_cost"))}
    same_sets(read_kaldi_nbest_dir(ci_copy, log=quiet), read_kaldi_nbest_dir(ci, log=quiet))


def test_lm_text_with_bom(tmp_path):
    p = tmp_path / "lm.txt"
    p.write_text(BOM + "the cat\n\nsat down\n", encoding="utf-8")
    assert read_lm_text(p) == [[("the", "cat")], [("sat", "down")]]


@pytest.mark.parametrize("name, char, desc", [
    ("text", BOM, "U+FEFF byte-order mark"),
    ("utt2doc", BOM, "U+FEFF byte-order mark"),
    ("ref.txt", "\u200b", "U+200B zero-width space"),
    ("ac_cost", BOM, "U+FEFF byte-order mark"),
])
def test_ci_invisible_char_inside_key_names_line(ci_copy, name, char, desc):
    # e.g. two files concatenated, the second one starting with a BOM
    lines = lines_of(ci_copy / name)
    lines[20] = char + lines[20]
    (ci_copy / name).write_text("".join(lines), encoding="utf-8")
    readers = {"text": read_kaldi_text, "utt2doc": read_utt_map, "ref.txt": read_references,
               "ac_cost": read_cost_ark}
    with pytest.raises(DataError, match=rf"^{ci_copy / name}:21: .*contains an invisible "
                                        rf"{re.escape(desc)} at character 1"):
        readers[name](ci_copy / name)


# ---------------------------------------------------------------- document order

def test_ci_document_reappearing_in_text_order(ci_copy):
    # move the hypotheses of abcr0004-003 (document abcr0004) to the end of text
    lines = lines_of(ci_copy / "text")
    moved = [line for line in lines if line.startswith("abcr0004-003-")]
    rest = [line for line in lines if not line.startswith("abcr0004-003-")]
    assert len(moved) == 100
    (ci_copy / "text").write_text("".join(rest + moved))
    doc_line = 1 + [line.split()[0] for line in lines_of(ci_copy / "utt2doc")].index("abcr0004-003")
    prev_utt = rest[-1].split()[0].rsplit("-", 1)[0]
    with pytest.raises(DataError, match=rf"^{ci_copy / 'utt2doc'}:{doc_line}: document "
                                        rf"'abcr0004' reappears at utterance 'abcr0004-003' "
                                        rf"\({ci_copy / 'text'}:{len(rest) + 1}\) after "
                                        rf"utterances of document 'abcr0298' \(last one "
                                        rf"'{prev_utt}'\).*fix: reorder"):
        read_kaldi_nbest_dir(ci_copy, log=quiet)


def test_ci_document_reappearing_in_utt2doc(ci_copy):
    lines = lines_of(ci_copy / "utt2doc")
    # line 31 (an utterance in the middle of abcr0174) is put back into abcr0004
    assert lines[29].split()[1] == lines[30].split()[1] == "abcr0174"
    utt, prev = lines[30].split()[0], lines[29].split()[0]
    lines[30] = utt + " abcr0004\n"
    (ci_copy / "utt2doc").write_text("".join(lines))
    with pytest.raises(DataError, match=rf"^{ci_copy / 'utt2doc'}:31: document 'abcr0004' "
                                        rf"reappears at utterance '{utt}' .* after utterances "
                                        rf"of document 'abcr0174' \(last one '{prev}'\)"):
        read_kaldi_nbest_dir(ci_copy, log=quiet)
    # the same map as utt2spk (used for grouping when there is no utt2doc)
    (ci_copy / "utt2doc").rename(ci_copy / "utt2spk")
    with pytest.raises(DataError, match=rf"^{ci_copy / 'utt2spk'}:31: document 'abcr0004' "
                                        r"reappears"):
        read_kaldi_nbest_dir(ci_copy, log=quiet)
