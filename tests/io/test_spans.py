"""Spans of whole documents (nbest_rescore.io.spans) and the sources read from files
(open_kaldi_nbest, open_plain_nbest: one pass over the readers' generators, the lists
kept in a temporary file) on the real ci lists: a span never cuts a document, a document
larger than the budget is a span of its own, the spans put together are the set the
whole-set readers return (same keys, words and float64 costs, bit for bit), a cost file
in another key order is still streamed, and bad lists raise the whole-set readers' errors."""
import shutil
import sys

import numpy as np
import pytest

from nbest_rescore.api.inputs import load_nbest, open_nbest
from nbest_rescore.errors import DataError
from nbest_rescore.io.kaldi_nbest import open_kaldi_nbest, read_kaldi_nbest_dir
from nbest_rescore.io.plain_nbest import open_plain_nbest, read_plain_nbest
from nbest_rescore.io.spans import NbestIndex, SetSource, StreamSource, iter_spans, plan_spans
from nbest_rescore.types import NbestSet

CI_DOC_HYPS = [700, 600, 1000, 500, 600, 1000, 600, 1000]  # hypotheses of the 8 ci documents, in order


def test_plan_spans_takes_whole_documents_within_the_budget():
    assert plan_spans([700, 600, 1000, 500, 600], 1200) == [(0, 1), (1, 2), (2, 3), (3, 5)]
    assert plan_spans([700, 600, 1000], 1300) == [(0, 2), (2, 3)]
    # a document larger than the budget is a span of its own, never cut
    assert plan_spans([5, 5000, 5, 5], 100) == [(0, 1), (1, 2), (2, 4)]
    assert plan_spans([3, 3, 3], 1) == [(0, 1), (1, 2), (2, 3)]
    assert plan_spans([3, 3, 3], None) == [(0, 3)] and plan_spans([], 10) == [] and plan_spans([], None) == []
    with pytest.raises(ValueError, match="max_hyps"):
        plan_spans([3], 0)


def _docs_of(spans):
    return [[u.doc_id for u in s.utterances] for s in spans]


def assert_same_lists(got, want, same_source=True):
    """The utterances of ``got`` (a sequence of spans) are those of the set ``want``, bit for bit."""
    utts = [u for s in got for u in s.utterances]
    assert [u.utt_id for u in utts] == [u.utt_id for u in want.utterances]
    for a, b in zip(utts, want.utterances):
        assert (a.doc_id, a.keys, a.hyps) == (b.doc_id, b.keys, b.hyps)
        for name in ("ac_cost", "lm_cost", "graph_cost"):
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype == np.float64 and x.tobytes() == y.tobytes(), (a.utt_id, name)
    assert all(s.doc_source == want.doc_source and (s.source == want.source or not same_source) for s in got)


@pytest.mark.parametrize("budget, expected", [
    (1200, [[0], [1], [2], [3, 4], [5], [6], [7]]),
    (800, [[d] for d in range(8)]),  # the 1000-hypothesis documents are larger than the budget: whole
    (1, [[d] for d in range(8)]),
    (None, [list(range(8))]),
])
def test_spans_are_whole_documents_and_make_up_the_set(ci_nbest, DATA, budget, expected):
    docs = list(dict.fromkeys(u.doc_id for u in ci_nbest.utterances))
    assert [sum(len(ci_nbest.utterances[i]) for i in d) for d in ci_nbest.documents()] == CI_DOC_HYPS
    stream = open_kaldi_nbest(DATA / "ci")
    assert isinstance(stream, StreamSource) and stream.index == NbestIndex.of(ci_nbest)
    for source in (stream, SetSource(ci_nbest)):
        spans = list(source.spans(budget))
        # each document whole in exactly one span, the spans in order
        assert [sorted(set(d), key=docs.index) for d in _docs_of(spans)] == [[docs[i] for i in e] for e in expected]
        for s in spans:
            for doc in set(u.doc_id for u in s.utterances):
                assert sum(u.doc_id == doc for u in s.utterances) == sum(u.doc_id == doc for u in ci_nbest.utterances)
        assert_same_lists(spans, ci_nbest)


def test_stream_equals_the_reader_for_kaldi_names_and_binary_costs(ci_nbest, tmp_path):
    """words + words.txt, a binary acwt, lmwt.withlm - lmwt.nolm (text, with '[ v ]'), utt2spk."""
    import kaldiio

    d = tmp_path / "kaldi"
    d.mkdir()
    rng = np.random.default_rng(0)
    ids = {w: i for i, w in enumerate(sorted({w for u in ci_nbest.utterances for h in u.hyps for w in h}), 1)}
    (d / "words.txt").write_text("<eps> 0\n" + "".join(f"{w} {i}\n" for w, i in ids.items()))
    with open(d / "words", "w") as f, open(d / "lmwt.withlm", "w") as w, open(d / "lmwt.nolm", "w") as g:
        for u in ci_nbest.utterances:
            for key, h, lm in zip(u.keys, u.hyps, u.lm_cost):
                f.write(" ".join([key, *(str(ids[x]) for x in h)]) + "\n")
                graph = float(rng.uniform(0, 5))
                w.write(f"{key} {lm + graph:.4f}\n")
                g.write(f"{key} [ {graph:.4f} ]\n")
    kaldiio.save_ark(str(d / "acwt"), {k: np.array([c], dtype=np.float32)
                                       for u in ci_nbest.utterances for k, c in zip(u.keys, u.ac_cost)})
    (d / "utt2spk").write_text("".join(f"{u.utt_id} {u.doc_id}\n" for u in ci_nbest.utterances))
    lines_whole, lines_stream = [], []
    whole = read_kaldi_nbest_dir(d, log=lines_whole.append)
    stream = open_kaldi_nbest(d, log=lines_stream.append)
    assert isinstance(stream, StreamSource) and lines_stream == lines_whole
    assert np.any(whole.utterances[0].graph_cost) and stream.index.doc_source == "utt2spk"
    assert_same_lists(list(stream.spans(1500)), whole)


def test_plain_stream_equals_the_reader(ci_nbest, tmp_path):
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    from test_bad_input import write_plain

    for costs in (False, True):
        lst, ids, u2d = write_plain(ci_nbest, tmp_path, costs=costs)
        for kw in ({}, {"utt_ids": ids, "utt2doc": u2d}, {"utt2doc": {str(i): u.doc_id
                                                                       for i, u in enumerate(ci_nbest.utterances)}}):
            kw = dict(kw, scores_are_costs=costs)
            a, b = [], []
            whole = read_plain_nbest(lst, log=a.append, **kw)
            stream = open_plain_nbest(lst, log=b.append, **kw)
            assert isinstance(stream, StreamSource) and a == b
            spans = list(stream.spans(1200))
            assert len(spans) == (7 if "utt2doc" in kw else 1)  # without utt2doc the file is one document
            assert_same_lists(spans, whole)
    # scores read as costs: the same warning as the whole-set reader
    lst, _, _ = write_plain(ci_nbest, tmp_path, costs=True)
    a, b = [], []
    read_plain_nbest(lst, log=a.append)
    open_plain_nbest(lst, log=b.append)
    assert a == b and any("--plain-costs" in line for line in b)


def test_a_cost_file_in_another_order_is_streamed_and_split_utterances_are_an_error(ci_nbest, DATA, tmp_path):
    d = tmp_path / "ci"
    shutil.copytree(DATA / "ci", d)
    lines = (d / "lm_cost").read_text().splitlines()
    (d / "lm_cost").write_text("\n".join(lines[::-1]) + "\n")  # another key order: fine for the reader
    source = open_nbest(d)
    assert isinstance(source, StreamSource) and source.index.sizes == NbestIndex.of(ci_nbest).sizes
    assert_same_lists(list(source.spans(1200)), ci_nbest, same_source=False)
    # an utterance whose hypotheses are not on consecutive lines: one clear error (issue 27)
    text = (d / "text").read_text().splitlines()
    text[1], text[150] = text[150], text[1]
    (d / "text").write_text("\n".join(text) + "\n")
    for read in (load_nbest, open_nbest):
        with pytest.raises(DataError, match=rf"^{d / 'text'}:3: hypothesis '{text[2].split()[0]}' of utterance "
                                            r"'.*' follows utterance '.*'.* on consecutive lines.*fix: move"):
            read(d)


@pytest.mark.parametrize("edit, words", [
    (lambda d: (d / "ac_cost").write_text((d / "ac_cost").read_text().replace(" 847.6248", " 1_000", 1)),
     ["ac_cost:2", "1_000"]),
    (lambda d: (d / "lm_cost").write_text("\n".join((d / "lm_cost").read_text().splitlines()[:-1]) + "\n"),
     ["keys differ", "missing from lm_cost"]),
    (lambda d: (d / "utt2doc").write_text((d / "utt2doc").read_text().replace("abcr0004-002 abcr0004",
                                                                              "abcr0004-002 zz")),
     ["utt2doc", "reappears", "consecutive"]),
])
def test_bad_lists_raise_the_whole_set_readers_error(DATA, tmp_path, edit, words):
    d = tmp_path / "ci"
    shutil.copytree(DATA / "ci", d)
    edit(d)
    with pytest.raises(DataError) as streamed:
        open_kaldi_nbest(d)
    with pytest.raises(DataError) as want:
        load_nbest(d)
    with pytest.raises(DataError) as got:
        open_nbest(d)
    # the api's readers add the format they guessed and why
    guess = " [read as a Kaldi N-best directory: ci is a folder]"
    assert str(got.value) == str(want.value) == str(streamed.value) + guess and all(w in str(got.value) for w in words)


def test_a_set_built_by_hand_with_split_documents_is_one_span(ci_nbest):
    u = ci_nbest.utterances
    mixed = NbestSet(u[:5] + u[60 - 5:] + u[5:60 - 5], ci_nbest.doc_source)  # document 1 split in two
    assert [s.utterances for s in SetSource(mixed).spans(100)] == [mixed.utterances]


def test_the_files_are_read_once_so_changing_them_later_changes_nothing(DATA, ci_nbest, tmp_path):
    """The spans come from what the one pass read (kept in a temporary file): the files
    cut short or removed after open give the same spans, as often as they are read."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    from test_bad_input import write_plain

    d = tmp_path / "ci"
    shutil.copytree(DATA / "ci", d)
    lst, _, _ = write_plain(ci_nbest, tmp_path, costs=False)
    for stream, files in ((open_kaldi_nbest(d), [d / "text", d / "ac_cost"]), (open_plain_nbest(lst), [lst])):
        for f in files:
            f.write_text("\n".join(f.read_text().splitlines()[:-100]) + "\n")
        for _ in range(2):
            spans = list(stream.spans(1200))
            assert tuple(u.utt_id for s in spans for u in s.utterances) == stream.index.utt_ids
            assert len(stream.index) == 60 and sum(len(u) for s in spans for u in s.utterances) == 6000
        shutil.rmtree(d) if files[0].parent == d else lst.unlink()
        assert len(list(stream.spans(None))) == 1


def test_iter_spans_cuts_lists_read_in_order_as_plan_spans(ci_nbest):
    for budget in (1, 800, 1200, 1300, 5000, None):
        spans = list(iter_spans(iter(ci_nbest.utterances), budget, ci_nbest.doc_source, ci_nbest.source))
        assert [s.utterances for s in spans] == [s.utterances for s in SetSource(ci_nbest).spans(budget)]
    with pytest.raises(ValueError, match="max_hyps"):
        list(iter_spans(iter(ci_nbest.utterances), 0))
