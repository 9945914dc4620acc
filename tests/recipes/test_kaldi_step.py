"""recipes/kaldi/steps/nbest_rescore.sh on the real ci lists laid out as a Kaldi decode
directory (archives.JOB/ of steps/rnnlmrescore.sh, num_jobs), run with the bundled
parse_options.sh and run.pl: the merged costs and 1-best equal one nbest-rescore run
over the whole set; missing inputs and a failing job are clear errors."""
import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nbest_rescore as nr

from benchmarks.kaldi_step_jobs import lay_out  # the benchmark's decode-dir layout

REPO = Path(__file__).resolve().parents[2]
STEP = REPO / "recipes" / "kaldi" / "steps" / "nbest_rescore.sh"
RUN_PL = REPO / "recipes" / "kaldi" / "utils" / "run.pl"
WEIGHTS = ["--lm-weight", "9.5", "--interp", "0.5", "--word-ins-penalty", "-0.629606", "--history", "first-pass"]


def small_checkpoint(nbest, path, family="gru"):
    """A random LM (GRU by default) of tests/tiny_models.py's size over the 300 most
    frequent list words."""
    from tiny_models import random_checkpoint

    return random_checkpoint(nbest, path, family)


def env():
    """PATH with this environment's nbest-rescore first; no Kaldi; a nice level so the
    step's jobs yield to other work; the repository on PYTHONPATH (``python -m
    benchmarks.kaldi_step_jobs`` from another folder)."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def step(cwd, *args):
    return subprocess.run(["nice", "-n", "10", "bash", str(STEP), *map(str, args)], cwd=cwd, env=env(),
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def kaldi(ci_nbest, DATA, tmp_path_factory):
    root = tmp_path_factory.mktemp("kaldi")
    lm = small_checkpoint(ci_nbest, root / "small.pt")
    data = root / "data"
    data.mkdir()
    (data / "utt2doc").write_text((DATA / "ci" / "utt2doc").read_text())
    (data / "text").write_text((DATA / "ci" / "ref.txt").read_text())
    whole = nr.score(ci_nbest, nr.load_lm(lm), refs=nr.load_references(DATA / "ci" / "ref.txt"), lm_weight=9.5,
                     interp=0.5, word_ins_penalty=-0.629606, history="first-pass")
    return root, lm, whole


def read_ark(path):
    return {k: float(v) for k, v in (line.split() for line in open(path))}


@pytest.mark.slow
def test_step_equals_one_run_and_reshards_a_split_document(kaldi, ci_nbest):
    """Thirds of the utterances (20 each): document abcr0143 (utterances 14-23) lies in
    jobs 1 and 2, so the step re-shards by document before scoring."""
    root, lm, whole = kaldi
    work = root / "thirds"
    work.mkdir()
    (work / "data").symlink_to(root / "data")
    lay_out(ci_nbest, work, [0, 20, 40, 60])
    res = step(work, "--nj", 3, *WEIGHTS, lm, "data", "decode", "decode_nn")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "is split across Kaldi's jobs: re-sharding by document" in res.stdout
    out = work / "decode_nn"
    assert (out / "shards" / "3" / "utt2doc").is_file()

    nn = {}
    for j in (1, 2, 3):
        part = read_ark(out / f"archives.{j}" / "lmwt.nn")
        assert list(part) == [line.split()[0] for line in open(work / "decode" / f"archives.{j}" / "words_text")]
        nn.update(part)
    assert list(nn) == list(whole.keys)
    assert np.allclose(list(nn.values()), whole.nn_cost, atol=1e-4, rtol=0)
    expected = "".join(" ".join((u, *w)) + "\n" for u, w in whole.one_best.items())
    assert (out / "text").read_text() == expected

    # lmwt.interp = nolm + interp * (withlm - nolm) + (1 - interp) * nn, and it gives the new 1-best
    interp = {}
    for j in (1, 2, 3):
        interp.update(read_ark(out / f"archives.{j}" / "lmwt.interp"))
    for u in ci_nbest.utterances:
        li = np.array([interp[k] for k in u.keys])
        assert np.allclose(li, 0.5 * u.lm_cost + 0.5 * np.array([nn[k] for k in u.keys]), atol=2e-6)
        score = -u.ac_cost - 9.5 * li - 0.629606 * u.num_words
        assert u.hyps[int(np.argmax(score))] == whole.one_best[u.utt_id]

    r = whole.wer["rescored"]
    lines = (out / "score" / "wer").read_text().splitlines()
    assert lines[0] == (f"%WER {r.wer:.2f} [ {r.errors} / {r.ref_words}, {r.insertions} ins, {r.deletions} del, "
                        f"{r.substitutions} sub ]")
    assert re.fullmatch(r"%SER \d+\.\d\d \[ \d+ / 60 \]", lines[1]) and lines[2].startswith("Scored 60 sentences")


@pytest.mark.slow
def test_a_failing_job_names_its_log_and_nothing_is_merged(kaldi, ci_nbest):
    root, lm, _ = kaldi
    work = root / "failing"
    work.mkdir()
    (work / "data").symlink_to(root / "data")
    decode = lay_out(ci_nbest, work, [0, 23, 44, 60])  # by document: no re-sharding
    acwt = decode / "archives.2" / "acwt"
    lines = acwt.read_text().splitlines(True)
    lines[5] = lines[5].split()[0] + " not-a-number\n"
    acwt.write_text("".join(lines))
    res = step(work, *WEIGHTS, lm, "data", "decode", "decode_nn")
    assert res.returncode != 0
    log = "decode_nn/log/rescore.2.log"
    assert f"1 / 3 failed, see {log}" in res.stderr and "nothing was merged" in res.stderr
    assert "re-sharding" not in res.stdout
    assert "not-a-number" in (work / log).read_text()
    out = work / "decode_nn"
    assert not (out / "text").exists() and not (out / "score").exists() and not list(out.glob("wer_*"))
    assert not list(out.glob("archives.*/lmwt.nn")) and not list(out.glob("archives.*/lmwt.interp"))


@pytest.mark.slow
def test_missing_inputs_are_clear_errors(kaldi, tmp_path):
    root, lm, _ = kaldi
    (tmp_path / "decode").mkdir()
    res = step(tmp_path, lm, root / "data", "decode", "out")
    assert res.returncode == 1 and "decode/num_jobs not found" in res.stderr

    (tmp_path / "decode" / "num_jobs").write_text("2\n")
    res = step(tmp_path, lm, root / "data", "decode", "out")
    assert res.returncode == 1
    assert "no lattices (lat.*.gz) and no N-best archive folder archives.1/" in res.stderr

    (tmp_path / "decode" / "lat.1.gz").write_bytes(b"")
    res = step(tmp_path, lm, root / "data", "decode", "out")
    assert res.returncode == 1 and "lattice-to-nbest" in res.stderr and "not on PATH" in res.stderr

    res = step(tmp_path, "--no-such-option", 1, lm, root / "data", "decode", "out")
    assert res.returncode == 1 and "invalid option --no-such-option" in res.stderr
    res = step(tmp_path, lm, root / "data", "decode")
    assert res.returncode == 1 and "Usage:" in res.stderr
    res = step(tmp_path, "--num-threads", 0, lm, root / "data", "decode", "out")
    assert res.returncode == 1 and "--num-threads must be an integer >= 1, got '0'" in res.stderr


def test_run_pl_substitutes_the_job_and_names_failed_logs(tmp_path):
    res = subprocess.run([str(RUN_PL), "JOB=1:3", "log/t.JOB.log", "echo", "job JOB", "|", "tr", "a-z", "A-Z",
                          "&&", "test", "JOB", "-ne", "2"], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 1 and "1 / 3 failed, see log/t.2.log" in res.stderr
    for j in (1, 2, 3):
        text = (tmp_path / "log" / f"t.{j}.log").read_text()
        assert f"JOB {j}\n" in text and f"(code {int(j == 2)})" in text


@pytest.mark.slow
def test_jobs_benchmark_cuts_at_documents_and_times_every_job_count(kaldi, ci_nbest, DATA, tmp_path):
    from benchmarks.kaldi_step_jobs import document_cuts

    cuts = document_cuts(ci_nbest, 3)
    assert cuts[0] == 0 and cuts[-1] == len(ci_nbest) and len(cuts) == 4
    docs = {u.doc_id for u in ci_nbest.utterances[:cuts[1]]} & {u.doc_id for u in ci_nbest.utterances[cuts[1]:]}
    assert not docs  # no document crosses a cut
    _, lm, whole = kaldi
    out = tmp_path / "nj.json"
    res = subprocess.run(["nice", "-n", "10", sys.executable, "-m", "benchmarks.kaldi_step_jobs",
                          "--lm", str(lm), "--nbest", str(DATA / "ci"), "--nj", "1", "2", "--repeat", "1",
                          "--json", str(out)], capture_output=True, text=True, cwd=tmp_path, env=env(), timeout=600)
    assert res.returncode == 0, res.stderr
    import json

    d = json.loads(out.read_text())
    assert set(d["runs"]) == {"1x1", "2x1"} and d["hypotheses"] == 6000  # --nj x --num-threads
    wer = whole.wer["rescored"]
    for r in d["runs"].values():  # compute-wer's line, the whole-set WER
        assert r["wer"].startswith(f"%WER {wer.wer:.2f} [ {wer.errors} / {wer.ref_words},")


def write_utt2doc(nbest, data):
    data.mkdir()
    (data / "utt2doc").write_text("".join(f"{u.utt_id} {u.doc_id}\n" for u in nbest.utterances))


def replicated(nbest, copies, n_hyps):
    """``copies`` copies of the lists (utterance and document ids prefixed ``r<i>-``), each
    cut to its first ``n_hyps`` hypotheses."""
    from dataclasses import replace

    utts = []
    for r in range(copies):
        for u in nbest.utterances:
            utt = f"r{r}-{u.utt_id}"
            utts.append(replace(u, utt_id=utt, doc_id=f"r{r}-{u.doc_id}",
                                keys=tuple(f"{utt}-{i + 1}" for i in range(n_hyps)), hyps=u.hyps[:n_hyps],
                                ac_cost=u.ac_cost[:n_hyps], lm_cost=u.lm_cost[:n_hyps],
                                graph_cost=u.graph_cost[:n_hyps]))
    return replace(nbest, utterances=tuple(utts))


@pytest.mark.slow
def test_a_document_split_across_jobs_of_200_utterances(kaldi, ci_nbest, tmp_path):
    """4 jobs of 200 utterances, one document in jobs 1 and 2: the document check reads
    every job (an earlier version's pipe died of SIGPIPE here and the step stopped with
    'cannot read the archives')."""
    _, lm, _ = kaldi
    big = replicated(ci_nbest, 14, 2)  # 840 utterances; utterance 200 is inside r3-abcr0143
    write_utt2doc(big, tmp_path / "data")
    decode = lay_out(big, tmp_path, [0, 200, 400, 600, 840])
    assert big.utterances[199].doc_id == big.utterances[200].doc_id
    res = step(tmp_path, *WEIGHTS, "--skip-scoring", "true", lm, "data", "decode", "decode_nn")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"document {big.utterances[200].doc_id} (jobs 1 and 2) is split across Kaldi's jobs" in res.stdout
    whole = nr.score(big, nr.load_lm(lm), lm_weight=9.5, interp=0.5, word_ins_penalty=-0.629606,
                     history="first-pass")
    text = {p[0]: tuple(p[1:]) for p in (line.split() for line in open(tmp_path / "decode_nn" / "text"))}
    assert text == whole.one_best
    assert len(list(decode.glob("archives.*"))) == 4


@pytest.mark.slow
def test_cmd_sh_is_not_sourced(kaldi, ci_nbest, tmp_path):
    """Kaldi's steps take --cmd, never ./cmd.sh (whose cmd=queue.pl would change the default)."""
    _, lm, _ = kaldi
    write_utt2doc(ci_nbest, tmp_path / "data")
    lay_out(ci_nbest, tmp_path, [0, 23, 44, 60])
    (tmp_path / "cmd.sh").write_text("cmd=no-such-queue.pl\nexport cmd\n")
    res = step(tmp_path, *WEIGHTS, "--skip-scoring", "true", lm, "data", "decode", "decode_nn")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "no-such-queue" not in res.stdout + res.stderr


@pytest.mark.slow
def test_use_lattices_default_and_refusals(kaldi, ci_nbest, tmp_path):
    """Both inputs there: the archives are read (no Kaldi needed); lattices beside NN costs
    of an earlier rescoring are refused before anything is written; a bad value is named."""
    _, lm, _ = kaldi
    write_utt2doc(ci_nbest, tmp_path / "data")
    decode = lay_out(ci_nbest, tmp_path, [0, 23, 44, 60])
    for j in (1, 2, 3):
        (decode / f"lat.{j}.gz").write_bytes(b"")
    res = step(tmp_path, *WEIGHTS, "--skip-scoring", "true", lm, "data", "decode", "decode_nn")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "input: N-best archives decode/archives.JOB/" in res.stdout
    (decode / "archives.3" / "lmwt.rnn").write_text("x 1\n")
    res = step(tmp_path, "--use-lattices", "true", *WEIGHTS, lm, "data", "decode", "decode_nn2")
    assert res.returncode == 1 and "decode/archives.3/lmwt.rnn" in res.stderr and "counted twice" in res.stderr
    assert not (tmp_path / "decode_nn2" / "archives.1").exists()
    res = step(tmp_path, "--use-lattices", "yes", *WEIGHTS, lm, "data", "decode", "decode_nn2")
    assert res.returncode == 1 and "--use-lattices takes true or false" in res.stderr


@pytest.mark.slow
def test_several_lms_weights_are_checked_before_any_work(kaldi, tmp_path):
    root, lm, _ = kaldi
    (tmp_path / "decode").mkdir()
    two = f"{lm},{lm}"
    res = step(tmp_path, "--nn-weights", "0.5", two, root / "data", "decode", "out")
    assert res.returncode == 1 and "--nn-weights has 1 weights for 2 LMs" in res.stderr
    res = step(tmp_path, "--nn-weights", "0.3,0.3", two, root / "data", "decode", "out")
    assert res.returncode == 1 and "--interp 0.5 and --nn-weights 0.3,0.3 must sum to 1" in res.stderr
    res = step(tmp_path, f"{lm},{tmp_path}/missing.pt", root / "data", "decode", "out")
    assert res.returncode == 1 and f"the LM checkpoint {tmp_path}/missing.pt does not exist" in res.stderr


@pytest.mark.slow
def test_step_with_an_hf_lm_beside_a_checkpoint(kaldi, ci_nbest, hf_lm):
    """--lm small.pt,hf:DIR over 3 jobs: the merged per-LM costs and 1-best equal one
    score run over the whole set with the same two LMs (the first 24 utterances of ci,
    their 25 best hypotheses: the two LMs' scoring, not the set's size, is the point)."""
    root, lm, _ = kaldi
    hf = f"hf:{hf_lm('gpt2')}"
    work = root / "hf"
    work.mkdir()
    (work / "data").symlink_to(root / "data")
    k = slice(0, 25)
    part = nr.NbestSet(tuple(type(u)(u.utt_id, u.doc_id, u.keys[k], u.hyps[k], u.ac_cost[k], u.lm_cost[k],
                                     u.graph_cost[k]) for u in ci_nbest.utterances[:24]), ci_nbest.doc_source)
    lay_out(part, work, [0, 8, 16, 24])
    res = step(work, "--nj", 3, "--nn-weights", "0.25,0.25", *WEIGHTS, f"{lm},{hf}", "data", "decode", "decode_nn")
    assert res.returncode == 0, res.stdout + res.stderr
    refs = nr.load_references(root / "data" / "text")
    whole = nr.score(part, [nr.load_lm(lm), nr.load_lm(hf)], refs={u.utt_id: refs[u.utt_id] for u in part.utterances},
                     lm_weight=9.5, interp=0.5, nn_weights=[0.25, 0.25], word_ins_penalty=-0.629606,
                     history="first-pass")
    expected = "".join(" ".join((u, *w)) + "\n" for u, w in whole.one_best.items())
    assert (work / "decode_nn" / "text").read_text() == expected
    name = hf_lm("gpt2").name
    nn = {}
    for j in (1, 2, 3):
        nn.update(read_ark(work / "decode_nn" / f"archives.{j}" / f"lmwt.nn.{name}"))
    assert np.allclose([nn[k] for k in whole.keys], whole.nn_costs_by_lm[name], atol=1e-4, rtol=0)


@pytest.mark.slow
def test_archives_beyond_num_jobs_are_refused_before_anything_is_written(kaldi, ci_nbest):
    """num_jobs 1 beside archives.2/ and archives.3/: Kaldi's scripts would rescore job 1
    alone and print a [PARTIAL] WER; the step refuses, naming archives.2, and writes no
    output folder (not even log/)."""
    root, lm, _ = kaldi
    work = root / "extra_jobs"
    work.mkdir()
    (work / "data").symlink_to(root / "data")
    decode = lay_out(ci_nbest, work, [0, 23, 44, 60])
    (decode / "num_jobs").write_text("1\n")
    res = step(work, *WEIGHTS, lm, "data", "decode", "decode_nn")
    assert res.returncode == 1
    assert "num_jobs says 1 but" in res.stderr and "archives.2 exists" in res.stderr, res.stderr
    assert not (work / "decode_nn").exists()
    (decode / "num_jobs").write_text("2\n")
    res = step(work, *WEIGHTS, lm, "data", "decode", "decode_nn")
    assert res.returncode == 1 and "archives.3 exists" in res.stderr and not (work / "decode_nn").exists()


def test_lattice_inputs_are_checked_before_anything_is_written(kaldi, tmp_path):
    """Stage 0 with lattices: --lang, its words.txt and G.fst, and every job's
    lat.JOB.gz (present and gzip) are checked before OUT/ (or OUT/log) exists. Kaldi's
    binaries stand in as never-run commands on PATH: each case fails before any runs."""
    root, lm, _ = kaldi
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for b in ("lattice-to-nbest", "lattice-scale", "lattice-compose", "lattice-1best", "fstproject",
              "nbest-to-linear", "linear-to-nbest", "nbest-to-lattice", "lattice-lmrescore-const-arpa"):
        (bin_dir / b).write_text("#!/bin/sh\necho never run >&2\nexit 9\n")
        (bin_dir / b).chmod(0o755)
    decode, lang = tmp_path / "decode", tmp_path / "lang"
    decode.mkdir()
    lang.mkdir()
    (decode / "num_jobs").write_text("2\n")
    (decode / "lat.1.gz").write_bytes(gzip.compress(b"utt1 \n"))

    def run(*extra):
        return subprocess.run(["bash", str(STEP), *WEIGHTS, *map(str, extra), lm, root / "data", "decode", "out"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env={**env(), "PATH": f"{bin_dir}:{env()['PATH']}"})

    cases = [((), "give --lang"), (("--lang", lang), "lang/words.txt not found")]
    for extra, message in cases:
        res = run(*extra)
        assert res.returncode == 1 and message in res.stderr and not (tmp_path / "out").exists(), res.stderr
    (lang / "words.txt").write_text("<eps> 0\n")
    res = run("--lang", lang)
    assert res.returncode == 1 and "decode/lat.2.gz not found (num_jobs is 2)" in res.stderr, res.stderr
    (decode / "lat.2.gz").write_text("utt1 not compressed\n")
    res = run("--lang", lang)
    assert res.returncode == 1 and "decode/lat.2.gz is not gzip-compressed" in res.stderr, res.stderr
    (decode / "lat.2.gz").write_bytes(gzip.compress(b"utt2 \n"))
    res = run("--lang", lang)
    assert res.returncode == 1 and "neither" in res.stderr and "G.fst nor" in res.stderr, res.stderr
    assert "never run" not in res.stderr and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_max_ngram_order_merges_histories_as_score_does(kaldi, ci_nbest, DATA):
    """--max-ngram-order 3 (lmrescore_rnnlm_lat.sh's option) reaches nbest-rescore score:
    the costs of one nbest-rescore run with history merging, not the exact ones; a bad
    value stops the step before any work."""
    root, lm, whole = kaldi
    work = root / "merged"
    work.mkdir()
    (work / "data").symlink_to(root / "data")
    lay_out(ci_nbest, work, [0, 60])
    res = step(work, "--max-ngram-order", 1, *WEIGHTS, lm, "data", "decode", "decode_nn")
    assert res.returncode != 0 and "--max-ngram-order must be 0 (exact) or an integer >= 2 (histories of n-1 words), got '1'" in res.stdout + res.stderr
    assert not (work / "decode_nn").exists()
    res = step(work, "--max-ngram-order", 3, *WEIGHTS, lm, "data", "decode", "decode_nn")
    assert res.returncode == 0, res.stdout + res.stderr
    merged = nr.score(ci_nbest, nr.load_lm(lm), lm_weight=9.5, interp=0.5, word_ins_penalty=-0.629606,
                      history="first-pass", max_ngram_order=3)
    nn = read_ark(work / "decode_nn" / "archives.1" / "lmwt.nn")
    assert list(nn) == list(merged.keys)
    assert np.allclose(list(nn.values()), merged.nn_cost, atol=1e-4, rtol=0)
    assert not np.allclose(merged.nn_cost, whole.nn_cost, atol=1e-3, rtol=0)
