"""kaldi-score (Kaldi's steps/score_kaldi.sh over N-best lists) on the ci lists laid
out as two Kaldi archive folders: each penalty file's 1-best is a brute-force argmin
written here; with the real Kaldi, every wer_LMWT_WIP is byte for byte what
compute-wer writes and scoring_kaldi/best_wer what utils/best_wer.sh prints; the
filters are applied; Kaldi's alignment counts are reproduced."""
from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from nbest_rescore.api import KaldiScoreJob
from nbest_rescore.evaluation.edit_distance import kaldi_error_counts
from nbest_rescore.evaluation.kaldi_scoring import best_wer_line, compute_wer_command, kaldi_wers

LMWTS = range(7, 18)
WIPS = ("0.0", "0.5", "1.0")


def _pairs(path):
    """``key rest`` lines of a small Kaldi text file (private parser)."""
    out = {}
    for line in Path(path).read_text().splitlines():
        key, _, rest = line.partition(" ")
        out[key] = rest
    return out


def write_archives(DATA, root: Path, split_at=30):
    """ci as archive folders archives.1 (first ``split_at`` utterances) and archives.2:
    words_text, acwt (= ci ac_cost) and lmwt.interp (= ci lm_cost + a per-hypothesis
    offset). Returns the two folders."""
    text = (DATA / "ci" / "text").read_text().splitlines()
    ac = {k: float(v) for k, v in _pairs(DATA / "ci" / "ac_cost").items()}
    lm = {k: float(v) for k, v in _pairs(DATA / "ci" / "lm_cost").items()}
    rng = np.random.default_rng(0)
    utts = list(dict.fromkeys(line.split()[0].rsplit("-", 1)[0] for line in text))
    dirs = [root / "archives.1", root / "archives.2"]
    for d in dirs:
        d.mkdir()
    files = {d: {n: open(d / n, "w") for n in ("words_text", "acwt", "lmwt.interp")} for d in dirs}
    for line in text:
        key = line.split()[0]
        d = dirs[0] if utts.index(key.rsplit("-", 1)[0]) < split_at else dirs[1]
        files[d]["words_text"].write(line + "\n")
        files[d]["acwt"].write(f"{key} {ac[key]!r}\n")
        files[d]["lmwt.interp"].write(f"{key} {lm[key] + rng.uniform(-4, 4):.6f}\n")
    for f in (f for d in files.values() for f in d.values()):
        f.close()
    return dirs


def brute_force_one_best(dirs, lmwt, wip):
    """Per utterance, the first hypothesis of least acwt / LMWT + lm + WIP * words."""
    best = {}
    for d in dirs:
        words, ac, lm = _pairs(d / "words_text"), _pairs(d / "acwt"), _pairs(d / "lmwt.interp")
        for key, w in words.items():
            utt = key.rsplit("-", 1)[0]
            cost = float(ac[key]) / lmwt + float(lm[key]) + float(wip) * len(w.split())
            if utt not in best or cost < best[utt][0]:
                best[utt] = (cost, w)
    return {u: w for u, (_, w) in best.items()}


@pytest.fixture(scope="module")
def swept(DATA, tmp_path_factory):
    root = tmp_path_factory.mktemp("kaldi_score")
    dirs = write_archives(DATA, root)
    out = root / "decode"
    res = KaldiScoreJob(ref=str(DATA / "ci" / "ref.txt"), lm_cost="lmwt.interp", nbest_dirs=tuple(map(str, dirs)),
                        out=str(out)).run()
    return dirs, out, res


def test_penalty_files_hold_the_brute_force_one_best(swept, DATA):
    dirs, out, res = swept
    assert [(p.lmwt, p.wip) for p in res.points] == [(lmwt, wip) for wip in WIPS for lmwt in LMWTS]
    differ = set()
    for p in res.points:
        got = _pairs(out / "scoring_kaldi" / f"penalty_{p.wip}" / f"{p.lmwt}.txt")
        want = brute_force_one_best(dirs, p.lmwt, p.wip)
        assert list(got) == list(want) and got == want, (p.lmwt, p.wip)
        assert {u: " ".join(w) for u, w in p.one_best.items()} == want
        differ.add(tuple(want.values()))
    assert len(differ) > 5  # the sweep does change the 1-best
    assert (out / "scoring_kaldi" / "test_filt.txt").read_bytes() == (DATA / "ci" / "ref.txt").read_bytes()
    assert (out / "scoring_kaldi" / "best_wer").read_text() == res.best_wer_line + "\n"
    details = out / "scoring_kaldi" / "wer_details"
    assert (details / "lmwt").read_text() == f"{res.best.lmwt}\n"
    assert (details / "wip").read_text() == f"{res.best.wip}\n"
    assert res.best_wer_line.endswith(f" {out}/wer_{res.best.lmwt}_{res.best.wip}")
    assert res.best.wer.percent_wer == min(p.wer.percent_wer for p in res.points)


def test_wer_files_and_best_wer_equal_real_kaldi(swept, kaldi_real):
    _, out, _ = swept
    env = kaldi_real.env()
    for wip in WIPS:
        for lmwt in LMWTS:  # the command score_kaldi.sh runs, through bash as run.pl does
            cmd = (f"cat {out}/scoring_kaldi/penalty_{wip}/{lmwt}.txt | compute-wer --text --mode=present "
                   f"ark:{out}/scoring_kaldi/test_filt.txt ark,p:- >& {out}/real_wer")
            subprocess.run(["bash", "-c", cmd], env=env, check=True)
            assert (out / f"wer_{lmwt}_{wip}").read_bytes() == (out / "real_wer").read_bytes(), (lmwt, wip)
    grep = "; ".join(f"grep WER {out}/wer_{lmwt}_{wip} /dev/null" for wip in WIPS for lmwt in LMWTS)
    real = subprocess.run(["bash", "-c", f"({grep}) | utils/best_wer.sh"], cwd=kaldi_real.egs, env=env,
                          capture_output=True, check=True).stdout
    assert (out / "scoring_kaldi" / "best_wer").read_bytes() == real


def test_best_wer_ties_and_partial_lines_as_real_best_wer_sh(kaldi_real):
    lines = ["exp/d/wer_7_0.0:%WER 12.50 [ 1 / 8, 0 ins, 0 del, 1 sub ]",
             "exp/d/wer_8_0.0:%WER 12.5 [ 1 / 8, 1 ins, 0 del, 0 sub ] [PARTIAL]",
             "exp/d/wer_9_0.0:%WER 12.50 [ 1 / 8, 0 ins, 1 del, 0 sub ]",
             "exp/d/wer_10_0.0:%WER 25.00 [ 2 / 8, 0 ins, 1 del, 1 sub ]"]
    for order in (lines, lines[::-1], lines[1:], lines[3:]):
        real = subprocess.run(["bash", "utils/best_wer.sh"], cwd=kaldi_real.egs, env=kaldi_real.env(),
                              input="\n".join(order) + "\n", capture_output=True, text=True, check=True).stdout
        assert best_wer_line(order) + "\n" == real
    assert best_wer_line(lines) == "%WER 12.50 [ 1 / 8, 0 ins, 0 del, 1 sub ] exp/d/wer_7_0.0"
    assert best_wer_line(["no scores here"]) is None


def test_compute_wer_command_line_as_real_kaldi(kaldi_real, tmp_path):
    for name in ("plain", "it's", "a b", "x$y"):
        ref = tmp_path / name
        ref.write_text("u a b\n")
        proc = subprocess.run(f"compute-wer --text --mode=present ark:{_sh(ref)} ark,p:- < /dev/null",
                              shell=True, executable="/bin/bash", env=kaldi_real.env(), capture_output=True,
                              text=True)
        assert proc.stderr.splitlines()[0] + "\n" == compute_wer_command(f"ark:{ref}"), name


def _sh(path) -> str:
    return "'" + str(path).replace("'", "'\\''") + "'"


def test_filters_are_applied(DATA, tmp_path):
    dirs = write_archives(DATA, tmp_path)
    out = tmp_path / "decode"
    sed = "sed 's/ the / /g'"
    res = KaldiScoreJob(ref=str(DATA / "ci" / "ref.txt"), lm_cost="lmwt.interp", nbest_dirs=tuple(map(str, dirs)),
                        out=str(out), min_lmwt=9, max_lmwt=11, word_ins_penalty="0.0,1.5", hyp_filter=sed,
                        ref_filter=sed).run()
    ref_text = (DATA / "ci" / "ref.txt").read_text()
    assert " the " in ref_text
    filtered = (out / "scoring_kaldi" / "test_filt.txt").read_text()
    assert filtered == re.sub(" the ", " ", ref_text) != ref_text
    refs = {k: tuple(v.split()) for k, v in _pairs(out / "scoring_kaldi" / "test_filt.txt").items()}
    changed = 0
    for p in res.points:
        want = {u: re.sub(" the ", " ", f"{u} {w}")[len(u) + 1:]
                for u, w in brute_force_one_best(dirs, p.lmwt, p.wip).items()}
        changed += want != brute_force_one_best(dirs, p.lmwt, p.wip)
        assert _pairs(out / "scoring_kaldi" / f"penalty_{p.wip}" / f"{p.lmwt}.txt") == want
        [kw] = kaldi_wers(refs, [{u: tuple(w.split()) for u, w in want.items()}])
        assert (out / f"wer_{p.lmwt}_{p.wip}").read_text().splitlines()[1:] == kw.lines()
    assert changed == len(res.points) == 6


def _kaldi_counts(ref, hyp):
    """A line-by-line port of Kaldi's LevenshteinEditDistance(ref, hyp, &ins, &del, &sub)."""
    e = [(0, i, 0, i) for i in range(len(ref) + 1)]  # (ins, del, sub, cost)
    for h in hyp:
        cur = [(e[0][0] + 1, e[0][1], e[0][2], e[0][3] + 1)]
        for r in range(1, len(ref) + 1):
            ins, dele, sub = e[r][3] + 1, cur[r - 1][3] + 1, e[r - 1][3] + (h != ref[r - 1])
            if sub < ins and sub < dele:
                i, d, s, _ = e[r - 1]
                cur.append((i, d, s + (h != ref[r - 1]), sub))
            elif dele < ins:
                i, d, s, _ = cur[r - 1]
                cur.append((i, d + 1, s, dele))
            else:
                i, d, s, _ = e[r]
                cur.append((i + 1, d, s, ins))
        e = cur
    return e[-1][:3]


def _random_pairs(n, seed=0):
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):  # small vocabularies: many tied alignments
        vocab = "abcd"[:rng.randint(1, 4)]
        pairs.append((tuple(rng.choice(vocab) for _ in range(rng.randint(0, 9))),
                      tuple(rng.choice(vocab) for _ in range(rng.randint(0, 9)))))
    return pairs


def test_alignment_counts_are_kaldis():
    pairs = _random_pairs(1500) + [((), ()), (("a",), ()), ((), ("a", "b"))]
    got = kaldi_error_counts(pairs)
    assert got.dtype == np.int64 and got.shape == (len(pairs), 3)
    assert got.tolist() == [list(_kaldi_counts(r, h)) for r, h in pairs]
    assert kaldi_error_counts([]).shape == (0, 3)


def test_alignment_counts_equal_real_compute_wer(kaldi_real, tmp_path):
    pairs = [(r, h) for r, h in _random_pairs(800, seed=1) if r]
    for name, side in (("ref", 0), ("hyp", 1)):
        (tmp_path / name).write_text("".join(" ".join((f"u{i}", *p[side])) + "\n" for i, p in enumerate(pairs)))
    real = subprocess.run(["compute-wer", "--text", "--mode=present", f"ark:{tmp_path / 'ref'}",
                           f"ark:{tmp_path / 'hyp'}"], env=kaldi_real.env(), capture_output=True, text=True,
                          check=True).stdout.splitlines()
    [kw] = kaldi_wers({f"u{i}": r for i, (r, _) in enumerate(pairs)}, [{f"u{i}": h for i, (_, h) in enumerate(pairs)}])
    assert kw.lines() == real
