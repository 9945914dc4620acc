"""``nbest-rescore convert`` (nbest_rescore.api.convert_job) on the real ci lists: the
round trips through JSON Lines are byte for byte, ``score`` and ``tune`` give the same
outputs on the JSON Lines of ci as on ci/, and bad requests are one clear error that
writes nothing."""
import hashlib
import json
import shutil

import pytest
from click.testing import CliRunner

from nbest_rescore.api import ConvertJob, convert_nbest, load_nbest
from nbest_rescore.cli import main
from nbest_rescore.errors import DataError
from nbest_rescore.io.kaldi_nbest import read_kaldi_nbest_dir
from decoder_outputs import write_nemo

KALDI_FILES = ("text", "ac_cost", "lm_cost", "utt2doc")
PLAIN_FILES = ("nbest.txt", "nbest.ac", "nbest.ngram", "utt_ids", "utt2doc")


def run(*args, code=0):
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == code, res.output
    return res.output


def convert(nbest, to, out, *more, code=0):
    return run("convert", "--nbest", nbest, "--to", to, "--out", out, *more, code=code)


def same_files(a, b, names):
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.fixture(scope="module")
def converted(DATA, tmp_path_factory):
    """ci as JSON Lines (``ci.jsonl``), Kaldi (``kaldi``) and plain (``plain``), each
    converted from ci/ directly."""
    d = tmp_path_factory.mktemp("convert")
    for to, name in (("jsonl", "ci.jsonl"), ("kaldi", "kaldi"), ("plain", "plain")):
        out = convert(DATA / "ci", to, d / name)
        assert out.startswith("wrote 60 utterances, 6000 hypotheses, 8 documents (documents from utt2doc)"), out
    return d


def plain_args(folder):
    return [folder / "nbest.txt", "--plain-utt-ids", folder / "utt_ids", "--plain-utt2doc", folder / "utt2doc"]


def test_kaldi_to_jsonl_to_kaldi_is_byte_for_byte(DATA, converted, tmp_path):
    convert(converted / "ci.jsonl", "kaldi", tmp_path / "k")
    same_files(converted / "kaldi", tmp_path / "k", KALDI_FILES)
    assert sorted(p.name for p in (tmp_path / "k").iterdir()) == sorted(KALDI_FILES + (".nbest-rescore-run",))
    same_files(DATA / "ci", tmp_path / "k", ("text", "utt2doc"))  # ci is in the writer's layout
    convert(tmp_path / "k", "jsonl", tmp_path / "again.jsonl")
    assert (tmp_path / "again.jsonl").read_bytes() == (converted / "ci.jsonl").read_bytes()


def test_plain_to_jsonl_to_plain_is_byte_for_byte(converted, tmp_path):
    first, *opts = plain_args(converted / "plain")
    convert(first, "plain", tmp_path / "direct", *opts)
    convert(first, "jsonl", tmp_path / "p.jsonl", *opts)
    convert(tmp_path / "p.jsonl", "plain", tmp_path / "via")
    same_files(tmp_path / "direct", tmp_path / "via", PLAIN_FILES)
    same_files(converted / "plain", tmp_path / "via", PLAIN_FILES)
    assert (tmp_path / "p.jsonl").read_bytes() == (converted / "ci.jsonl").read_bytes()
    assert (converted / "plain" / "nbest.txt").read_text().splitlines()[0] == \
        "0 some farmers help fire ravaged neighbors <eos>"
    assert (converted / "plain" / "nbest.ac").read_text().splitlines()[0] == "-922.9875"  # scores = -cost


def test_every_format_reads_back_the_same_lists(DATA, converted):
    ref = read_kaldi_nbest_dir(DATA / "ci", log=lambda m: None)
    first, *_ = plain_args(converted / "plain")
    for s in (load_nbest(converted / "ci.jsonl"), load_nbest(converted / "kaldi"),
              load_nbest(first, utt_ids=converted / "plain" / "utt_ids", utt2doc=converted / "plain" / "utt2doc")):
        assert s.utt_ids == ref.utt_ids and s.documents() == ref.documents()
        for a, b in zip(s.utterances, ref.utterances):
            assert (a.doc_id, a.keys, a.hyps) == (b.doc_id, b.keys, b.hyps)
            assert a.ac_cost.tolist() == b.ac_cost.tolist() and a.lm_cost.tolist() == b.lm_cost.tolist()


def test_graph_cost_survives_kaldi_and_jsonl_but_not_plain(DATA, tmp_path):
    d = tmp_path / "g"
    d.mkdir()
    keys = [line.split()[0] for line in open(DATA / "ci" / "text")][:300]
    (d / "text").write_text("".join(open(DATA / "ci" / "text").readlines()[:300]))
    for name, scale in (("acwt", 1.0), ("lmwt.lmonly", 0.5), ("lmwt.nolm", 0.25)):
        (d / name).write_text("".join(f"{k} {scale * (i % 7) + 0.125:.6f}\n" for i, k in enumerate(keys)))
    convert(d, "jsonl", tmp_path / "g.jsonl")
    first = json.loads((tmp_path / "g.jsonl").read_text().splitlines()[0])
    assert first["hypotheses"][1]["scores"] == {"ac_cost": 1.125, "lm_cost": 0.625, "graph_cost": 0.375}
    assert first["document"] == first["utt_id"]  # no utt2doc: each utterance is its own document
    convert(tmp_path / "g.jsonl", "kaldi", tmp_path / "k")
    same_files(d, tmp_path / "k", ("text", "lmwt.lmonly", "lmwt.nolm"))
    convert(tmp_path / "k", "jsonl", tmp_path / "again.jsonl")
    assert (tmp_path / "again.jsonl").read_bytes() == (tmp_path / "g.jsonl").read_bytes()
    out = convert(tmp_path / "g.jsonl", "plain", tmp_path / "p", code=1)
    assert "graph cost" in out and "convert to kaldi or jsonl" in out and not (tmp_path / "p").exists()


def test_scores_convert_cannot_keep_are_refused_unless_dropped(converted, tmp_path):
    lines = (converted / "ci.jsonl").read_text().splitlines(True)
    extra = json.loads(lines[2])
    extra["hypotheses"][4]["scores"]["confidence"] = 0.75
    extra["hypotheses"][5]["scores"]["am2_cost"] = 12.0
    src = tmp_path / "extra.jsonl"
    src.write_text("".join(lines[:2]) + json.dumps(extra) + "\n" + "".join(lines[3:]))
    for to in ("jsonl", "kaldi", "plain"):
        out = convert(src, to, tmp_path / f"o_{to}", code=1)
        assert out == (f"Error: --nbest {src}: the hypotheses carry scores that convert cannot keep: 'confidence' "
                       f"(first on line 3), 'am2_cost' (first on line 3); every format writes only ac_cost, lm_cost "
                       f"and graph_cost: pass --drop-scores to write the lists without them\n")
        assert not (tmp_path / f"o_{to}").exists()
    # asked to drop them: the lists as the file without the two scores
    convert(src, "jsonl", tmp_path / "dropped.jsonl", "--drop-scores")
    assert (tmp_path / "dropped.jsonl").read_bytes() == (converted / "ci.jsonl").read_bytes()
    # a file with only the three known scores is converted without the flag (the fixture did)


def digests(*paths):
    """Each file (below each folder) -> its SHA-256."""
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest()
            for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*"))) if f.is_file()}


@pytest.fixture(scope="module")
def totals(DATA, tmp_path_factory):
    """ci (a copy) as the lists of an end-to-end decoder, one total score per hypothesis:
    a NeMo beams file with its manifest, and the JSON Lines ``total_cost`` file that
    ``convert --to jsonl`` makes of it."""
    d = tmp_path_factory.mktemp("totals")
    shutil.copytree(DATA / "ci", d / "ci")
    beams, manifest = write_nemo(read_kaldi_nbest_dir(d / "ci", log=lambda m: None), d / "nemo")
    convert(beams, "jsonl", d / "total.jsonl", "--nemo-manifest", manifest)
    assert set(json.loads((d / "total.jsonl").read_text().splitlines()[0])["hypotheses"][0]["scores"]) == \
        {"total_cost"}
    return {"nemo": [beams, "--nemo-manifest", manifest], "jsonl": [d / "total.jsonl"]}


@pytest.mark.parametrize("to", ["kaldi", "plain"])
@pytest.mark.parametrize("src", ["nemo", "jsonl"])
def test_one_total_score_per_hypothesis_is_refused_unless_dropped(totals, tmp_path, src, to):
    """kaldi and plain hold an acoustic and an n-gram cost: a total would pass for the
    acoustic cost without a word, so it is refused (one line: --nbest, --to, the fix)
    before anything is read or written; --drop-scores writes it so."""
    nbest, *more = totals[src]
    before = digests(nbest, *more[1:])
    out = convert(nbest, to, tmp_path / "o", *more, code=1)
    assert out == (f"Error: --nbest {nbest}: each hypothesis has one total score, but --to {to} writes separate "
                   f"acoustic and n-gram costs: the total would become the acoustic cost and the n-gram cost 0; use "
                   f"--to jsonl to keep it as total_cost, or pass --drop-scores to write the lists so\n")
    assert digests(nbest, *more[1:]) == before and not (tmp_path / "o").exists()
    with pytest.raises(DataError, match="--drop-scores"):
        ConvertJob(nbest=str(nbest), to=to, out=str(tmp_path / "o"),
                   nemo_manifest=str(more[1]) if more else None).run()
    # asked to: the totals as the acoustic costs, n-gram costs 0
    assert convert(nbest, to, tmp_path / "o", *more, "--drop-scores").startswith("wrote 60 utterances, 6000 hypotheses")
    back = load_nbest(tmp_path / "o" / "nbest.txt", utt_ids=tmp_path / "o" / "utt_ids") if to == "plain" \
        else load_nbest(tmp_path / "o")
    want = load_nbest(nbest, manifest=more[1] if more else None)
    assert not back.total_scores and back.utt_ids == want.utt_ids
    for a, b in zip(back.utterances, want.utterances):
        assert a.hyps == b.hyps and not a.lm_cost.any()
        assert a.ac_cost.tolist() == (b.ac_cost.tolist() if to == "plain" else [float(f"{c:.6f}") for c in b.ac_cost])
    assert digests(nbest, *more[1:]) == before


@pytest.mark.parametrize("case", ["jsonl-into-folder", "plain-option-with-jsonl", "foreign-files", "bad-format"])
def test_bad_requests_fail_before_writing(converted, tmp_path, case):
    src = converted / "ci.jsonl"
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    args, words = {
        "jsonl-into-folder": ((src, "jsonl", tmp_path / "busy"), ["is a folder", "--to jsonl writes one file"]),
        "plain-option-with-jsonl": ((src, "kaldi", tmp_path / "o", "--plain-costs"),
                                    ["is a JSON Lines file", "--plain-costs", "drop them"]),
        "foreign-files": ((src, "kaldi", tmp_path / "busy"), ["notes.txt", "choose a new folder"]),
        "bad-format": ((src, "csv", tmp_path / "o"), ["'csv' is not one of"]),
    }[case]
    out = convert(*args, code=2 if case == "bad-format" else 1)
    assert all(w in out for w in words) and "Traceback" not in out, out
    assert not (tmp_path / "o").exists() and sorted(p.name for p in (tmp_path / "busy").iterdir()) == ["notes.txt"]
    with pytest.raises(DataError):
        if case != "plain-option-with-jsonl":
            ConvertJob(nbest=str(src), to=args[1], out=str(args[2]))
        else:
            ConvertJob(nbest=str(src), to="kaldi", out=str(args[2]), plain_costs=True).run()


def test_api_convert_nbest(converted, tmp_path):
    s = load_nbest(converted / "ci.jsonl")
    res = convert_nbest(s, "jsonl", tmp_path / "new" / "x.jsonl")  # the file's folder is made
    assert (res.utterances, res.hypotheses, res.documents, res.files) == (60, 6000, 8, ("x.jsonl",))
    assert (tmp_path / "new" / "x.jsonl").read_bytes() == (converted / "ci.jsonl").read_bytes()


# --- score and tune read the JSON Lines as they read ci/ ---------------------------------

@pytest.fixture(scope="module")
def lm_path(ci_nbest, tmp_path_factory):
    from tiny_models import random_checkpoint

    return random_checkpoint(ci_nbest, tmp_path_factory.mktemp("lm") / "small.pt")


def test_score_and_tune_on_jsonl_equal_those_on_the_kaldi_dir(DATA, converted, lm_path, tmp_path, one_thread):
    outs = {}
    for name, nbest in (("kaldi", DATA / "ci"), ("jsonl", converted / "ci.jsonl")):
        run("score", "--lm", lm_path, "--nbest", nbest, "--ref", DATA / "ci" / "ref.txt", "--out", tmp_path / name,
            "--threads", 1, "--no-progress")
        outs[name] = run("tune", "--nbest", nbest, "--ref", DATA / "ci" / "ref.txt", "--nn-cost",
                         tmp_path / name / "nn_cost", "--interps", "0.5,1", "--lm-weights", "9,10",
                         "--replications", 0)
    same_files(tmp_path / "kaldi", tmp_path / "jsonl", ("nn_cost", "text"))
    assert outs["kaldi"] == outs["jsonl"] and "best: WER" in outs["jsonl"]
    wer = [json.loads((tmp_path / n / "wer.json").read_text())["wer"] for n in ("kaldi", "jsonl")]
    assert wer[0] == wer[1]
