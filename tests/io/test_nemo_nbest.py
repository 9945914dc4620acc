"""NeMo beams files with their manifest (nbest_rescore.io.nemo_nbest): the ci lists
written as NeMo's beam search writes them read back with the manifest's ids and order,
the scores equal to those in the file (a naive parse) as negated costs; the span source
gives the same lists; bad input is refused in one line naming the file and line."""
import json

import numpy as np
import pytest

from decoder_outputs import first_pass_totals, write_nemo
from nbest_rescore.errors import DataError
from nbest_rescore.io.nemo_nbest import is_nemo_beams, open_nemo_nbest, read_manifest, read_nemo_nbest
from nbest_rescore.io.references import read_references


def quiet(msg):
    pass


@pytest.fixture(scope="module")
def ci_nemo(ci_nbest, DATA, tmp_path_factory):
    refs = read_references(DATA / "ci" / "ref.txt")
    return write_nemo(ci_nbest, tmp_path_factory.mktemp("nemo"), refs)


def test_ci_beams_read_back_with_the_manifest_ids_words_and_scores(ci_nbest, ci_nemo):
    beams, manifest = ci_nemo
    got = read_nemo_nbest(beams, manifest, log=quiet)
    assert got.total_scores and got.doc_source == "none"
    assert got.utt_ids == ci_nbest.utt_ids
    lines = [line.rstrip("\n").split("\t") for line in open(beams, encoding="utf-8")]
    flat = got.flat()
    assert [" ".join(h) for h in flat.hyps] == [text for text, _ in lines]
    np.testing.assert_array_equal(flat.ac_cost, [-float(score) for _, score in lines])  # exactly the file's numbers
    assert not flat.lm_cost.any() and not flat.graph_cost.any()
    assert [len(u) for u in got.utterances] == [100] * len(got)
    assert got.utterances[0].keys[:2] == (f"{got.utt_ids[0]}-1", f"{got.utt_ids[0]}-2")
    # the first-pass totals rank every list as the benchmark's first pass
    want = [int(np.argmax(t)) for t in first_pass_totals(ci_nbest)]
    assert [int(np.argmin(u.ac_cost)) for u in got.utterances] == want


def test_the_span_source_streams_the_same_lists(ci_nemo):
    beams, manifest = ci_nemo
    whole = read_nemo_nbest(beams, manifest, log=quiet)
    source = open_nemo_nbest(beams, manifest, log=quiet)
    assert source.index.total_scores and source.index.utt_ids == tuple(whole.utt_ids)
    spans = list(source.spans(1000))
    assert len(spans) == 6 and all(s.total_scores for s in spans)
    streamed = [u for s in spans for u in s.utterances]
    assert [u.keys for u in streamed] == [u.keys for u in whole.utterances]
    assert all(np.array_equal(a.ac_cost, b.ac_cost) for a, b in zip(streamed, whole.utterances))


def test_manifest_references_and_detection(ci_nemo, DATA):
    beams, manifest = ci_nemo
    assert read_references(manifest) == read_references(DATA / "ci" / "ref.txt")
    assert read_manifest(manifest)[0][0] == "abcr0004-000"
    assert is_nemo_beams(beams) and not is_nemo_beams(manifest) and not is_nemo_beams(DATA / "ci")


def _pair(tmp_path, beams, manifest_ids=("a", "b")):
    b = tmp_path / "beams.txt"
    b.write_text(beams, encoding="utf-8")
    m = tmp_path / "m.json"
    m.write_text("".join(json.dumps({"audio_filepath": f"/x/{u}.wav", "text": "w", "duration": 1}) + "\n"
                         for u in manifest_ids))
    return b, m


@pytest.mark.parametrize("beams,want", [
    ("a b\t-1.5\nc\t-2\nd\t1\t2\ne\t3\n", "beams.txt:3: expected 2 tab-separated columns 'text<TAB>score', found 3"),
    ("a b -1.5\nc\t-2\n", "beams.txt:1: expected 2 tab-separated columns 'text<TAB>score', found 1"),
    ("a\t-1\nb\tminus two\n", "beams.txt:2: score: 'minus two' is not a decimal number"),
    ("a\t-1\nb\tnan\n", "beams.txt:2: score: 'nan' is not a decimal number (NaN and infinity are not allowed"),
    ("a\t-1\nb\t-2\nc\t-3\n", "beams.txt: 3 beam lines for the 2 utterances of"),
    ("", "beams.txt: no beam lines (the file is empty)"),
])
def test_bad_beams_are_one_line_naming_file_and_line(tmp_path, beams, want):
    b, m = _pair(tmp_path, beams)
    with pytest.raises(DataError) as e:
        read_nemo_nbest(b, m, log=quiet)
    assert str(e.value).startswith(f"{tmp_path}/{want}") and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("manifest,want", [
    ('{"audio_filepath": "/x/a.wav"}\n{"text": "b"}\n', "m.json:2: expected an object with 'audio_filepath'"),
    ('{"audio_filepath": "/x/a.wav"}\nnot json\n', "m.json:2: invalid JSON"),
    ('{"audio_filepath": "/x/a.wav"}\n{"audio_filepath": "/y/a.flac"}\n',
     "m.json:2: utterance id 'a' (the audio file's name) is also on line 1"),
    ('{"audio_filepath": "/x/a.wav", "text": 3}\n', "m.json:1: 'text' must be a string"),
    ("\n", "m.json: no entries"),
])
def test_bad_manifests_are_one_line_naming_file_and_line(tmp_path, manifest, want):
    b, m = _pair(tmp_path, "a\t-1\nb\t-2\n")
    m.write_text(manifest)
    with pytest.raises(DataError) as e:
        read_nemo_nbest(b, m, log=quiet)
    assert str(e.value).startswith(f"{tmp_path}/{want}") and "\n" not in str(e.value), str(e.value)


def test_no_manifest_says_which_option_gives_it(tmp_path):
    b, _ = _pair(tmp_path, "a\t-1\n")
    with pytest.raises(DataError, match="needs its manifest .* give --nemo-manifest"):
        read_nemo_nbest(b, log=quiet)


def test_an_empty_hypothesis_and_a_tensor_score(tmp_path):
    b, m = _pair(tmp_path, "\t-1.25\nx y\ttensor(-2.5000)\n", manifest_ids=("a",))
    u = read_nemo_nbest(b, m, log=quiet).utterances[0]
    assert u.hyps == ((), ("x", "y")) and u.ac_cost.tolist() == [1.25, 2.5] and u.keys == ("a-1", "a-2")
