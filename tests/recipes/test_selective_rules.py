"""recipes/abc-nbest/local/selective_rules.py (issue 37's other confidences) on ci: its
"every hypothesis" WER is tune's dev-tuned WER on the same grids, and each point of its
beam frontier is what the shipped beam (``beam_choice``) gives at that mass."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nbest_rescore.api.inputs import load_references, open_nbest
from nbest_rescore.api.tune_job import read_tune_data
from nbest_rescore.cli import main
from nbest_rescore.evaluation.selective import beam_choice
from nbest_rescore.rescoring.combine import Weights

REPO = Path(__file__).resolve().parents[2]


def test_rules_script_on_ci(DATA, tiny_lm, tmp_path):
    ci, ref = str(DATA / "ci"), str(DATA / "ci" / "ref.txt")
    run = CliRunner().invoke
    res = run(main, ["score", "--lm", str(tiny_lm), "--nbest", ci, "--ref", ref, "--out", str(tmp_path / "all"),
                     "--word-ins-penalty", "-0.629606", "--no-progress"])
    assert res.exit_code == 0, res.output
    cost = str(tmp_path / "all" / "nn_cost")
    tune = run(main, ["tune", "--nbest", ci, "--ref", ref, "--nn-cost", cost, "--word-ins-penalty", "-0.629606",
                      "--replications", "0", "--out", str(tmp_path / "tune")])
    assert tune.exit_code == 0, tune.output
    out = subprocess.run([sys.executable, "recipes/abc-nbest/local/selective_rules.py", "--nbest", ci, "--ref", ref,
                          "--nn-cost", cost, "--cheap-cost", cost, "--word-ins-penalty", "-0.629606"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    best = json.loads((tmp_path / "tune" / "tune.json").read_text())["best"]
    assert float(re.search(r"every hypothesis scored: WER ([\d.]+)", lines[0]).group(1)) == pytest.approx(
        best["wer"], abs=0.005)
    w = Weights(lm_weight=best["lm_weight"], interp=best["interp"], word_ins_penalty=-0.629606)
    data = read_tune_data(open_nbest(ci), load_references(ref), [cost], ["nn"], ["nn_cost"])
    beam = next(line for line in lines if line.startswith("beam: "))
    points = re.findall(r"([\d.]+)% ([\d.]+) \(E=([\d.]+)\)", beam)
    assert points and {line.split(":")[0] for line in lines[1:]} == {"beam", "reweighted", "two-stage", "disagree", f"cascade {cost}"}
    for share, wer, mass in points:
        chosen, scored = beam_choice(data, w, float(mass))
        assert float(share) == pytest.approx(100.0 * scored / len(data), abs=0.05)
        assert float(wer) == pytest.approx(100.0 * data.errors[chosen].sum() / data.ref_words, abs=0.005)


def test_rules_script_names_a_missing_cost_file(DATA, tmp_path):
    ci = str(DATA / "ci")
    res = subprocess.run([sys.executable, "recipes/abc-nbest/local/selective_rules.py", "--nbest", ci, "--ref",
                          f"{ci}/ref.txt", "--nn-cost", str(tmp_path / "missing")], cwd=REPO, capture_output=True,
                         text=True)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert str(tmp_path / "missing") in res.stderr and len(res.stderr.strip().splitlines()) == 1
