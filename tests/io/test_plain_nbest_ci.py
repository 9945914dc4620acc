"""The plain N-best format (thesis Fig. 5.1) on lists built from the benchmark's ``ci/``.

Expectations come from a naive parse of the ci files (``str.split``), not from the
readers under test, and from :func:`read_kaldi_nbest_dir` on the same data.
"""
import logging
import shutil

import numpy as np
import pytest

from nbest_rescore.errors import DataError
from nbest_rescore.io import read_kaldi_nbest_dir, read_references
from nbest_rescore.io.plain_nbest import find_plain_score_files, read_plain_nbest


def naive_ci(ci):
    """``[(utt, [(key, words, ac_token, lm_token), ...]), ...]`` in text order, and utt2doc."""
    ac = dict(line.split() for line in open(ci / "ac_cost", encoding="utf-8"))
    lm = dict(line.split() for line in open(ci / "lm_cost", encoding="utf-8"))
    utts = []
    for line in open(ci / "text", encoding="utf-8"):
        key, *words = line.split()
        utt = key.rsplit("-", 1)[0]
        if not utts or utts[-1][0] != utt:
            utts.append((utt, []))
        utts[-1][1].append((key, tuple(words), ac[key], lm[key]))
    utt2doc = dict(line.split() for line in open(ci / "utt2doc", encoding="utf-8"))
    return utts, utt2doc


def write_plain(ci, d, name="ci.txt", costs=False, ac_name=None, ngram_name=None):
    """Write ci as a plain list ``d/name`` (index = position of the utterance) with
    ``d/<stem>.ac`` / ``.ngram`` holding scores (the cost text with its sign flipped) or
    costs; also ``d/utt_ids`` and ``d/utt2doc`` (keyed by index). Returns the paths."""
    utts, utt2doc = naive_ci(ci)
    stem = name.rsplit(".", 1)[0]
    nb, ac, ng = d / name, d / (ac_name or f"{stem}.ac"), d / (ngram_name or f"{stem}.ngram")

    def flip(tok):
        return tok if costs else (tok[1:] if tok.startswith("-") else "-" + tok)

    with open(nb, "w") as f, open(ac, "w") as fa, open(ng, "w") as fn:
        for i, (_, hyps) in enumerate(utts):
            for _, words, a, l in hyps:
                f.write(" ".join((str(i),) + words + ("<eos>",)) + "\n")
                fa.write(flip(a) + "\n")
                fn.write(flip(l) + "\n")
    (d / "utt_ids").write_text("".join(f"{i} {u}\n" for i, (u, _) in enumerate(utts)))
    (d / "utt2doc.idx").write_text("".join(f"{i} {utt2doc[u]}\n" for i, (u, _) in enumerate(utts)))
    return nb, ac, ng


def quiet(msg):
    pass


@pytest.fixture(scope="module")
def ci(DATA):
    return DATA / "ci"


@pytest.fixture(scope="module")
def kaldi(ci):
    return read_kaldi_nbest_dir(ci, log=quiet)


@pytest.mark.parametrize("costs", [False, True])
def test_ci_plain_reads_like_kaldi_dir(ci, kaldi, tmp_path, costs):
    nb, ac, ng = write_plain(ci, tmp_path, costs=costs)
    s = read_plain_nbest(nb, ac, ng, scores_are_costs=costs, utt_ids=tmp_path / "utt_ids",
                         utt2doc=ci / "utt2doc", log=quiet)
    utts, utt2doc = naive_ci(ci)
    assert s.utt_ids == [u for u, _ in utts] == kaldi.utt_ids
    assert s.doc_source == "utt2doc"
    assert s.documents() == kaldi.documents() and len(s.documents()) == 8
    for got, ref, (utt, hyps) in zip(s.utterances, kaldi.utterances, utts):
        assert got.doc_id == utt2doc[utt] == ref.doc_id
        assert got.keys == ref.keys == tuple(k for k, *_ in hyps)  # "<utt-id>-<n>"
        assert got.hyps == ref.hyps == tuple(w for _, w, _, _ in hyps)
        assert got.ac_cost.tolist() == ref.ac_cost.tolist() == [float(a) for *_, a, _ in hyps]
        assert got.lm_cost.tolist() == ref.lm_cost.tolist() == [float(l) for *_, l in hyps]
        assert got.ac_cost.dtype == np.float64 and not got.graph_cost.any()


def test_ci_plain_without_maps_is_one_document_keyed_by_index(ci, kaldi, tmp_path):
    nb, ac, ng = write_plain(ci, tmp_path)
    messages = []
    s = read_plain_nbest(nb, ac, ng, log=messages.append)
    assert s.utt_ids == [str(i) for i in range(60)]
    assert s.doc_source == "file" and s.documents() == [list(range(60))]
    assert s.utterances[0].doc_id == "ci.txt"
    assert s.utterances[7].keys[:2] == ("7-1", "7-2")
    assert [u.hyps for u in s.utterances] == [u.hyps for u in kaldi.utterances]
    assert "utterance id = index" in messages[-1] and "one document" in messages[-1]
    # utt2doc keyed by index gives the same documents as ci/utt2doc
    s2 = read_plain_nbest(nb, ac, ng, utt2doc=tmp_path / "utt2doc.idx", log=quiet)
    assert s2.doc_source == "utt2doc" and s2.documents() == kaldi.documents()
    assert [u.doc_id for u in s2.utterances] == [u.doc_id for u in kaldi.utterances]


def test_ci_plain_utt_ids_match_references(ci, tmp_path):
    nb, ac, ng = write_plain(ci, tmp_path)
    s = read_plain_nbest(nb, ac, ng, utt_ids=tmp_path / "utt_ids", log=quiet)
    refs = read_references(ci / "ref.txt")
    assert s.utt_ids == list(refs)  # ci's text and ref.txt share the utterance order
    # utt2doc may be keyed by index even when utt_ids are given
    s2 = read_plain_nbest(nb, ac, ng, utt_ids=tmp_path / "utt_ids",
                          utt2doc=tmp_path / "utt2doc.idx", log=quiet)
    assert [u.doc_id for u in s2.utterances] == [u.split("-")[0] for u in refs]
    # extra entries for other indices are allowed, and said in the log line
    with open(tmp_path / "utt_ids", "a") as f:
        f.write("60 spare-utt\n")
    messages = []
    read_plain_nbest(nb, ac, ng, utt_ids=tmp_path / "utt_ids", log=messages.append)
    assert "1 entries for other indices unused" in messages[-1]


def test_ci_plain_utt_ids_errors(ci, tmp_path):
    nb, ac, ng = write_plain(ci, tmp_path)
    lines = (tmp_path / "utt_ids").read_text().splitlines(keepends=True)
    bad = tmp_path / "bad_ids"
    bad.write_text("".join(lines[:5] + lines[6:]))
    with pytest.raises(DataError, match=rf"{bad}: 1 utterance indices of {nb} have no "
                                        r"utterance id: 5 \(1 in all\); add a line"):
        read_plain_nbest(nb, ac, ng, utt_ids=bad)
    bad.write_text("".join(lines[:8] + ["3 again\n"] + lines[8:]))
    with pytest.raises(DataError, match=rf"{bad}:9: utterance index 3 is listed twice "
                                        r"\(first on line 4\)"):
        read_plain_nbest(nb, ac, ng, utt_ids=bad)
    bad.write_text("".join(lines[:8] + [f"70 {lines[2].split()[1]}\n"] + lines[8:]))
    with pytest.raises(DataError, match=rf"{bad}:9: utterance id 'abcr0004-002' is given "
                                        r"to index 70 and to index 2 \(line 3\)"):
        read_plain_nbest(nb, ac, ng, utt_ids=bad)
    bad.write_text("".join(lines[:1] + ["x1 foo\n"] + lines[1:]))
    with pytest.raises(DataError, match=rf"{bad}:2: utterance index 'x1' is not a "
                                        r"non-negative integer"):
        read_plain_nbest(nb, ac, ng, utt_ids=bad)
    bad.write_text("".join(lines[:3] + ["3\n"]))
    with pytest.raises(DataError, match=rf"{bad}:4: expected 2 fields"):
        read_plain_nbest(nb, ac, ng, utt_ids=bad)


# ------------------------------------------------------------ score file naming

def costs_of(nbest_set, name):
    return [getattr(u, name).tolist() for u in nbest_set.utterances]


def test_score_files_found_by_name(ci, kaldi, tmp_path):
    nb, ac, ng = write_plain(ci, tmp_path, name="dev17a.txt")
    assert (ac.name, ng.name) == ("dev17a.ac", "dev17a.ngram")
    assert find_plain_score_files(nb) == (str(ac), str(ng))
    messages = []
    s = read_plain_nbest(nb, log=messages.append)
    assert "found by name: ac, ngram" in messages[-1]
    assert costs_of(s, "ac_cost") == costs_of(kaldi, "ac_cost")
    # second choice: NAME.EXT.ac / NAME.EXT.ngram
    d2 = tmp_path / "long"
    d2.mkdir()
    nb2, ac2, ng2 = write_plain(ci, d2, name="dev17a.txt", ac_name="dev17a.txt.ac",
                                ngram_name="dev17a.txt.ngram")
    assert find_plain_score_files(nb2) == (str(ac2), str(ng2))
    s2 = read_plain_nbest(nb2, log=quiet)
    assert costs_of(s2, "lm_cost") == costs_of(kaldi, "lm_cost")
    # NAME.ac wins over NAME.EXT.ac; one path given, the other found by name
    shutil.copy(ac, d2 / "dev17a.ac")
    assert find_plain_score_files(nb2) == (str(d2 / "dev17a.ac"), str(ng2))
    s3 = read_plain_nbest(nb2, ac2, log=quiet)
    assert costs_of(s3, "lm_cost") == costs_of(kaldi, "lm_cost")
    # a list without an extension
    d3 = tmp_path / "noext"
    d3.mkdir()
    nb3, ac3, ng3 = write_plain(ci, d3, name="nbest")
    assert find_plain_score_files(nb3) == (str(d3 / "nbest.ac"), str(d3 / "nbest.ngram"))


def test_missing_score_file_lists_names_tried(ci, tmp_path):
    nb, ac, ng = write_plain(ci, tmp_path, name="dev17a.txt")
    ng.unlink()
    names = rf"'{tmp_path}/dev17a.ngram', '{tmp_path}/dev17a.txt.ngram'"
    with pytest.raises(DataError, match=rf"{nb}: no score file beside the plain N-best list "
                                        rf"\(n-gram scores: looked for {names}\); .*--plain-ngram"):
        find_plain_score_files(nb)
    with pytest.raises(DataError, match=rf"looked for {names}"):
        read_plain_nbest(nb)
    ac.unlink()
    with pytest.raises(DataError, match=r"acoustic scores: looked for .*dev17a.ac.*; n-gram"):
        find_plain_score_files(nb)
    with pytest.raises(DataError, match=r"plain N-best file not found"):
        find_plain_score_files(tmp_path / "nothing.txt")


# ------------------------------------------------------------ strict numbers, documents

def test_ci_plain_underscore_score_names_line(ci, tmp_path):
    nb, ac, ng = write_plain(ci, tmp_path)
    lines = ac.read_text().splitlines(keepends=True)
    lines[122] = "-1_000.5\n"
    ac.write_text("".join(lines))
    with pytest.raises(DataError, match=rf"{ac}:123: acoustic score: '-1_000.5' is not a "
                                        r"decimal number .*such as -12.5, 3, 1e-3"):
        read_plain_nbest(nb, ac, ng)


def test_ci_plain_non_contiguous_utt2doc(ci, tmp_path):
    nb, ac, ng = write_plain(ci, tmp_path)
    utts, _ = naive_ci(ci)
    # utterance 3 (document abcr0004, whose utterances are 0-6) moved to abcr0062
    lines = (tmp_path / "utt2doc.idx").read_text().splitlines(keepends=True)
    assert lines[3] == "3 abcr0004\n" and lines[7] == "7 abcr0062\n"
    lines[3] = "3 abcr0062\n"
    bad = tmp_path / "utt2doc.bad"
    bad.write_text("".join(lines))
    first_line_of_4 = 1 + sum(len(h) for _, h in utts[:4])
    with pytest.raises(DataError, match=rf"{bad}:5: document 'abcr0004' reappears at "
                                        rf"utterance '4' \({nb}:{first_line_of_4}\) after "
                                        r"utterances of document 'abcr0062'.*fix: reorder"):
        read_plain_nbest(nb, ac, ng, utt2doc=bad)


def test_wrong_kind_of_numbers_warns(ci, tmp_path, caplog):
    utts, _ = naive_ci(ci)
    ac_tokens = [a for _, h in utts for *_, a, _ in h]
    frac_pos = sum(float(a) > 0 for a in ac_tokens) / len(ac_tokens)
    assert frac_pos > 0.5  # ci's acoustic costs are positive
    # costs written where scores are expected
    nb, ac, ng = write_plain(ci, tmp_path, costs=True)
    messages = []
    with caplog.at_level(logging.WARNING, logger="nbest_rescore.io.plain_nbest"):
        read_plain_nbest(nb, ac, ng, log=messages.append)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    expect = f"{ac}: {frac_pos:.1%} of the 6000 acoustic values are > 0, which looks like costs"
    assert any(m.startswith(expect) and "--plain-costs" in m for m in warned), warned
    assert any(m.startswith(f"{ng}: ") for m in warned)
    assert any(m.startswith("warning: " + expect) for m in messages)
    # scores read as costs
    caplog.clear()
    nb, ac, ng = write_plain(ci, tmp_path, costs=False)
    with caplog.at_level(logging.WARNING, logger="nbest_rescore.io.plain_nbest"):
        read_plain_nbest(nb, ac, ng, scores_are_costs=True, log=quiet)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(m.startswith(f"{ac}: {frac_pos:.1%} of the 6000 acoustic values are < 0, "
                            f"which looks like natural-log scores") and "drop --plain-costs" in m
               for m in warned), warned
    # the right kind: no warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="nbest_rescore.io.plain_nbest"):
        read_plain_nbest(nb, ac, ng, log=quiet)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
