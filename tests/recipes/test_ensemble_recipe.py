"""The cpu-ensemble recipe (recipes/abc-nbest/conf/cpu-ensemble, run.sh stage 7): the
forward and backward GRU configs differ only in the direction; stage 7 tunes every
subset of the models and its table's 1-bests are the ones an independent argmax gives."""
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from nbest_rescore.config import load_train_config

REPO = Path(__file__).resolve().parents[2]


def test_forward_and_backward_configs_differ_only_in_direction(repo_data, monkeypatch):
    monkeypatch.chdir(REPO)
    conf = REPO / "recipes" / "abc-nbest" / "conf" / "cpu-ensemble"
    fwd = asdict(load_train_config(conf / "gru-fwd.yaml"))
    bwd = asdict(load_train_config(conf / "gru-bwd.yaml"))
    assert bwd["model_config"].pop("direction") == "backward" and "direction" not in fwd["model_config"]
    assert fwd == bwd
    amn = load_train_config(conf / "amn.yaml")
    for c in (fwd, asdict(amn)):  # the budget in words (epochs), seconds as a cap, one thread
        assert c["optim"]["max_epochs"] == 2 and c["optim"]["max_seconds"] == 1800 and c["optim"]["threads"] == 1
        assert c["model_config"]["output"] == "adaptive"


def _fake_costs(path: Path, lines, noise: float, rng) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k} {0.9 * float(v) + noise * rng.normal():.4f}\n" for k, v in lines))


def _run(exp, data, *args, tmp_path):
    env_path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    res = subprocess.run(["bash", "recipes/abc-nbest/run.sh", "--exp", str(exp), "--data", str(data), "--models",
                          "fwd bwd", *args], cwd=REPO, capture_output=True, text=True, timeout=600,
                         env={"PATH": env_path, "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def _read_text(path):
    out = {}
    for line in open(path):
        parts = line.split()
        out[parts[0]] = tuple(parts[1:])
    return out


def _fake_stage_6(exp, ci, lines, rng):
    """What stage 6's score runs leave in eval_evalset/ (no LM here): per model and
    history the NN costs, the dev-tuned weights run.sh compares with, and a 1-best
    (rank 1) with its wer.json."""
    from nbest_rescore.api import load_nbest, load_references
    from nbest_rescore.evaluation.wer import compute_wer, oracle_choice

    nbest, refs = load_nbest(ci), load_references(ci / "ref.txt")
    first = {u.utt_id: u.hyps[0] for u in nbest.utterances}
    wer = {"rescored": compute_wer(refs, first).to_dict(), "oracle": compute_wer(refs, oracle_choice(nbest, refs))
           .to_dict()}
    for m in ("fwd", "bwd"):
        for h in ("first-pass", "none"):
            out = exp / "eval_evalset" / f"score_{m}_{h}"
            _fake_costs(out / "nn_cost", lines, 1.5, rng)
            d = json.loads((exp / f"tune_{m}_{h}" / "tune.json").read_text())
            b = d["best"]
            (out / "weights").write_text(f"acoustic_scale={d.get('acoustic_scale', 1.0)} interp={b['interp']} "
                                         f"lm_weight={b['lm_weight']} word_ins_penalty={b['word_ins_penalty']}\n")
            (out / "text").write_text("".join(" ".join((u, *w)) + "\n" for u, w in first.items()))
            (out / "wer.json").write_text(json.dumps({"wer": wer, "weights": {"interp": b["interp"],
                                                                                "lm_weight": b["lm_weight"]}}))


def _own_one_best_errors(ci, tune_json, cost_paths, edit_distance):
    """Word errors of the 1-best at tune.json's weights by a plain per-utterance argmax."""
    from nbest_rescore.api import load_nbest, load_references, read_weights_file
    from nbest_rescore.rescoring.combine import combine

    nbest, refs = load_nbest(ci), load_references(ci / "ref.txt")
    w, names = read_weights_file(tune_json)
    costs = {n: {k: float(v) for k, v in (line.split() for line in open(cost_paths[n]))} for n in names}
    errors = words = 0
    for u in nbest.utterances:
        nn = [np.array([costs[n][k] for k in u.keys]) for n in names]
        s = combine(u.ac_cost, u.lm_cost, u.num_words, w, nn_cost=nn, graph_cost=u.graph_cost)
        best = max(range(len(u)), key=lambda i: (s[i], -i))
        errors += edit_distance(refs[u.utt_id], u.hyps[best])
        words += len(refs[u.utt_id])
    return errors, words


def _edit_distance(ref, hyp):
    prev = list(range(len(hyp) + 1))
    for i in range(1, len(ref) + 1):
        cur = [i] + [0] * len(hyp)
        for j in range(1, len(hyp) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ref[i - 1] != hyp[j - 1]))
        prev = cur
    return prev[-1]


@pytest.mark.slow
def test_stages_4_6_7_cross_validate_and_compare(DATA, tmp_path):
    """Stages 4, 6 and 7 on ci (dev and eval set alike; fake NN costs, no LM): every
    tune cross-validates over 2 folds, stage 7 tunes every subset and applies the
    combinations' dev-tuned weights to the eval set, and the tables carry the CV WER,
    the bootstrap intervals and P(better than ...)."""
    exp, data, ci = tmp_path / "exp", tmp_path / "data", DATA / "ci"
    data.mkdir()
    (data / "dev").symlink_to(ci)
    (tmp_path / "evalset").symlink_to(ci)
    rng = np.random.default_rng(0)
    lines = [line.split() for line in open(ci / "lm_cost")]
    for m, noise in (("fwd", 1.0), ("bwd", 2.0)):
        for h in ("first-pass", "none"):
            _fake_costs(exp / f"score_{m}_{h}" / "nn_cost", lines, noise, rng)
    _run(exp, data, "--stage", "4", "--stop-stage", "4", tmp_path=tmp_path)
    _fake_stage_6(exp, ci, lines, rng)
    _run(exp, data, "--stage", "6", "--eval-sets", str(tmp_path / "evalset"), tmp_path=tmp_path)
    ens = exp / "ensemble_first-pass"
    tunes = [exp / "tune_first_pass" / "tune.json"] + [exp / f"tune_{m}_{h}" / "tune.json" for m in ("fwd", "bwd")
                                                        for h in ("first-pass", "none")]
    for subset in ("fwd", "bwd", "fwd+bwd"):
        for search in ("grid", "line"):
            tunes.append(ens / subset / search / "tune.json")
    for t in tunes:
        d = json.loads(t.read_text())
        assert d["cross_validation"]["folds"] == 2 and len(d["cross_validation"]["per_fold"]) == 2, t
        assert len(d["utterance_errors"]["cross_validated"]) == 60 and "dev_tuned" in d["bootstrap"], t
    table = (exp / "ensemble_table.md").read_text()
    assert "| fwd + bwd | grid |" in table and "| fwd + bwd | line |" in table and "fwd vs bwd:" in table
    assert "CV WER" in table and "P(CV better than best single)" in table
    row = next(r for r in table.splitlines() if r.startswith("| fwd + bwd | line |")).split(" | ")
    assert row[4] == f"{json.loads((ens / 'fwd+bwd' / 'line' / 'tune.json').read_text())['cross_validation']['wer']:.2f}"
    assert 0.0 <= float(row[-1].rstrip(" |")) <= 1.0
    # the eval table: stage 6's rows, then each combination at its dev-tuned weights
    ev = exp / "eval_evalset"
    eval_table = (exp / "eval_table.md").read_text()
    assert "P(better than first pass (3-gram, lw 9.5))" in eval_table and "95% interval" in eval_table
    best = min(("fwd", "bwd"), key=lambda m: json.loads((exp / f"tune_{m}_first-pass" / "tune.json").read_text())
               ["best"]["wer"])
    assert f"P(better than {best.upper()} + 3-gram, history first-pass)" in eval_table
    for search in ("grid", "line"):
        name = f"fwd + bwd ({search} search, weights tuned on dev)"
        cells = next(r for r in eval_table.splitlines() if r.startswith(f"| {name} |")).split(" | ")
        costs = {m: ev / f"score_{m}_first-pass" / "nn_cost" for m in ("fwd", "bwd")}
        errors, words = _own_one_best_errors(tmp_path / "evalset", ens / "fwd+bwd" / search / "tune.json", costs,
                                             _edit_distance)
        assert cells[1] == f"{errors / words * 100:.2f}"
        assert cells[-1].rstrip(" |") and cells[-2]  # P(better than each baseline) filled in
    # the stage 5 summary reads the same tune.json blocks
    summary = subprocess.run([sys.executable, "recipes/abc-nbest/local/summary.py", str(exp), "fwd", "bwd"], cwd=REPO,
                             capture_output=True, text=True, timeout=120)
    assert summary.returncode == 0, summary.stderr[-2000:]
    fwd = next(r for r in summary.stdout.splitlines() if r.startswith("| fwd |")).split(" | ")
    d = json.loads((exp / "tune_fwd_first-pass" / "tune.json").read_text())
    assert fwd[9] == f"{d['cross_validation']['wer']:.2f}"
    assert fwd[10] == f"{d['bootstrap']['p_better_than_first_pass']['cross_validated']:.3f}"
