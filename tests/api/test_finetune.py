"""``nbest-rescore finetune`` on the ci lists with the tiny GRU: with --folds, no
held-out document is ever trained on (the training lists of each fold are recorded),
each fold's costs are those of its own checkpoint scored again independently, and the
reported WERs are recomputed from the written cost files; without folds, a checkpoint
that score reads."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from nbest_rescore.api import finetune_job
from nbest_rescore.cli import main
from nbest_rescore.errors import DataError
from nbest_rescore.evaluation.folds import document_folds
from nbest_rescore.models import load_model
from nbest_rescore.rescoring.combine import Weights, flat_scores, segment_argmax
from nbest_rescore.rescoring.history import rescore
from nbest_rescore.rescoring.scorer import NnScorer
from nbest_rescore.types import NbestSet

ARGS = ["--interp", "0.5", "--word-ins-penalty", "-0.629606", "--epochs", "1", "--top-n", "8", "--lr", "1e-3"]
W = Weights(lm_weight=9.5, interp=0.5, word_ins_penalty=-0.629606)


def test_folds_never_train_on_their_held_out_documents(DATA, ci_nbest, tiny_lm, tmp_path, monkeypatch):
    """A grid of two posterior scales: every scale trains one model per fold, never on
    its held-out documents; each fold's scale is the one with the fewest errors on the
    other fold (recomputed here from the written per-scale costs); its costs are those
    of its own checkpoint, scored again independently; the WERs are recomputed."""
    trained = []
    real = finetune_job.FinetuneJob._finetune

    def spy(self, base, nbest, refs, weights, text, alpha):
        trained.append((alpha, {u.utt_id for u in nbest.utterances}))
        return real(self, base, nbest, refs, weights, text, alpha)

    monkeypatch.setattr(finetune_job.FinetuneJob, "_finetune", spy)
    out = tmp_path / "ft"
    ci = str(DATA / "ci")
    res = CliRunner().invoke(main, ["finetune", "--lm", str(tiny_lm), "--nbest", ci, "--ref", f"{ci}/ref.txt",
                                    "--folds", "2", "--replications", "200", "--out", str(out),
                                    "--posterior-scale", "0.02,0.5", *ARGS])
    assert res.exit_code == 0, res.output + repr(res.exception)
    docs = ci_nbest.documents()
    fold_of_doc = document_folds(len(docs), 2, 0)
    held = [[u for d, us in zip(fold_of_doc, docs) if d == k for u in us] for k in range(2)]
    assert [a for a, _ in trained] == [0.02, 0.02, 0.5, 0.5]
    for i, (_, utts) in enumerate(trained):
        ids = {ci_nbest.utterances[u].utt_id for u in held[i % 2]}
        assert ids and not (ids & utts)  # a leak fails here
        assert utts | ids == set(ci_nbest.utt_ids)
    flat = ci_nbest.flat()

    def read(name):
        table = dict(line.split() for line in (out / name / "nn_cost").read_text().splitlines())
        return np.array([float(table[key]) for key in flat.keys])

    from nbest_rescore.api.inputs import load_references
    from nbest_rescore.evaluation.wer import nbest_errors

    errors, offsets, words = nbest_errors(ci_nbest, load_references(DATA / "ci" / "ref.txt"), flat)
    utt_errors = {a: errors[segment_argmax(flat_scores(flat, W, read(f"mwer_alpha{a:g}")), offsets)]
                  for a in (0.02, 0.5)}
    report = json.loads((out / "finetune.json").read_text())
    for k in range(2):  # the scale of fold k: fewest errors on the other fold
        other = held[1 - k]
        best = min((0.02, 0.5), key=lambda a: (utt_errors[a][other].sum(), a))
        assert report["per_fold"][k]["posterior_scale"] == best
    costs = {n: read(n) for n in ("mwer", "base")}
    for k in range(2):  # each fold's costs: its own checkpoint, scored again here
        model, vocab, _ = load_model(out / f"fold_{k + 1}.pt")
        again = rescore(NbestSet(tuple(ci_nbest.utterances[u] for u in held[k]), ci_nbest.doc_source),
                        NnScorer(model, vocab), W).nn_cost
        rows = np.concatenate([np.arange(offsets[u], offsets[u + 1]) for u in held[k]])
        assert costs["mwer"][rows] == pytest.approx(again, abs=1e-4)
        chosen = read(f"mwer_alpha{report['per_fold'][k]['posterior_scale']:g}")
        assert np.array_equal(costs["mwer"][rows], chosen[rows])
    for name in ("base", "mwer"):  # the WERs of finetune.json from the written costs
        wer = 100.0 * errors[segment_argmax(flat_scores(flat, W, costs[name]), offsets)].sum() / words
        assert report["wer"][name] == pytest.approx(wer)
    for point in report["posterior_scales"]:
        assert point["wer"]["mwer"] == pytest.approx(100.0 * utt_errors[point["alpha"]].sum() / words)
    assert 0.0 <= report["p_mwer_better_than_base"] <= 1.0 and "held-out WER" in res.output
    assert "posterior scale 0.02: held-out WER" in res.output


def test_without_folds_a_checkpoint_that_score_reads(DATA, tiny_lm, ci_shard, tmp_path):
    """Fine-tuned on ci, evaluated on a third of it (--eval-nbest): the eval WERs equal
    those of score run with each checkpoint at the same weights."""
    ci = str(DATA / "ci")
    out = tmp_path / "ft"
    res = CliRunner().invoke(main, ["finetune", "--lm", str(tiny_lm), "--nbest", ci, "--ref", f"{ci}/ref.txt",
                                    "--eval-nbest", str(ci_shard), "--eval-ref", str(ci_shard / "ref.txt"),
                                    "--replications", "100", "--out", str(out), *ARGS])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["base", "finetune.json",
                                                                                  "finetuned.pt", "mwer"]
    report = json.loads((out / "finetune.json").read_text())
    for name, lm in (("base", tiny_lm), ("mwer", out / "finetuned.pt")):
        score = CliRunner().invoke(main, ["score", "--lm", str(lm), "--nbest", str(ci_shard), "--ref",
                                          str(ci_shard / "ref.txt"), "--out", str(tmp_path / name), "--no-progress",
                                          *ARGS[:4]])
        assert score.exit_code == 0, score.output
        wer = json.loads((tmp_path / name / "wer.json").read_text())["wer"]["rescored"]["wer"]
        assert report["wer"][name] == pytest.approx(wer)
    _, _, info = load_model(out / "finetuned.pt")
    assert len(info["mwer"]) == 1 and "expected_errors" in info["mwer"][0]


def test_bad_options_are_one_line_before_reading(DATA, tiny_lm, tmp_path):
    ci = str(DATA / "ci")
    run = CliRunner().invoke
    res = run(main, ["finetune", "--lm", str(tiny_lm), "--nbest", ci, "--ref", f"{ci}/ref.txt", "--out",
                     str(tmp_path / "o"), "--top-n", "1"])
    assert res.exit_code != 0 and "--top-n" in res.output and "Traceback" not in res.output
    res = run(main, ["finetune", "--lm", str(tiny_lm), "--nbest", ci, "--ref", f"{ci}/ref.txt", "--out", ci])
    assert res.exit_code != 0 and "Traceback" not in res.output
    res = run(main, ["finetune", "--lm", str(tiny_lm), "--nbest", ci, "--ref", f"{ci}/ref.txt", "--out",
                     str(tmp_path / "o"), "--eval-nbest", ci])
    assert res.exit_code == 1 and "--eval-nbest and --eval-ref go together" in res.output
    base = ["finetune", "--nbest", ci, "--ref", f"{ci}/ref.txt", "--out", str(tmp_path / "o")]
    for args, expected in ((["--lm", "hf:x"], "--lm"),
                           (["--lm", str(tiny_lm), "--eval-nbest", ci, "--eval-ref", f"{ci}/ref.txt", "--folds", "2"],
                            "--eval-nbest with --folds 2"),
                           (["--lm", str(tiny_lm), "--epochs", "0"], "--epochs"),
                           (["--lm", str(tiny_lm), "--posterior-scale", "0"], "--posterior-scale"),
                           (["--lm", str(tiny_lm), "--posterior-scale", "0.1,0.3"], "add --folds 2"),
                           (["--lm", str(tiny_lm), "--posterior-scale", "0.1,-1", "--folds", "2"],
                            "--posterior-scale"),
                           (["--lm", str(tiny_lm), "--text", str(tmp_path / "missing.txt")], "--text")):
        res = run(main, base + args)
        assert res.exit_code != 0 and expected in res.output and "Traceback" not in res.output, (args, res.output)
    assert not (tmp_path / "o").exists()


def test_an_hf_lm_is_refused_with_finetunes_own_reason(DATA, tmp_path):
    """``--lm hf:DIR`` passes the option parser (as for score) and is refused by the job
    in one line (--lm, what finetune takes, the fix) before anything is read or written."""
    import hashlib
    import shutil

    ci = tmp_path / "ci"
    shutil.copytree(DATA / "ci", ci)
    hf = tmp_path / "gpt"
    hf.mkdir()
    (hf / "config.json").write_text('{"model_type": "gpt2"}\n')

    def digest():
        return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(tmp_path.rglob("*")) if p.is_file()}

    before = digest()
    for lm in (f"hf:{hf}", "hf:no/such/model"):
        res = CliRunner().invoke(main, ["finetune", "--lm", lm, "--nbest", str(ci), "--ref", str(ci / "ref.txt"),
                                        "--out", str(tmp_path / "o")])
        assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
        assert res.output == (f"Error: --lm {lm}: finetune takes a word-level checkpoint (.pt) written by "
                              f"'nbest-rescore train', not a Hugging Face model ('score --lm hf:...' scores one; it is "
                              f"not fine-tuned here); give such a .pt checkpoint\n")
    assert digest() == before and not (tmp_path / "o").exists()
    with pytest.raises(DataError, match="--lm hf:x: finetune takes a word-level checkpoint"):
        finetune_job.FinetuneJob(lm="hf:x", nbest=str(ci), ref=str(ci / "ref.txt"), out=str(tmp_path / "o"))
    res = CliRunner().invoke(main, ["finetune", "--lm", str(tmp_path / "none.pt"), "--nbest", str(ci), "--ref",
                                    str(ci / "ref.txt"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "does not exist" in res.output  # a checkpoint path is still checked by the parser
