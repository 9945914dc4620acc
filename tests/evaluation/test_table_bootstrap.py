"""table --baseline / --ref / --replications: bootstrap interval columns, the CV WER of a
tune.json with folds, P(better than a baseline) from per-utterance errors (tune.json's,
or a score folder's 1-best text scored against --ref), and one-line errors."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from nbest_rescore.cli import main
from nbest_rescore.evaluation.bootstrap import bootstrap_wer, improvement_probability


def _run(*args, code=0):
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == code, res.output
    return res.output


def _cells(output, name):
    return next(r for r in output.splitlines() if r.startswith(f"| {name} |")).split(" | ")


@pytest.fixture(scope="module")
def results(DATA, ci, edit_distance, tmp_path_factory):
    """Two tune.json (first pass at the decoder scale; LM weight tuned with --folds 2)
    and a score-like folder: the rank-2 hypotheses as text with their wer.json."""
    d = tmp_path_factory.mktemp("results")
    nbest, refs = ci
    base = ["tune", "--nbest", DATA / "ci", "--ref", DATA / "ci" / "ref.txt", "--word-ins-penalty", "-0.629606"]
    _run(*base, "--lm-weights", "9.5", "--out", d / "fp")
    _run(*base, "--lm-weights", "6:14:1", "--folds", "2", "--out", d / "tuned")
    second = {u.utt_id: u.hyps[min(1, len(u) - 1)] for u in nbest.utterances}
    (d / "score").mkdir()
    (d / "score" / "text").write_text("".join(" ".join((u, *w)) + "\n" for u, w in second.items()))
    errors = [edit_distance(refs[u], h) for u, h in second.items()]
    words = [len(refs[u]) for u in second]
    wer = {"wer": sum(errors) / sum(words) * 100}
    (d / "score" / "wer.json").write_text(json.dumps({"wer": {"rescored": wer, "first_pass": wer, "oracle": wer},
                                                      "weights": {"interp": 0.5, "lm_weight": 9.5}}))
    return d, errors, words


def test_columns(results, DATA):
    d, errors, words = results
    out = _run("--seed", "3", "table", "--replications", "1000", "--baseline", "fp", "--ref", DATA / "ci" / "ref.txt",
               f"fp={d / 'fp' / 'tune.json'}", f"tuned={d / 'tuned' / 'tune.json'}",
               f"second={d / 'score' / 'wer.json'}:rescored", f"oracle={d / 'score' / 'wer.json'}:oracle")
    head = out.splitlines()[0]
    assert head == ("| system | WER % | lambda | delta | 95% interval | percentile 95% | CV WER % | CV 95% interval | "
                    "P(better than fp) | P(CV better than fp) |")
    fp, tuned = (json.loads((d / n / "tune.json").read_text()) for n in ("fp", "tuned"))
    e_fp, e_tuned = fp["utterance_errors"]["dev_tuned"], tuned["utterance_errors"]
    b = bootstrap_wer(e_tuned["dev_tuned"], e_tuned["ref_words"], 1000, 3)
    cv = bootstrap_wer(e_tuned["cross_validated"], e_tuned["ref_words"], 1000, 3)
    p = improvement_probability(e_fp, e_tuned["dev_tuned"], 1000, 3)
    p_cv = improvement_probability(e_fp, e_tuned["cross_validated"], 1000, 3)
    assert _cells(out, "tuned")[1:] == [f"{tuned['best']['wer']:.2f}", "1", f"{tuned['best']['lm_weight']:g}",
                                        b.interval(), b.percentile(), f"{tuned['cross_validation']['wer']:.2f}",
                                        cv.interval(), f"{p:.3f}", f"{p_cv:.3f} |"]
    second = bootstrap_wer(errors, words, 1000, 3)  # the text scored utterance by utterance here
    p2 = improvement_probability(e_fp, errors, 1000, 3)
    assert _cells(out, "second")[4:] == [second.interval(), second.percentile(), "", "", f"{p2:.3f}", " |"]
    assert _cells(out, "fp")[-2:] == ["", " |"] and _cells(out, "oracle")[4:] == ["", "", "", "", "", " |"]


def test_without_ref_or_baseline(results):
    d, _, _ = results
    out = _run("table", f"second={d / 'score' / 'wer.json'}:rescored", f"fp={d / 'fp' / 'tune.json'}")
    assert "P(better" not in out and "CV WER" not in out
    assert _cells(out, "second")[4:] == ["", " |"]  # no --ref: no per-utterance errors
    out = _run("table", "--replications", "0", f"fp={d / 'fp' / 'tune.json'}")
    assert out.splitlines()[0] == "| system | WER % | lambda | delta |"
    old = json.loads((d / "fp" / "tune.json").read_text())
    for key in ("utterance_errors", "bootstrap", "cross_validation"):
        old.pop(key, None)
    (d / "old.json").write_text(json.dumps(old))  # written before tune stored per-utterance errors
    assert _cells(_run("table", f"old={d / 'old.json'}"), "old")[1:] == [f"{old['best']['wer']:.2f}", "1", "9.5 |"]


def test_errors_are_one_line(results, DATA, tmp_path):
    d, _, _ = results
    fp, score = f"fp={d / 'fp' / 'tune.json'}", d / "score" / "wer.json"
    for args, text in ((["--baseline", "nope", fp], "--baseline 'nope': no such row; the rows are 'fp'"),
                       (["--baseline", "o", fp, f"o={score}:oracle"], "the row has no per-utterance errors")):
        out = _run("table", *args, code=1)
        assert text in out and out.count("\n") == 1
    ref = tmp_path / "ref.txt"
    lines = (DATA / "ci" / "ref.txt").read_text().splitlines(True)
    ref.write_text("".join(lines[:-1]) + lines[-1].split()[0] + " zzz\n")
    out = _run("table", "--ref", ref, f"s={score}:rescored", code=1)
    assert "give the references that 'score --ref' used" in out and out.count("\n") == 1
    sub = json.loads((d / "fp" / "tune.json").read_text())
    for key in ("ids", "ref_words", "dev_tuned", "first_pass"):
        sub["utterance_errors"][key] = sub["utterance_errors"][key][:-1]
    (tmp_path / "sub.json").write_text(json.dumps(sub))
    for reps in ("1000", "0"):  # checked whatever the replications
        out = _run("table", "--replications", reps, "--baseline", "fp", fp, f"sub={tmp_path / 'sub.json'}", code=1)
        assert "do not hold the same utterances" in out and out.count("\n") == 1
    out = _run("table", "--replications", "0", "--baseline", "nope", fp, code=1)
    assert "--baseline 'nope': no such row" in out and out.count("\n") == 1
    out = _run("table", fp, f"fp={d / 'tuned' / 'tune.json'}", code=1)
    assert out == "Error: row name(s) 'fp' given more than once: give each NAME=PATH its own NAME\n"
