"""End to end on the outputs of end-to-end decoders: the ci lists written as a NeMo
beams file (with its manifest, which also gives the references) and as an ESPnet N-best
directory, each scored directly (``--nbest``) and tuned; their first pass (one total
score per hypothesis) gives the Kaldi directory's first-pass WER, ``tune`` searches the
NN weight and the penalty but not the n-gram interpolation, and ``convert`` keeps the
totals as JSON Lines ``total_cost``."""
import json

import pytest
from click.testing import CliRunner

from decoder_outputs import write_espnet, write_nemo
from nbest_rescore.cli import main
from nbest_rescore.io.references import read_references


def run(*args, code=0):
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == code, res.output
    return res.output


@pytest.fixture(scope="module")
def lm_path(ci_nbest, tmp_path_factory):
    from tiny_models import random_checkpoint

    return random_checkpoint(ci_nbest, tmp_path_factory.mktemp("lm") / "small.pt")


@pytest.fixture(scope="module")
def decoders(DATA, ci_nbest, tmp_path_factory):
    """``{name: (--nbest and its options, --ref)}`` for ci as Kaldi, NeMo and ESPnet (all 100 ranks)."""
    root = tmp_path_factory.mktemp("decoders")
    ref = DATA / "ci" / "ref.txt"
    beams, manifest = write_nemo(ci_nbest, root / "nemo", read_references(ref))
    espnet = write_espnet(ci_nbest, root / "espnet", 100)
    return {"kaldi": (["--nbest", DATA / "ci", "--word-ins-penalty", -0.629606], ref),
            "nemo": (["--nbest", beams, "--nemo-manifest", manifest], manifest),
            "espnet": (["--nbest", espnet], ref)}


def _wer(folder):
    return json.loads((folder / "wer.json").read_text())["wer"]


def test_score_and_tune_on_nemo_and_espnet_outputs(decoders, lm_path, tmp_path, one_thread):
    wer = {}
    for name, (nbest, ref) in decoders.items():
        run("score", "--lm", lm_path, *nbest, "--ref", ref, "--out", tmp_path / name, "--interp", 0,
            "--lm-weight", 9.5, "--threads", 1, "--no-progress")
        wer[name] = _wer(tmp_path / name)
    # the totals are the first pass: the same 1-best, the same WER as the Kaldi directory's
    assert wer["nemo"]["first_pass"] == wer["espnet"]["first_pass"] == wer["kaldi"]["first_pass"]
    assert wer["nemo"]["oracle"] == wer["kaldi"]["oracle"]
    nn = (tmp_path / "nemo" / "nn_cost").read_text()
    assert nn == (tmp_path / "espnet" / "nn_cost").read_text()  # the same words, the same NN costs
    for name in ("nemo", "espnet"):
        nbest, ref = decoders[name]
        out = run("tune", *nbest, "--ref", ref, "--nn-cost", tmp_path / name / "nn_cost", "--interps", "0:1:0.5",
                  "--lm-weights", "0,0.5,1", "--word-ins-penalties", "-1,0,1", "--replications", 0,
                  "--out", tmp_path / f"tune_{name}")
        points = json.loads((tmp_path / f"tune_{name}" / "tune.json").read_text())["points"]
        assert len(points) == 9 and {p["interp"] for p in points} == {0.0}, points  # lambda is not searched
        assert "best: WER" in out
        first = next(p for p in points if p["lm_weight"] == 0 and p["word_ins_penalty"] == 0)
        assert first["wer"] == pytest.approx(wer["kaldi"]["first_pass"]["wer"])


def test_convert_keeps_the_totals_as_total_cost(decoders, tmp_path):
    nbest, ref = decoders["espnet"]
    run("convert", *nbest, "--to", "jsonl", "--out", tmp_path / "e.jsonl")
    first = json.loads((tmp_path / "e.jsonl").read_text().splitlines()[0])
    assert set(first["hypotheses"][0]["scores"]) == {"total_cost"}
    tunes = [run("tune", *args, "--ref", ref, "--lm-weights", "9.5", "--replications", 0)
             for args in (nbest, ["--nbest", tmp_path / "e.jsonl"])]
    assert tunes[0].splitlines()[-1] == tunes[1].splitlines()[-1]


@pytest.mark.parametrize("make,want", [
    (lambda d: ["--nbest", d["nemo"][0][1]], "needs its manifest (the utterance ids and order): give --nemo-manifest"),
    (lambda d: ["--nbest", d["espnet"][0][1], "--nemo-manifest", d["nemo"][0][3]],
     "is an ESPnet N-best directory: --nemo-manifest applies to NeMo beams files only"),
])
def test_cli_errors_are_one_line(decoders, make, want):
    res = CliRunner().invoke(main, ["tune", *map(str, make(decoders)), "--ref", str(decoders["kaldi"][1])])
    assert res.exit_code == 1 and want in res.output and res.output.count("\n") == 1, res.output


def test_api_tune_on_a_total_score_set_fixes_lambda(decoders, DATA):
    """``tune`` on a set read in memory: its ``total_scores`` flag keeps lambda at 0;
    a flat NN cost makes the LM weight irrelevant, so every point has the first-pass WER."""
    from nbest_rescore.api import load_nbest, load_references, tune

    nbest_args, ref = decoders["espnet"]
    nbest = load_nbest(nbest_args[1])
    assert nbest.total_scores
    nn = {k: 1.0 for u in nbest.utterances for k in u.keys}
    res = tune(nbest, load_references(ref), nn, interps=(0.0, 0.5, 1.0), lm_weights=(1.0, 2.0), replications=0)
    assert [p.interp for p in res.points] == [0.0, 0.0]
    assert len({p.wer for p in res.points}) == 1


def test_a_beams_file_the_manifest_does_not_divide_is_one_line(decoders, tmp_path):
    nbest, ref = decoders["nemo"]
    cut = tmp_path / "cut.tsv"
    cut.write_text("".join(open(nbest[1], encoding="utf-8").readlines()[:-1]), encoding="utf-8")
    res = CliRunner().invoke(main, ["tune", "--nbest", str(cut), "--nemo-manifest", str(nbest[3]), "--ref", str(ref)])
    want = f"Error: {cut}: 5999 beam lines for the 60 utterances of {nbest[3]}: not a multiple"
    assert res.exit_code == 1 and res.output.startswith(want) and res.output.count("\n") == 1, res.output
