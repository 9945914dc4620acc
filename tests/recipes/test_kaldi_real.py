"""recipes/kaldi/steps/nbest_rescore.sh against the real Kaldi: lattices made by Kaldi's
linear-to-nbest | nbest-to-lattice from the ci lists, a lang/ with G.fst (arpa2fst) and
G.carpa (utils/build_const_arpa_lm.sh), run from an egs folder whose utils/ are Kaldi's
own (run.pl, parse_options.sh), scored by Kaldi's compute-wer and steps/score_kaldi.sh.
Skipped, with one line saying how to build it, when the real Kaldi is absent."""
import os
import shutil
import subprocess

import numpy as np
import pytest

import nbest_rescore as nr
from kaldi_bed import CUTS, build, checksums, lists_dir, one_best_of_lattices, read_ark, read_int_text, sh
from test_kaldi_step import small_checkpoint

pytestmark = pytest.mark.slow  # the real Kaldi: lattices, lang, every run of the step

LMWT = 10
WEIGHTS = ["--lm-weight", LMWT, "--interp", 0.5, "--acoustic-scale", 1.0, "--word-ins-penalty", 0,
           "--history", "first-pass"]


@pytest.fixture(scope="module")
def bed(kaldi_real, DATA, ci_nbest, tmp_path_factory):
    root = tmp_path_factory.mktemp("kaldi_real")
    b = build(root, DATA, kaldi_real)
    lm = small_checkpoint(ci_nbest, root / "small.pt")
    small_checkpoint(ci_nbest, root / "lstm.pt", "lstm")  # the second LM of the two-LM run
    return b, lm


def run_step(b, *args):
    cmd = ["nice", "-n", "10", "bash", "steps/nbest_rescore.sh", *map(str, args)]
    return subprocess.run(cmd, cwd=b.egs, env=b.env, capture_output=True, text=True, timeout=600)


def expected_score(b, lms, name, DATA, tmp_path, nn_weights=None):
    nbest = nr.load_nbest(lists_dir(b, name, DATA, tmp_path / f"lists_{name}"))
    return nr.score(nbest, [nr.load_lm(lm) for lm in lms], lm_weight=LMWT, interp=0.5, word_ins_penalty=0.0,
                    acoustic_scale=1.0, history="first-pass", nn_weights=nn_weights)


def recovered_lists(out, num_jobs=3):
    """Per utterance, sorted (words, acoustic cost, n-gram cost, non-LM cost) of the step's archives."""
    lists = {}
    for j in range(1, num_jobs + 1):
        a = out / f"archives.{j}"
        words = read_int_text(a / "words")
        ac, withlm, nolm = read_ark(a / "acwt"), read_ark(a / "lmwt.withlm"), read_ark(a / "lmwt.nolm")
        for k, w in words.items():
            lists.setdefault(k.rsplit("-", 1)[0], []).append((w, ac[k], withlm[k] - nolm[k], nolm[k]))
    return {u: sorted(v) for u, v in lists.items()}


def input_lists(b, name, DATA):
    from kaldi_bed import NOLM_BASE, NOLM_PER_WORD

    words = read_int_text(DATA / "ci" / "words")
    ac = read_ark(DATA / "ci" / "ac_cost")
    lists = {}
    for k, w in words.items():
        lists.setdefault(k.rsplit("-", 1)[0], []).append(
            (w, ac[k], b.lm_cost[name][k], NOLM_PER_WORD * len(w) + NOLM_BASE))
    return {u: sorted(v) for u, v in lists.items()}


# input kind x first-pass LM removal x --nj: each input kind with each LM removal and with
# each --nj (archives-carpa-nj3 with two LMs: a GRU and an LSTM; lattices-carpa-nj3 with
# local/score.sh, then rerun from the archives and from the lattices into its output
# folder; archives-fst-nj1 with a WER output filter). The LM is removed per lattice,
# whatever the job count, so carpa-nj1 and fst-nj3 runs (about 40 s each) were left out
# (issue 36: the suite's time).
RUNS = [("lattices", "carpa", 3), ("lattices", "fst", 1), ("archives", "carpa", 3), ("archives", "fst", 1)]
TWO_LMS = ("archives", "carpa", 3)


@pytest.mark.parametrize("kind,lm_name,nj", RUNS, ids=[f"{k}-{n}-nj{j}" for k, n, j in RUNS])
def test_step_with_real_kaldi(bed, kind, lm_name, nj, DATA, tmp_path, request):
    b, lm = bed
    out = f"decode_{lm_name}_{kind}_nj{nj}"
    local = b.egs / "local"
    shutil.rmtree(local, ignore_errors=True)
    local.mkdir()
    with_local_score = (kind, lm_name, nj) == ("lattices", "carpa", 3)
    if with_local_score:  # an egs directory whose local/score.sh is Kaldi's score_kaldi.sh
        (local / "score.sh").symlink_to(b.egs / "steps" / "score_kaldi.sh")
    if (kind, lm_name, nj) == ("archives", "fst", 1):  # an egs directory with a WER output filter
        (local / "wer_output_filter").write_text("#!/bin/sh\nsed -e 's/ the / /g'\n")
        (local / "wer_output_filter").chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(local, ignore_errors=True))
    if with_local_score:  # the input decode directory, byte for byte, before the runs that follow
        before = checksums(b.egs / "decode_carpa")
    lms, extra = [lm], []
    if (kind, lm_name, nj) == TWO_LMS:
        lms, extra = [lm, lm.parent / "lstm.pt"], ["--nn-weights", "0.3,0.2"]
    res = run_step(b, "--nj", nj, "--use-lattices", str(kind == "lattices").lower(), *extra,
                   "--lang", f"lang_{lm_name}", *WEIGHTS, ",".join(map(str, lms)), "data", f"decode_{lm_name}", out)
    assert res.returncode == 0, res.stdout + res.stderr
    out = b.egs / out
    assert ("lattices" if kind == "lattices" else "N-best archives") in res.stdout.split("input: ")[1]
    assert "re-sharding" in res.stdout  # ci's document abcr0143 spans jobs 1 and 2

    # the N-best lists recovered from the lattices are the input lists
    got, want = recovered_lists(out), input_lists(b, lm_name, DATA)
    assert list(got) == list(want)
    for u in want:
        assert [g[0] for g in got[u]] == [w[0] for w in want[u]], u
        assert np.allclose([g[1:] for g in got[u]], [w[1:] for w in want[u]], atol=1e-3, rtol=0), u

    # the new 1-best is nbest-rescore score's on the same lists
    whole = expected_score(b, lms, lm_name, DATA, tmp_path, (0.3, 0.2) if len(lms) == 2 else None)
    nn_files = ["lmwt.nn.small", "lmwt.nn.lstm"] if len(lms) == 2 else ["lmwt.nn"]
    for j in (1, 2, 3):
        a = out / f"archives.{j}"
        assert sorted(p.name for p in a.glob("lmwt.nn*")) == sorted(nn_files)
        li, nolm, withlm = read_ark(a / "lmwt.interp"), read_ark(a / "lmwt.nolm"), read_ark(a / "lmwt.withlm")
        nns = [read_ark(a / f) for f in nn_files]
        ws = (0.3, 0.2) if len(lms) == 2 else (0.5,)
        for k in li:  # lmwt.interp = nolm + 0.5 * (withlm - nolm) + sum_k w_k * nn_k, by hand
            assert abs(li[k] - (nolm[k] + 0.5 * (withlm[k] - nolm[k]) + sum(w * c[k] for w, c in zip(ws, nns)))) < 2e-6
    text = {p[0]: tuple(p[1:]) for p in (line.split() for line in open(out / "text"))}
    assert text == whole.one_best
    # ... and the best path of the rebuilt lattices at LMWT (Kaldi's lattice-best-path)
    assert one_best_of_lattices(b, out, LMWT) == text

    # the WER line at the step's weights is compute-wer's, the merge's (Python) one too
    cw = sh(f"compute-wer --text --mode=present ark:data/text ark,p:{out}/text", b.egs, b.env)
    wer_line = next(line for line in cw.splitlines() if line.startswith("%WER"))
    assert (out / "score" / "wer").read_text().splitlines()[0] == wer_line
    assert wer_line in (out / "log" / "merge.log").read_text().splitlines()

    # scoring as Kaldi reports it: best_wer equals steps/score_kaldi.sh run by hand on the lattices
    best = (out / "scoring_kaldi" / "best_wer").read_text()
    filtered = (out / "scoring_kaldi" / "test_filt.txt").read_text()
    assert (" the " in filtered) == ((kind, lm_name, nj) != ("archives", "fst", 1))
    if with_local_score:
        assert "scoring with local/score.sh" in res.stdout
    else:
        assert (out / "log" / "kaldi_score.log").is_file()
    sh(f"steps/score_kaldi.sh --cmd run.pl data lang_fst {out.name}", b.egs, b.env)
    assert (out / "scoring_kaldi" / "best_wer").read_text() == best
    assert best.startswith("%WER ") and f" {out.name}/wer_" in best
    if with_local_score:
        reruns_leave_the_input_byte_identical(b, lm, out.name, before)


def reruns_leave_the_input_byte_identical(b, lm, out, before):
    """After the run from the lattices (test_step_with_real_kaldi[lattices-carpa-nj3],
    whose output folder ``out`` this reuses instead of a run of its own), runs from the
    archives (links into the input) into the same output folder, then from the lattices
    again: nothing in the input decode directory changes at either change of input (an
    earlier version wrote the new archives through the links), and the last run's
    archives are files of its own."""
    assert checksums(b.egs / "decode_carpa") == before
    for use in ("false", "true"):
        res = run_step(b, "--use-lattices", use, "--lang", "lang_carpa", "--skip-scoring", "true", *WEIGHTS,
                       lm, "data", "decode_carpa", out)
        assert res.returncode == 0, res.stdout + res.stderr
        assert checksums(b.egs / "decode_carpa") == before
    inputs = (b.egs / "decode_carpa").resolve()
    for p in (b.egs / out).glob("archives.*/*"):  # from lattices: new files, no links into the input
        assert not p.resolve().is_relative_to(inputs), p


def test_lattices_that_were_rescored_are_refused(bed, tmp_path):
    b, lm = bed
    dec = b.egs / "decode_rescored"
    shutil.copytree(b.egs / "decode_carpa", dec)
    (dec / "archives.2" / "lmwt.rnn").write_text((dec / "archives.2" / "lmwt.nolm").read_text())
    res = run_step(b, "--use-lattices", "true", "--lang", "lang_carpa", *WEIGHTS, lm, "data", dec.name,
                   "decode_rescored_nn")
    assert res.returncode == 1
    assert "archives.2/lmwt.rnn" in res.stderr and "counted twice" in res.stderr and "--use-lattices false" in res.stderr
    assert not (b.egs / "decode_rescored_nn" / "archives.1").exists()
