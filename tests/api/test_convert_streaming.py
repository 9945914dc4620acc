"""``convert`` reads and writes span by span (nbest_rescore.api.convert_job): for every
from/to pair the files are byte for byte those of the whole-set convert of version
d83ccae (SHA-256 prefixes recorded from it on ci, below), however the lists are cut into
spans; a graph cost met only in the last span still gives the graph layout; an error
in a late span writes nothing."""
import hashlib
import os
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from nbest_rescore.api import convert_nbest, load_nbest
from nbest_rescore.api.inputs import open_nbest
from nbest_rescore.cli import main
from nbest_rescore.errors import DataError
from nbest_rescore.io.kaldi_nbest import write_kaldi_nbest_files
from nbest_rescore.types import NbestSet

#: SHA-256 (first 16 hex digits) of each file the whole-set convert of d83ccae wrote for
#: ci, whatever the input format (ci/, its JSON Lines, its plain folder).
EXPECTED = {
    "kaldi": {"ac_cost": "86abdc712f8567d7", "lm_cost": "37ec94f23d282ad1", "text": "9512cad6c76147fd",
              "utt2doc": "97919f8653be1697"},
    "jsonl": {"out.jsonl": "543b3e5e9021222b"},
    "plain": {"nbest.ac": "9e2eb78c379a4caf", "nbest.ngram": "b1949064bf43ae19", "nbest.txt": "4d286fbffebdb51e",
              "utt2doc": "97919f8653be1697", "utt_ids": "0db6c1d683d65fc7"},
}


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def written(out):
    if out.is_file():
        return {out.name: sha(out)}
    return {p.name: sha(p) for p in out.iterdir() if not p.name.startswith(".")}


@pytest.fixture(scope="module")
def sources(DATA, tmp_path_factory):
    """ci as each input format: (path, plain-format keyword arguments)."""
    d = tmp_path_factory.mktemp("sources")
    for to, name in (("jsonl", "ci.jsonl"), ("plain", "plain")):
        res = CliRunner().invoke(main, ["convert", "--nbest", str(DATA / "ci"), "--to", to, "--out", str(d / name)])
        assert res.exit_code == 0, res.output
    p = d / "plain"
    return {"kaldi": (DATA / "ci", {}), "jsonl": (d / "ci.jsonl", {}),
            "plain": (p / "nbest.txt", {"utt_ids": p / "utt_ids", "utt2doc": p / "utt2doc"})}


@pytest.mark.parametrize("span_hyps", [None, 700, 1])
@pytest.mark.parametrize("to", ["kaldi", "jsonl", "plain"])
@pytest.mark.parametrize("src", ["kaldi", "jsonl", "plain"])
def test_every_pair_writes_the_whole_set_convert_files(sources, tmp_path, src, to, span_hyps):
    path, kw = sources[src]
    source = open_nbest(path, **kw)
    if span_hyps is not None:
        assert len(list(source.spans(span_hyps))) > 1
    out = tmp_path / ("out.jsonl" if to == "jsonl" else "out")
    res = convert_nbest(source, to, out, span_hyps=span_hyps)
    assert written(out) == EXPECTED[to]
    assert (res.utterances, res.hypotheses, res.documents) == (60, 6000, 8)
    assert set(res.files) == set(EXPECTED[to])


def test_a_graph_cost_in_the_last_span_only_gives_the_graph_layout(sources, tmp_path):
    whole = load_nbest(sources["kaldi"][0])
    last = whole.utterances[-1]
    g = NbestSet(whole.utterances[:-1] + (replace(last, graph_cost=np.full(len(last), 0.25)),), whole.doc_source)
    (tmp_path / "g").mkdir()
    names = write_kaldi_nbest_files(tmp_path / "g", g)
    assert names == ("text", "ac_cost", "lmwt.lmonly", "lmwt.nolm", "utt2doc")
    for span_hyps in (None, 500):
        out = tmp_path / f"k{span_hyps}"
        res = convert_nbest(open_nbest(tmp_path / "g"), "kaldi", out, span_hyps=span_hyps)
        assert res.files == names and written(out) == written(tmp_path / "g")
    res = convert_nbest(open_nbest(sources["kaldi"][0]), "kaldi", tmp_path / "plain", span_hyps=500)
    assert res.files == ("text", "ac_cost", "lm_cost", "utt2doc") and written(tmp_path / "plain") == EXPECTED["kaldi"]


@pytest.mark.parametrize("to", ["plain", "jsonl"])
def test_an_error_in_a_late_span_writes_nothing(sources, tmp_path, to):
    whole = load_nbest(sources["kaldi"][0])
    last = whole.utterances[-1]
    bad = replace(last, graph_cost=np.full(len(last), 0.25)) if to == "plain" else \
        replace(last, keys=tuple(reversed(last.keys)))
    g = NbestSet(whole.utterances[:-1] + (bad,), whole.doc_source)
    (tmp_path / "g").mkdir()
    write_kaldi_nbest_files(tmp_path / "g", g)
    out = tmp_path / "o" / ("x.jsonl.gz" if to == "jsonl" else "x")
    with pytest.raises(DataError, match=rf"utterance {last.utt_id!r}"):
        convert_nbest(open_nbest(tmp_path / "g"), to, out, span_hyps=500)
    assert not out.exists() and (not out.parent.exists() or os.listdir(out.parent) == [])


def test_convert_refuses_to_write_over_its_input(sources, tmp_path):
    path, _ = sources["jsonl"]
    res = CliRunner().invoke(main, ["convert", "--nbest", str(path), "--to", "jsonl", "--out", str(path)])
    assert res.exit_code == 1 and "is the input --nbest" in res.output and "Traceback" not in res.output
    assert sha(path) == EXPECTED["jsonl"]["out.jsonl"]
