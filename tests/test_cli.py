"""The command line on the real ci lists: outputs checked against independent
computations (jiwer on the written text, the lists' own rank 1, one-pass perplexity)."""
import json
import math
import shutil

import jiwer
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from nbest_rescore.cli import main


def run(args, ok=True):
    res = CliRunner().invoke(main, [str(a) for a in args])
    if ok:
        assert res.exit_code == 0, res.output + repr(res.exception)
    return res


def read_text(path):
    out = {}
    for line in open(path, encoding="utf-8"):
        parts = line.rstrip("\n").split(" ", 1)
        out[parts[0]] = parts[1] if len(parts) > 1 else ""
    return out


@pytest.fixture(scope="module")
def scored(tiny_lm, DATA, tmp_path_factory):
    out = tmp_path_factory.mktemp("score")
    res = run(["score", "--lm", tiny_lm, "--nbest", DATA / "ci", "--out", out, "--ref", DATA / "ci" / "ref.txt",
               "--interp", "0.5", "--no-progress"])
    return out, res.output


def test_score_writes_outputs_and_wer_equals_jiwer(scored, DATA):
    out, stdout = scored
    hyp = read_text(out / "text")
    ref = read_text(DATA / "ci" / "ref.txt")
    assert list(hyp) == list(ref)
    keys = [line.split()[0] for line in open(DATA / "ci" / "text")]
    nn = [line.split() for line in open(out / "nn_cost")]
    assert [k for k, _ in nn] == keys and all(math.isfinite(float(v)) and float(v) > 0 for _, v in nn)
    o = jiwer.process_words([ref[u] for u in ref], [hyp[u] for u in ref])
    rep = json.loads((out / "wer.json").read_text())["wer"]["rescored"]
    expected = 100.0 * (o.substitutions + o.deletions + o.insertions) / (o.hits + o.substitutions + o.deletions)
    assert rep["wer"] == pytest.approx(expected)
    # the same total; the split into ins/del/sub is Kaldi's compute-wer's, which may
    # differ from jiwer's on tied alignments (tests/api/test_empty_references.py checks it)
    assert rep["substitutions"] + rep["deletions"] + rep["insertions"] == o.substitutions + o.deletions + o.insertions
    assert rep["hits"] == rep["ref_words"] - rep["substitutions"] - rep["deletions"]
    assert f"{expected:7.2f}" in stdout
    w = json.loads((out / "wer.json").read_text())["wer"]
    assert w["oracle"]["wer"] <= min(w["first_pass"]["wer"], w["rescored"]["wer"])


def test_interp_one_with_decoder_scale_gives_first_pass(tiny_lm, DATA, tmp_path):
    run(["score", "--lm", tiny_lm, "--nbest", DATA / "ci", "--out", tmp_path, "--interp", "1",
         "--acoustic-scale", "1", "--lm-weight", "9.5", "--word-ins-penalty", "-0.629606", "--no-progress"])
    rank1 = {line.split(" ", 1)[0].rsplit("-", 1)[0]: line.rstrip("\n").split(" ", 1)[1]
             for line in open(DATA / "ci" / "text") if line.split(" ", 1)[0].endswith("-1")}
    assert read_text(tmp_path / "text") == rank1


def test_tune_on_stored_costs(scored, DATA, tmp_path):
    out, _ = scored
    res = run(["tune", "--nbest", DATA / "ci", "--ref", DATA / "ci" / "ref.txt", "--nn-cost", out / "nn_cost",
               "--interps", "0.5,1", "--lm-weights", "8:11:1", "--out", tmp_path])
    best = json.loads((tmp_path / "tune.json").read_text())["best"]
    assert (tmp_path / "tune_wer.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"{best['wer']:.2f}%" in res.output
    # the reported best equals scoring at those weights with a fresh run of the combination
    from nbest_rescore.evaluation.wer import compute_wer
    from nbest_rescore.io.kaldi_nbest import read_kaldi_nbest_dir
    from nbest_rescore.io.references import read_references
    from nbest_rescore.io.score_ark import read_cost_ark

    lists = read_kaldi_nbest_dir(DATA / "ci")
    nn = read_cost_ark(out / "nn_cost")
    chosen = {}
    for u in lists.utterances:
        c = np.array([nn[k] for k in u.keys])
        s = -u.ac_cost + best["lm_weight"] * (best["interp"] * -u.lm_cost + (1 - best["interp"]) * -c) \
            + best["word_ins_penalty"] * u.num_words
        chosen[u.utt_id] = u.hyps[int(np.argmax(s))]
    assert compute_wer(read_references(DATA / "ci" / "ref.txt"), chosen).wer == pytest.approx(best["wer"])


def test_ppl_equals_one_pass_per_document(tiny_lm, DATA, tmp_path):
    from nbest_rescore.models import load_model

    refs = [line.split()[1:] for line in open(DATA / "ci" / "ref.txt")]
    docs = [refs[:5], refs[5:12], refs[12:20]]
    path = tmp_path / "t.txt"
    path.write_text("\n\n".join("\n".join(" ".join(s) for s in d) for d in docs) + "\n")
    rep = json.loads(run(["ppl", "--lm", tiny_lm, "--text", path, "--batch-size", "2"]).stdout)
    m, vocab, _ = load_model(tiny_lm)
    nll, n, oov, words = 0.0, 0, 0, 0
    for d in docs:
        ids = [vocab.eos]
        for s in d:
            ids += vocab.encode(s) + [vocab.eos]
            words += len(s)
            oov += sum(w not in vocab for w in s)
        x = torch.tensor(ids)[None]
        with torch.no_grad():
            lp, _ = m.log_probs(x[:, :-1], x[:, 1:], m.init_state(1))
        nll -= float(lp.double().sum())
        n += lp.numel()
    assert rep["perplexity"] == pytest.approx(math.exp(nll / n), rel=1e-4)
    assert rep["tokens"] == n and rep["oov_rate"] == pytest.approx(100.0 * oov / words)


def test_plain_format_scores_like_kaldi_dir(tiny_lm, DATA, tmp_path):
    from nbest_rescore.io.kaldi_nbest import read_kaldi_nbest_dir

    lists = read_kaldi_nbest_dir(DATA / "ci").utterances[:3]
    with open(tmp_path / "nbest.txt", "w") as f, open(tmp_path / "ac", "w") as fa, open(tmp_path / "lm", "w") as fl:
        for i, u in enumerate(lists):
            for h, a, l in zip(u.hyps, u.ac_cost, u.lm_cost):
                f.write(f"{i} {' '.join(h)} <eos>\n")
                fa.write(f"{-a}\n")
                fl.write(f"{-l}\n")
    run(["score", "--lm", tiny_lm, "--nbest", tmp_path / "nbest.txt", "--plain-ac", tmp_path / "ac",
         "--plain-ngram", tmp_path / "lm", "--out", tmp_path / "o", "--history", "none", "--no-progress"])
    run(["score", "--lm", tiny_lm, "--nbest", DATA / "ci", "--out", tmp_path / "k", "--history", "none",
         "--no-progress"])
    plain = [float(line.split()[1]) for line in open(tmp_path / "o" / "nn_cost")]
    kaldi = [float(line.split()[1]) for line in open(tmp_path / "k" / "nn_cost")][:len(plain)]
    assert np.allclose(plain, kaldi, atol=1e-5)


def copy_ci(DATA, tmp_path):
    d = tmp_path / "ci"
    d.mkdir()
    for name in ("text", "ac_cost", "lm_cost", "utt2doc"):
        shutil.copy(DATA / "ci" / name, d / name)
    return d


def test_malformed_cost_line_names_file_and_line(tiny_lm, DATA, tmp_path):
    d = copy_ci(DATA, tmp_path)
    lines = (d / "ac_cost").read_text().splitlines()
    lines[6] = lines[6].split()[0] + " not-a-number"
    (d / "ac_cost").write_text("\n".join(lines) + "\n")
    res = run(["score", "--lm", tiny_lm, "--nbest", d, "--out", tmp_path / "o"], ok=False)
    assert res.exit_code == 1 and "ac_cost:7" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "o" / "text").exists()


def test_missing_keys_are_listed(tiny_lm, DATA, tmp_path):
    d = copy_ci(DATA, tmp_path)
    lines = (d / "ac_cost").read_text().splitlines()
    (d / "ac_cost").write_text("\n".join(lines[:3] + lines[5:]) + "\n")
    res = run(["score", "--lm", tiny_lm, "--nbest", d, "--out", tmp_path / "o"], ok=False)
    assert res.exit_code == 1 and lines[3].split()[0] in res.output and lines[4].split()[0] in res.output


def test_nan_score_names_key(tiny_lm, DATA, tmp_path):
    d = copy_ci(DATA, tmp_path)
    lines = (d / "lm_cost").read_text().splitlines()
    key = lines[10].split()[0]
    lines[10] = f"{key} nan"
    (d / "lm_cost").write_text("\n".join(lines) + "\n")
    res = run(["score", "--lm", tiny_lm, "--nbest", d, "--out", tmp_path / "o"], ok=False)
    assert res.exit_code == 1 and key in res.output


def test_empty_hypothesis_is_valid(tiny_lm, DATA, tmp_path):
    d = copy_ci(DATA, tmp_path)
    lines = (d / "text").read_text().splitlines()
    lines[1] = lines[1].split()[0]
    (d / "text").write_text("\n".join(lines[:300]) + "\n")
    for name in ("ac_cost", "lm_cost"):
        (d / name).write_text("\n".join((d / name).read_text().splitlines()[:300]) + "\n")
    run(["score", "--lm", tiny_lm, "--nbest", d, "--out", tmp_path / "o", "--no-progress"])
    nn = dict(line.split() for line in open(tmp_path / "o" / "nn_cost"))
    assert float(nn[lines[1]]) > 0


def test_missing_references_fail_before_writing(tiny_lm, DATA, tmp_path):
    ref = tmp_path / "ref.txt"
    ref.write_text("".join(open(DATA / "ci" / "ref.txt").readlines()[:10]))
    res = run(["score", "--lm", tiny_lm, "--nbest", DATA / "ci", "--out", tmp_path / "o", "--ref", ref], ok=False)
    assert res.exit_code == 1 and "no reference" in res.output
    assert not (tmp_path / "o" / "text").exists()


def test_cuda_without_gpu_is_a_clear_error(tiny_lm, DATA, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    res = run(["score", "--lm", tiny_lm, "--nbest", DATA / "ci", "--out", tmp_path, "--device", "cuda"], ok=False)
    assert res.exit_code == 1 and "CUDA is not available" in res.output


def test_models_lists_registry():
    out = run(["models"]).output
    assert "amn" in out and "gru" in out and "lstm" in out and "rnn" in out


def test_bad_checkpoint_is_a_clear_error(DATA, tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_text("not a checkpoint")
    res = run(["score", "--lm", bad, "--nbest", DATA / "ci", "--out", tmp_path / "o"], ok=False)
    assert res.exit_code == 1 and "bad.pt" in res.output


def test_table_reads_score_and_tune_results(scored, DATA, tmp_path):
    out, _ = scored
    run(["tune", "--nbest", DATA / "ci", "--ref", DATA / "ci" / "ref.txt", "--nn-cost", out / "nn_cost",
         "--interps", "0.5,1", "--lm-weights", "9,10", "--out", tmp_path])
    res = run(["table", f"first=" + str(out / "wer.json") + ":first_pass", f"tuned={tmp_path / 'tune.json'}",
               f"oracle={out / 'wer.json'}:oracle"])
    w = json.loads((out / "wer.json").read_text())["wer"]
    best = json.loads((tmp_path / "tune.json").read_text())["best"]
    assert f"| first | {w['first_pass']['wer']:.2f} | 1 | 9.5 |" in res.output
    assert f"| tuned | {best['wer']:.2f} |" in res.output
    assert f"| oracle | {w['oracle']['wer']:.2f} |  |  |" in res.output
    bad = run(["table", "nonsense"], ok=False)
    assert bad.exit_code == 1 and "NAME=PATH" in bad.output


def test_score_reports_oov_rate_of_the_lists(scored, tiny_lm, DATA):
    from nbest_rescore.models import load_model

    out, stdout = scored
    _, vocab, _ = load_model(tiny_lm)
    words = [w for line in open(DATA / "ci" / "text") for w in line.split()[1:]]
    rate = 100.0 * sum(w not in vocab for w in words) / len(words)
    assert json.loads((out / "wer.json").read_text())["nn_oov_rate"] == pytest.approx(rate)
    assert f"{rate:.2f}% of tokens" in stdout


def test_models_lists_every_registered_model_with_a_summary():
    from nbest_rescore.models import MODEL_REGISTRY

    lines = run(["models"]).output.strip().splitlines()
    names = [ln.split()[0] for ln in lines]
    assert names == sorted(MODEL_REGISTRY)
    assert all(len(ln.split(None, 1)) == 2 and "\n" not in ln for ln in lines)


def test_info_counts_parameters_with_and_without_embeddings(tiny_lm):
    from nbest_rescore.models import load_model

    row = json.loads(run(["info", "--json", tiny_lm]).stdout)
    m, vocab, info = load_model(tiny_lm)
    total = sum(p.numel() for p in m.parameters())
    emb = m.embedding.weight.numel() + m.decoder.weight.numel()
    assert row["parameters"] == total and row["without_embeddings"] == total - emb
    assert row["vocab"] == len(vocab) and row["epochs"] == info["epochs"]
    table = run(["info", tiny_lm]).output
    assert f"{total / 1e6:.2f}" in table and "| gru |" in table


def _kaldi_archive(DATA, folder):
    """ci as a Kaldi N-best archive folder scored by kaldi-score (lmwt.interp = n-gram cost)."""
    folder.mkdir(parents=True)
    for src, dst in (("text", "words_text"), ("ac_cost", "acwt"), ("lm_cost", "lmwt.interp")):
        shutil.copyfile(DATA / "ci" / src, folder / dst)
    return folder


def test_kaldi_score_prints_best_wer_naming_dir_as_given(DATA, tmp_path, monkeypatch):
    _kaldi_archive(DATA, tmp_path / "archives.1")
    monkeypatch.chdir(tmp_path)
    res = run(["kaldi-score", "--ref", DATA / "ci" / "ref.txt", "--lm-cost", "lmwt.interp", "--min-lmwt", 8,
               "--max-lmwt", 10, "--word-ins-penalty", "0.0,0.5", "--out", "exp/decode", "archives.1"])
    best = (tmp_path / "exp" / "decode" / "scoring_kaldi" / "best_wer").read_text()
    assert res.output == best and best.startswith("%WER ")
    lmwt = (tmp_path / "exp" / "decode" / "scoring_kaldi" / "wer_details" / "lmwt").read_text().strip()
    wip = (tmp_path / "exp" / "decode" / "scoring_kaldi" / "wer_details" / "wip").read_text().strip()
    assert best.endswith(f" exp/decode/wer_{lmwt}_{wip}\n") and lmwt in "8 9 10".split() and wip in ("0.0", "0.5")
    first = (tmp_path / "exp" / "decode" / f"wer_{lmwt}_{wip}").read_text().splitlines()
    assert first[0] == "compute-wer --text --mode=present ark:exp/decode/scoring_kaldi/test_filt.txt ark,p:- "
    assert best.startswith(first[1].split(" [PARTIAL]")[0])
    assert "kaldi-score" in run(["--help"]).output


def test_kaldi_score_bad_options_and_input(DATA, tmp_path):
    arch = _kaldi_archive(DATA, tmp_path / "archives.1")
    out = tmp_path / "decode"
    base = ["kaldi-score", "--ref", DATA / "ci" / "ref.txt", "--lm-cost", "lmwt.interp", "--out", out]
    for extra, code, words in (
            (["--min-lmwt", 12, "--max-lmwt", 11], 2, ["--min-lmwt 12 is above --max-lmwt 11"]),
            (["--min-lmwt", 0], 2, ["--min-lmwt must be an integer >= 1"]),
            (["--word-ins-penalty", "0.5,x"], 2, ["--word-ins-penalty", "'x' is not a finite decimal number"]),
            (["--lm-cost", "lmwt.nope"], 1, [f"{arch}/lmwt.nope not found"]),
            (["--hyp-filter", "false"], 1, ["--hyp-filter 'false' failed", "exit status 1"])):
        res = run(base + extra + [arch], ok=False)
        assert res.exit_code == code and "Traceback" not in res.output, res.output
        assert all(w in res.output for w in words), (words, res.output)
        assert res.output.count("Error:") == 1  # one message (usage errors add click's usage lines)
    lines = (arch / "lmwt.interp").read_text().splitlines(keepends=True)
    (arch / "lmwt.interp").write_text("".join(lines[1:]))
    res = run(base + [arch], ok=False)
    assert res.exit_code == 1 and lines[0].split()[0] in res.output and "lmwt.interp" in res.output
    assert not out.exists()


def test_score_help_and_usage_errors_with_several_lms(DATA, tmp_path):
    """--lm repeatable; --nn-weights / --history counts checked before any file is read
    (the --lm files here are not even checkpoints)."""
    help_text = run(["score", "--help"]).output
    assert "--nn-weights" in help_text and "--weights" in help_text and "sum_k w_k * -nn_cost_k" in help_text
    not_lm = DATA / "ci" / "ref.txt"
    base = ["score", "--lm", not_lm, "--nbest", DATA / "ci", "--out", tmp_path / "o"]
    res = run(base + ["--history", "none", "--history", "rescored"], ok=False)
    assert res.exit_code == 2 and "--history is given 2 times for 1 --lm checkpoints" in res.output, res.output
    res = run(base + ["--lm", not_lm, "--interp", "0.2", "--nn-weights", "0.5,0.5"], ok=False)
    assert res.exit_code == 2 and "must sum to 1, they sum to 1.2; e.g. --nn-weights 0.4,0.4" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "o").exists()
