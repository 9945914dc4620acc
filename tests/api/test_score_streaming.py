"""``score`` one span of whole documents at a time (issue 21, item 3), on the real ci
lists (8 documents of 500-1000 hypotheses): a run with a tiny span budget (a span per
document or two) writes the outputs of a run with one span for one LM, two LMs, a
backward LM and the first-pass, rescored and interpolated histories: the same files,
the same 1-best text byte for byte, the same wer.json and run marker apart from the
timings, and the NN cost files byte for byte (the LM batches hold other hypotheses,
but every product has a safe number of rows: nbest_rescore.models.rows). The job's
one-span run writes what score() + write_score_outputs() write, byte for byte."""
import dataclasses
import json
import os
from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner

import nbest_rescore as nr
from nbest_rescore.api import ScoreJob
from nbest_rescore.api.score_job import SPAN_HYPS
from nbest_rescore.cli import main
from nbest_rescore.io.output_checks import RUN_MARKER

TINY_SPANS = 800  # ci: one document per span (the 1000-hypothesis documents larger than the budget, whole)
TIMING = ("seconds", "tokens_per_s")


def _checkpoint(nbest, path, family, seed, **extra):
    """A random model of tests/tiny_models.py's size over the 300 most frequent list words."""
    import torch
    from tiny_models import EXTRA, SMALL

    from nbest_rescore.models import build_model, save_model
    from nbest_rescore.vocab import Vocabulary

    counts = Counter(w for u in nbest.utterances for h in u.hyps for w in h)
    vocab = Vocabulary(["</s>", "<unk>"] + sorted(w for w, _ in counts.most_common(300)))
    torch.manual_seed(seed)
    model = build_model(family, {**SMALL, **EXTRA.get(family, {}), **extra}, len(vocab)).eval()
    with torch.no_grad():  # larger weights than the initialisation: a longer memory, so histories matter
        for p in model.parameters():
            p.uniform_(-0.5, 0.5)
    save_model(path, model, vocab, {"note": "random, for tests"})
    return str(path)


@pytest.fixture(scope="module")
def lms(ci_nbest, tmp_path_factory):
    d = tmp_path_factory.mktemp("lms")
    return {"gru": _checkpoint(ci_nbest, d / "gru.pt", "gru", 0),
            "lstm": _checkpoint(ci_nbest, d / "lstm.pt", "lstm", 1),
            "bwd": _checkpoint(ci_nbest, d / "bwd.pt", "gru", 2, direction="backward")}


def _untimed(obj):
    if isinstance(obj, dict):
        return {k: _untimed(v) for k, v in obj.items() if k not in TIMING}
    if isinstance(obj, list):
        return [_untimed(v) for v in obj]
    return obj


def _costs(path):
    rows = [line.split() for line in open(path)]
    return [k for k, _ in rows], np.array([float(v) for _, v in rows])


def assert_same_outputs(a, b, exact_costs=False):
    """Two score --out folders: the same files, text byte for byte, wer.json and the run
    marker equal apart from the timings, the NN cost files with the same keys in the same
    order and the same values (byte for byte if ``exact_costs``, else within 1e-4)."""
    names = sorted(os.listdir(a))
    assert names == sorted(os.listdir(b))
    assert (a / "text").read_bytes() == (b / "text").read_bytes()
    for name in ("wer.json", RUN_MARKER):
        if name in names:
            ja, jb = json.loads((a / name).read_text()), json.loads((b / name).read_text())
            assert json.dumps(_untimed(ja), indent=2) == json.dumps(_untimed(jb), indent=2)
    cost_names = [n for n in names if n.startswith("nn_cost")]
    assert cost_names
    for name in cost_names:
        if exact_costs:
            assert (a / name).read_bytes() == (b / name).read_bytes()
        ka, va = _costs(a / name)
        kb, vb = _costs(b / name)
        assert ka == kb and np.allclose(va, vb, rtol=0, atol=1e-4)


CONFIGS = {
    "one LM, first-pass": dict(lm=("gru",), history="first-pass"),
    "one LM, rescored": dict(lm=("gru",), history="rescored"),
    "two LMs": dict(lm=("gru", "lstm"), history=("rescored", "first-pass"), interp=0.4, nn_weights="0.35,0.25"),
    "backward LM, interpolated": dict(lm=("bwd",), history="interpolated"),
    "neural cache": dict(lm=("gru",), history="rescored", cache_size=100),
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_tiny_spans_write_the_outputs_of_one_span(config, lms, DATA, tmp_path):
    kw = dict(CONFIGS[config])
    kw["lm"] = tuple(lms[n] for n in kw["lm"])
    common = dict(nbest=str(DATA / "ci"), ref=str(DATA / "ci" / "ref.txt"), threads=1, **kw)
    tiny = ScoreJob(out=str(tmp_path / "tiny"), span_hyps=TINY_SPANS, **common).run()
    whole = ScoreJob(out=str(tmp_path / "whole"), span_hyps=None, **common).run()
    assert_same_outputs(tmp_path / "tiny", tmp_path / "whole", exact_costs=True)
    assert dict(tiny.one_best) == dict(whole.one_best) and tiny.wer == whole.wer
    assert list(tiny.best) == list(whole.best) and tiny.keys == () and len(tiny.nn_cost) == 0


def test_one_span_job_writes_what_score_writes(lms, DATA, tmp_path):
    """The default budget holds all of ci (6,000 hypotheses): the job's run is the
    whole-set computation, written byte for byte as write_score_outputs writes it."""
    assert SPAN_HYPS >= 6000
    ScoreJob(lm=lms["gru"], nbest=str(DATA / "ci"), ref=str(DATA / "ci" / "ref.txt"), out=str(tmp_path / "job"),
             threads=1).run()
    res = nr.score(nr.load_nbest(DATA / "ci"), nr.load_lm(lms["gru"]), refs=nr.load_references(DATA / "ci" / "ref.txt"))
    res = dataclasses.replace(res, settings={**res.settings, "nbest": str(DATA / "ci"),
                                            "scoring": {**res.settings["scoring"], "threads": 1}})
    nr.write_score_outputs(res, tmp_path / "api")
    assert_same_outputs(tmp_path / "job", tmp_path / "api", exact_costs=True)


def test_one_hypothesis_per_pass_gives_the_same_costs_byte_for_byte(lms, DATA, tmp_path):
    """With --scoring single and no history every forward pass holds one hypothesis
    from the document-start state, whatever the span: so the files are byte-identical."""
    common = dict(lm=lms["gru"], nbest=str(DATA / "ci"), ref=str(DATA / "ci" / "ref.txt"), threads=1,
                  scoring="single", history="none")
    ScoreJob(out=str(tmp_path / "tiny"), span_hyps=1, **common).run()
    ScoreJob(out=str(tmp_path / "whole"), span_hyps=None, **common).run()
    assert_same_outputs(tmp_path / "tiny", tmp_path / "whole", exact_costs=True)


def test_score_api_on_slices_equals_the_whole_set(lms, ci_nbest, DATA):
    lm = nr.load_lm(lms["gru"])
    refs = nr.load_references(DATA / "ci" / "ref.txt")
    whole = nr.score(ci_nbest, lm, refs=refs, history="rescored")
    tiny = nr.score(ci_nbest, lm, refs=refs, history="rescored", span_hyps=TINY_SPANS)
    assert tiny.keys == whole.keys and dict(tiny.one_best) == dict(whole.one_best) and tiny.wer == whole.wer
    assert np.allclose(tiny.nn_cost, whole.nn_cost, rtol=0, atol=1e-4) and list(tiny.best) == list(whole.best)
    assert _untimed(tiny.stats) == _untimed(whole.stats)


def test_a_span_whose_references_are_all_empty_is_fine(lms, ci_nbest, DATA, tmp_path):
    """WER is summed over spans from edit counts: a span (here the first document) whose
    references are all empty adds insertions only, as in the whole set."""
    ref = tmp_path / "ref.txt"
    first_doc = ci_nbest.utterances[0].doc_id
    lines = (DATA / "ci" / "ref.txt").read_text().splitlines()
    ref.write_text("".join((line.split()[0] if line.startswith(first_doc) else line) + "\n" for line in lines))
    common = dict(lm=lms["gru"], nbest=str(DATA / "ci"), ref=str(ref), threads=1)
    tiny = ScoreJob(span_hyps=TINY_SPANS, **common).run()
    whole = ScoreJob(span_hyps=None, **common).run()
    assert tiny.wer == whole.wer and tiny.wer["rescored"].ref_words < 1130


def test_cli_span_option(lms, DATA, tmp_path):
    from nbest_rescore.cli import score

    assert next(p.default for p in score.params if p.name == "span_hyps") == SPAN_HYPS
    args = ["score", "--lm", lms["gru"], "--nbest", DATA / "ci", "--threads", 1, "--no-progress"]
    tiny = CliRunner().invoke(main, [str(a) for a in args + ["--span-hyps", TINY_SPANS]])
    whole = CliRunner().invoke(main, [str(a) for a in args + ["--span-hyps", 0]])
    assert tiny.exit_code == 0 and whole.exit_code == 0, tiny.output + whole.output
    assert tiny.stdout == whole.stdout and len(tiny.stdout.splitlines()) == 60
    bad = CliRunner().invoke(main, [str(a) for a in args + ["--span-hyps", -1]])
    assert bad.exit_code == 2 and "--span-hyps" in bad.output


def test_cli_softmax_impl_plain_gives_the_fused_costs(lms, DATA, tmp_path):
    """``score --softmax-impl plain`` (log_softmax of the whole product) against the
    default fused output layer on a full-softmax model: the same 1-best, the costs within
    1e-5 nats, and each run's wer.json records the implementation it used."""
    args = ["score", "--lm", lms["lstm"], "--nbest", DATA / "ci", "--ref", DATA / "ci" / "ref.txt", "--threads", 1,
            "--no-progress"]
    runs = {}
    for impl in ("fused", "plain"):
        res = CliRunner().invoke(main, [str(a) for a in args + ["--out", tmp_path / impl, "--softmax-impl", impl]])
        assert res.exit_code == 0, res.output
        runs[impl] = tmp_path / impl
        scoring = json.loads((tmp_path / impl / "wer.json").read_text())["scoring"]
        assert scoring["softmax_impl"] == impl
    assert (runs["fused"] / "text").read_bytes() == (runs["plain"] / "text").read_bytes()
    ka, va = _costs(runs["fused"] / "nn_cost")
    kb, vb = _costs(runs["plain"] / "nn_cost")
    assert ka == kb and np.abs(va - vb).max() <= 1e-5 and not np.array_equal(va, vb)
    bad = CliRunner().invoke(main, [str(a) for a in args + ["--softmax-impl", "blocked"]])
    assert bad.exit_code == 2 and "--softmax-impl" in bad.output


def test_job_refuses_an_unknown_softmax_impl_before_reading(lms, DATA):
    from nbest_rescore.errors import DataError

    with pytest.raises(DataError, match=r"--softmax-impl 'blocked': expected one of fused, plain"):
        ScoreJob(lm=lms["gru"], nbest=str(DATA / "ci"), softmax_impl="blocked")
