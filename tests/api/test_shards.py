"""Document-aware split and merge (nbest_rescore.api.shards) on the real ci lists:
shards hold whole documents and lose nothing; scoring the shards and merging equals
one run over the whole set; bad input is one clear error and writes nothing."""
import json
import os
import shutil
from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner

import nbest_rescore as nr
from nbest_rescore.api import ScoreJob
from nbest_rescore.api.shards import MergeJob, SplitJob, merge_scores, plan_shards, split_nbest
from nbest_rescore.cli import main
from nbest_rescore.errors import DataError

WEIGHTS = {"lm_weight": 9.5, "interp": 0.5, "word_ins_penalty": -0.629606, "history": "first-pass"}


def run(args):
    return CliRunner().invoke(main, [str(a) for a in args])


def small_checkpoint(nbest, path):
    """A random GRU of tests/tiny_models.py's size over the 300 most frequent list
    words (costs differ by history, which is what sharding must preserve)."""
    import torch
    from tiny_models import SMALL

    from nbest_rescore.models import build_model, save_model
    from nbest_rescore.vocab import Vocabulary

    counts = Counter(w for u in nbest.utterances for h in u.hyps for w in h)
    vocab = Vocabulary(["</s>", "<unk>"] + sorted(w for w, _ in counts.most_common(300)))
    torch.manual_seed(0)
    save_model(path, build_model("gru", SMALL, len(vocab)).eval(), vocab, {"note": "random, for tests"})
    return path


@pytest.fixture(scope="module")
def lm_path(ci_nbest, tmp_path_factory):
    return small_checkpoint(ci_nbest, tmp_path_factory.mktemp("lm") / "small.pt")


@pytest.fixture(scope="module")
def shards(DATA, tmp_path_factory):
    out = tmp_path_factory.mktemp("split") / "ci3"
    res = run(["split", "--nj", 3, DATA / "ci", out])
    assert res.exit_code == 0, res.output
    assert "3 shards of whole documents" in res.output
    return out


def _docs(nbest):
    return [nbest.utterances[d[0]].doc_id for d in nbest.documents()]


def _hyp_table(nbest):
    return {k: (u.utt_id, u.doc_id, h, a, lm, g) for u in nbest.utterances
            for k, h, a, lm, g in zip(u.keys, u.hyps, u.ac_cost, u.lm_cost, u.graph_cost)}


def test_split_keeps_documents_whole_and_loses_nothing(shards, ci_nbest, DATA):
    parts = [nr.load_nbest(shards / str(i)) for i in (1, 2, 3)]
    docs = [_docs(p) for p in parts]
    assert all(docs) and sum(docs, []) == _docs(ci_nbest)  # every document once, in order
    union = {}
    for p in parts:
        assert p.doc_source == "utt2doc"
        union.update(_hyp_table(p))
    assert union == _hyp_table(ci_nbest) and list(union) == list(_hyp_table(ci_nbest))
    refs = nr.load_references(DATA / "ci" / "ref.txt")
    for i, p in enumerate(parts, 1):
        assert nr.load_references(shards / str(i) / "ref.txt") == {u: refs[u] for u in p.utt_ids}
    # balanced: the greedy plan over document sizes (whole documents, contiguous)
    sizes = [sum(len(ci_nbest.utterances[i]) for i in d) for d in ci_nbest.documents()]
    assert [p.num_hyps() for p in parts] == [sum(sizes[a:b]) for a, b in plan_shards(sizes, 3)]
    assert max(p.num_hyps() for p in parts) <= 2 * min(p.num_hyps() for p in parts)


def test_an_equal_size_cut_inside_a_document_is_never_made(DATA, tmp_path, ci_nbest):
    """Documents of 25, 5, 5 and 25 utterances (100 hypotheses each): equal thirds
    would cut after utterances 20 and 40, inside the first and the last document. Kaldi file names with a
    non-zero graph cost (lmwt.nolm) also check that graph costs survive the split."""
    src = tmp_path / "kaldi"
    src.mkdir()
    rng = np.random.default_rng(0)
    graph = {}
    with open(src / "words_text", "w") as w, open(src / "acwt", "w") as a, \
            open(src / "lmwt.withlm", "w") as wl, open(src / "lmwt.nolm", "w") as nl:
        for u in ci_nbest.utterances:
            for k, h, ac, lm in zip(u.keys, u.hyps, u.ac_cost, u.lm_cost):
                g = graph[k] = round(float(rng.uniform(0, 5)), 4)
                w.write(" ".join((k, *h)) + "\n")
                a.write(f"{k} {ac:.4f}\n")
                wl.write(f"{k} {lm + g:.4f}\n")
                nl.write(f"{k} {g:.4f}\n")
    utts = ci_nbest.utt_ids
    docs = ["A"] * 25 + ["B"] * 5 + ["C"] * 5 + ["D"] * 25
    (src / "utt2spk").write_text("".join(f"{u} {d}\n" for u, d in zip(utts, docs)))

    res = split_nbest(src, tmp_path / "out", 3)
    assert res.documents == (1, 2, 1) and res.utterances == (25, 10, 25) and res.doc_source == "utt2spk"
    assert not res.refs
    parts = [nr.load_nbest(tmp_path / "out" / str(i)) for i in (1, 2, 3)]
    assert [_docs(p) for p in parts] == [["A"], ["B", "C"], ["D"]]
    assert sorted(os.listdir(tmp_path / "out" / "2")) == ["ac_cost", "lmwt.lmonly", "lmwt.nolm", "text", "utt2doc"]
    whole = nr.load_nbest(src)
    union = {}
    for p in parts:
        union.update(_hyp_table(p))
    ref = _hyp_table(whole)
    assert list(union) == list(ref)
    for k, (utt, doc, h, ac, lm, g) in ref.items():
        u2, d2, h2, ac2, lm2, g2 = union[k]
        assert (u2, d2, h2, ac2) == (utt, doc, h, ac)
        assert lm2 == pytest.approx(lm, abs=1e-6) and g2 == pytest.approx(g, abs=1e-6) and g == graph[k]


def test_scoring_the_shards_and_merging_equals_one_run(shards, lm_path, DATA, tmp_path):
    ref = DATA / "ci" / "ref.txt"
    whole = nr.score(nr.load_nbest(DATA / "ci"), nr.load_lm(lm_path), refs=nr.load_references(ref), **WEIGHTS)
    jobs = []
    for i in (1, 2, 3):
        out = tmp_path / f"score.{i}"
        ScoreJob(lm=str(lm_path), nbest=str(shards / str(i)), ref=str(shards / str(i) / "ref.txt"),
                 out=str(out), threads=1, **WEIGHTS).run()
        jobs.append(out)
    res = run(["merge", "--out", tmp_path / "merged", "--ref", ref, *jobs])
    assert res.exit_code == 0, res.output
    merged = tmp_path / "merged"
    nn = [line.split() for line in open(merged / "nn_cost")]
    assert [k for k, _ in nn] == list(whole.keys)
    assert np.allclose([float(v) for _, v in nn], whole.nn_cost, atol=1e-4, rtol=0)
    expected = "".join(" ".join((u, *w)) + "\n" for u, w in whole.one_best.items())
    assert (merged / "text").read_text() == expected
    wer = json.loads((merged / "wer.json").read_text())["wer"]
    for name in ("rescored", "first_pass", "oracle"):  # recomputed, resp. summed over the jobs
        assert wer[name] == whole.wer[name].to_dict()
    r = whole.wer["rescored"]
    assert (f"%WER {r.wer:.2f} [ {r.errors} / {r.ref_words}, {r.insertions} ins, {r.deletions} del, "
            f"{r.substitutions} sub ]") in res.output


def test_bad_split_input_is_one_clear_error_and_writes_nothing(DATA, tmp_path):
    out = tmp_path / "out"
    res = run(["split", "--nj", 0, DATA / "ci", out])
    assert res.exit_code == 1 and "--nj 0" in res.output and "e.g. --nj 4" in res.output
    res = run(["split", "--nj", 9, DATA / "ci", out])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert "--nj 9" in res.output and "only 8 documents" in res.output and "give --nj 8 or fewer" in res.output
    assert not out.exists() and os.listdir(tmp_path) == []
    with pytest.raises(DataError, match="--nj -1"):
        SplitJob(nbest=str(DATA / "ci"), out=str(out), nj=-1)
    # no utt2doc/utt2spk: one document per utterance, so up to 60 shards
    flat = tmp_path / "flat"
    flat.mkdir()
    for name in ("text", "ac_cost", "lm_cost"):
        os.symlink(DATA / "ci" / name, flat / name)
    with pytest.raises(DataError, match=r"only 60 documents \(one per utterance"):
        split_nbest(flat, out, 61)
    assert not out.exists()


def test_bad_merge_input_is_one_clear_error_and_writes_nothing(shards, lm_path, tmp_path):
    for i in (1, 2):
        ScoreJob(lm=str(lm_path), nbest=str(shards / str(i)), out=str(tmp_path / f"s{i}"), threads=1,
                 **WEIGHTS).run()
    shutil.copytree(tmp_path / "s2", tmp_path / "s2copy")
    out = tmp_path / "merged"

    res = run(["merge", "--out", out, tmp_path / "s1", tmp_path / "s2", tmp_path / "s2copy"])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert f"in both {tmp_path / 's2'} and {tmp_path / 's2copy'}" in res.output and "utterances" in res.output

    res = run(["merge", "--out", tmp_path / "s1", tmp_path / "s1", tmp_path / "s2"])
    assert res.exit_code == 1 and "is also a job folder" in res.output

    res = run(["merge", "--out", out, tmp_path / "s1", tmp_path / "s3"])
    assert res.exit_code == 1 and f"job folder {tmp_path / 's3'} not found" in res.output

    (tmp_path / "s2copy" / "nn_cost").unlink()
    with pytest.raises(DataError, match="s2copy/nn_cost not found"):
        MergeJob(jobs=(str(tmp_path / "s1"), str(tmp_path / "s2copy")), out=str(out))

    # jobs scored with other weights must not be mixed
    ScoreJob(lm=str(lm_path), nbest=str(shards / "3"), out=str(tmp_path / "s3"), threads=1,
             **{**WEIGHTS, "interp": 0.9}).run()
    with pytest.raises(DataError, match=r"scored with different settings \(weights"):
        merge_scores([tmp_path / "s1", tmp_path / "s2", tmp_path / "s3"], out)
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.startswith(".merged")]
