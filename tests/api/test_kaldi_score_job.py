"""The kaldi-score job (nbest_rescore.api.KaldiScoreJob): what it writes into a decode
folder that holds other files, and bad options or input as one clear error with
nothing written."""
import os
import shutil

import pytest

import nbest_rescore as nr
from nbest_rescore.api import KaldiScoreJob, KaldiScoreResult
from nbest_rescore.errors import DataError


@pytest.fixture
def archive(DATA, tmp_path):
    """ci as one archive folder: words_text, acwt and lmwt.interp (= the n-gram cost)."""
    d = tmp_path / "archives.1"
    d.mkdir()
    shutil.copyfile(DATA / "ci" / "text", d / "words_text")
    shutil.copyfile(DATA / "ci" / "ac_cost", d / "acwt")
    shutil.copyfile(DATA / "ci" / "lm_cost", d / "lmwt.interp")
    return d


def job(DATA, archive, out, **kw):
    args = {"ref": str(DATA / "ci" / "ref.txt"), "lm_cost": "lmwt.interp", "nbest_dirs": (str(archive),),
            "out": str(out), "min_lmwt": 9, "max_lmwt": 10, **kw}
    return KaldiScoreJob(**args)


def test_exported_like_the_other_jobs():
    assert nr.KaldiScoreJob is KaldiScoreJob and nr.KaldiScoreResult is KaldiScoreResult
    assert "KaldiScoreJob" in nr.api.__all__


def test_writes_its_set_into_a_decode_folder_and_leaves_other_files(DATA, archive, tmp_path):
    out = tmp_path / "decode"
    (out / "scoring_kaldi" / "penalty_2.0").mkdir(parents=True)  # a previous run's: replaced as a whole
    (out / "scoring_kaldi" / "log").mkdir()
    for name in ("lat.1.gz", "wer_9_2.0", "wer_ab_c", "wer_7", "wer_17", "cer_10", "num_jobs"):
        (out / name).write_text("old\n")
    res = job(DATA, archive, out, word_ins_penalty="0.0, 1.5").run()
    # score_kaldi.sh's old-style wer_{?,??} / cer_{?,??} are removed, everything else kept
    assert sorted(os.path.basename(p) for p in res.removed) == ["cer_10", "wer_17", "wer_7"]
    assert sorted(os.listdir(out)) == ["lat.1.gz", "num_jobs", "scoring_kaldi", "wer_10_0.0", "wer_10_1.5",
                                       "wer_9_0.0", "wer_9_1.5", "wer_9_2.0", "wer_ab_c"]
    assert (out / "wer_9_2.0").read_text() == "old\n"
    assert sorted(os.listdir(out / "scoring_kaldi")) == ["best_wer", "penalty_0.0", "penalty_1.5", "test_filt.txt",
                                                         "wer_details"]
    assert sorted(os.listdir(out / "scoring_kaldi" / "penalty_1.5")) == ["10.txt", "9.txt"]
    assert res.best_wer_line.startswith("%WER ") and res.best_wer_line.endswith(res.best.wer_file)
    # a second run replaces the set
    res2 = job(DATA, archive, out, word_ins_penalty="0.5").run()
    assert sorted(os.listdir(out / "scoring_kaldi")) == ["best_wer", "penalty_0.5", "test_filt.txt", "wer_details"]
    assert res2.removed == () and (out / "wer_10_1.5").exists()


def test_the_lists_of_several_folders_are_concatenated(DATA, archive, tmp_path):
    one = job(DATA, archive, tmp_path / "one").run()
    # the same utterances in two folders, first half and second half
    parts = [tmp_path / "archives.a", tmp_path / "archives.b"]
    lines = {n: (archive / n).read_text().splitlines(keepends=True) for n in ("words_text", "acwt", "lmwt.interp")}
    utts = list(dict.fromkeys(line.split()[0].rsplit("-", 1)[0] for line in lines["words_text"]))
    for k, part in enumerate(parts):
        part.mkdir()
        for name, content in lines.items():
            keep = [x for x in content if (utts.index(x.split()[0].rsplit("-", 1)[0]) < 20) == (k == 0)]
            (part / name).write_text("".join(keep))
    two = job(DATA, archive, tmp_path / "two", nbest_dirs=tuple(map(str, parts))).run()
    assert [p.wer for p in one.points] == [p.wer for p in two.points]
    assert (tmp_path / "one" / "scoring_kaldi" / "penalty_0.5" / "9.txt").read_bytes() == \
        (tmp_path / "two" / "scoring_kaldi" / "penalty_0.5" / "9.txt").read_bytes()
    with pytest.raises(DataError, match=r"60 utterances are in both .*archives.1 and .*archives.1"):
        job(DATA, archive, tmp_path / "three", nbest_dirs=(str(archive), str(archive))).run()
    assert not (tmp_path / "three").exists()


@pytest.mark.parametrize("kw,words", [
    ({"min_lmwt": 12, "max_lmwt": 11}, ["--min-lmwt 12", "--max-lmwt 11"]),
    ({"min_lmwt": 0}, ["--min-lmwt", "integer >= 1"]),
    ({"max_lmwt": 9.5}, ["--max-lmwt", "integer >= 1", "9.5"]),
    ({"word_ins_penalty": "0.0,abc"}, ["--word-ins-penalty", "'abc'", "e.g. --word-ins-penalty 0.0,0.5,1.0"]),
    ({"word_ins_penalty": "nan"}, ["--word-ins-penalty", "'nan'"]),
    ({"word_ins_penalty": "0.5,0.5"}, ["--word-ins-penalty", "0.5 given twice"]),
    ({"word_ins_penalty": ""}, ["--word-ins-penalty", "no values"]),
    ({"lm_cost": "no_such_file"}, ["--lm-cost no_such_file", "archives.1/no_such_file not found"]),
    ({"lm_cost": "a/b"}, ["--lm-cost 'a/b'", "file name inside each NBEST_DIR"]),
    ({"ref": "/no/such/ref"}, ["--ref /no/such/ref", "no such file"]),
    ({"hyp_filter": " "}, ["--hyp-filter", "empty"]),
])
def test_bad_options_are_found_before_reading(kw, words, DATA, archive, tmp_path):
    with pytest.raises(DataError) as err:
        job(DATA, archive, tmp_path / "out", **kw)
    for w in words:
        assert w in str(err.value), (w, str(err.value))
    assert not (tmp_path / "out").exists()


def test_bad_input_is_one_clear_error_and_writes_nothing(DATA, archive, tmp_path):
    out = tmp_path / "out"
    lines = (archive / "lmwt.interp").read_text().splitlines(keepends=True)
    missing_key = lines[5].split()[0]
    (archive / "lmwt.interp").write_text("".join(lines[:5] + lines[6:]))
    with pytest.raises(DataError, match=rf"archives.1.*words_text and lmwt.interp.*missing from lmwt.interp: "
                                        rf"{missing_key}"):
        job(DATA, archive, out).run()
    (archive / "lmwt.interp").write_text("".join(lines))
    with pytest.raises(DataError, match=r"--hyp-filter 'exit 3' failed on the 1-best at LMWT 9, WIP 0.0 with "
                                        r"exit status 3"):
        job(DATA, archive, out, hyp_filter="exit 3").run()
    with pytest.raises(DataError, match=r"--ref-filter 'echo oops >&2; false' failed .* exit status 1: oops"):
        job(DATA, archive, out, ref_filter="echo oops >&2; false").run()
    with pytest.raises(DataError, match=r"out/scoring_kaldi/test_filt.txt:1: blank line.*--ref-filter"):
        job(DATA, archive, out, ref_filter="sed 's/.*//'").run()
    other = tmp_path / "other_ref.txt"
    other.write_text("x1 a b\nx2 c\n")
    with pytest.raises(DataError, match=r"none of its 2 utterances has a hypothesis"):
        job(DATA, archive, out, ref=str(other)).run()
    assert not out.exists()
    assert [p for p in os.listdir(tmp_path) if p != "archives.1" and p != "other_ref.txt"] == []
