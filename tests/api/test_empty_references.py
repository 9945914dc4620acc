"""References with empty transcripts (a bare key in Kaldi's data/text), on the ci lists
with a few references blanked: merge prints exactly what the real Kaldi compute-wer
prints for the same files, score's wer.json counts them the same way, and tune
accepts them; only references that are all empty are refused (WER undefined)."""
import json
import subprocess

import pytest
from click.testing import CliRunner

from nbest_rescore.cli import main
from nbest_rescore.evaluation.wer import compute_wer
from nbest_rescore.io.kaldi_text import read_kaldi_text

BLANKED = (3, 17, 18, 42)  # utterance indices whose reference is emptied


def run(args):
    return CliRunner().invoke(main, [str(a) for a in args])


def blank_refs(DATA, path, which=BLANKED):
    """ci's ref.txt with the references of utterances ``which`` reduced to the bare key."""
    lines = (DATA / "ci" / "ref.txt").read_text().splitlines()
    for i in which:
        lines[i] = lines[i].split()[0]
    path.write_text("\n".join(lines) + "\n")
    return path


def fake_job(folder, nbest, utts, rank):
    """A finished score job's folder (text, nn_cost) whose 1-best of utterance ``i`` is
    its hypothesis ``rank(i)`` (clipped to the list)."""
    folder.mkdir()
    with open(folder / "text", "w") as text, open(folder / "nn_cost", "w") as cost:
        for i in utts:
            u = nbest.utterances[i]
            text.write(" ".join((u.utt_id, *u.hyps[min(rank(i), len(u) - 1)])) + "\n")
            cost.writelines(f"{k} 0.0\n" for k in u.keys)
    return folder


def compute_wer_lines(kaldi_real, ref, hyp):
    proc = subprocess.run(["compute-wer", "--text", "--mode=present", f"ark:{ref}", f"ark,p:{hyp}"],
                          env=kaldi_real.env(), capture_output=True, text=True, check=True)
    return proc.stdout.splitlines()


RANKS = {"rank1": lambda i: 0, "spread": lambda i: (7 * i) % 23, "deep": lambda i: 40 + i % 50}


@pytest.mark.parametrize("choice", sorted(RANKS))
def test_merge_wer_lines_equal_real_compute_wer(choice, kaldi_real, ci_nbest, DATA, tmp_path):
    ref = blank_refs(DATA, tmp_path / "ref.txt")
    n = len(ci_nbest)
    jobs = [fake_job(tmp_path / "j1", ci_nbest, range(0, 25), RANKS[choice]),
            fake_job(tmp_path / "j2", ci_nbest, range(25, n), RANKS[choice])]
    res = run(["merge", "--out", tmp_path / "merged", "--ref", ref, *jobs])
    assert res.exit_code == 0, res.output
    want = compute_wer_lines(kaldi_real, ref, tmp_path / "merged" / "text")
    assert res.output.splitlines()[1:] == want
    ref_words = sum(len(w) for w in read_kaldi_text(ref).values())
    assert f" / {ref_words}, " in want[0] and all(read_kaldi_text(ref)[ci_nbest.utt_ids[i]] == () for i in BLANKED)
    # one job only: the other references are "not present", the %WER line [PARTIAL]
    res = run(["merge", "--out", tmp_path / "half", "--ref", ref, jobs[0]])
    assert res.exit_code == 0, res.output
    want = compute_wer_lines(kaldi_real, ref, tmp_path / "half" / "text")
    assert want[0].endswith("[PARTIAL]") and res.output.splitlines()[1:] == want


def test_score_wer_json_counts_empty_references_as_kaldi(tiny_lm, kaldi_real, DATA, tmp_path):
    ref = blank_refs(DATA, tmp_path / "ref.txt")
    out = tmp_path / "out"
    res = run(["score", "--lm", tiny_lm, "--nbest", DATA / "ci", "--ref", ref, "--out", out, "--no-progress"])
    assert res.exit_code == 0, res.output
    r = json.loads((out / "wer.json").read_text())["wer"]["rescored"]
    want = compute_wer_lines(kaldi_real, ref, out / "text")[0]
    assert want.startswith(f"%WER {r['wer']:.2f} [ {r['errors']} / {r['ref_words']}, {r['insertions']} ins, "
                           f"{r['deletions']} del, {r['substitutions']} sub ]")


def test_tune_accepts_empty_references_and_refuses_all_empty(ci_nbest, DATA, tmp_path):
    ref = blank_refs(DATA, tmp_path / "ref.txt")
    res = run(["tune", "--nbest", DATA / "ci", "--ref", ref, "--lm-weights", "9.5", "--word-ins-penalty", "-0.629606",
               "--out", tmp_path / "t"])
    assert res.exit_code == 0, res.output
    best = json.loads((tmp_path / "t" / "tune.json").read_text())["best"]
    # the tuned WER is compute_wer's on the first-pass 1-best (the lists' decoder scale)
    refs = read_kaldi_text(ref)
    rank1 = {u.utt_id: u.hyps[0] for u in ci_nbest.utterances}
    assert best["wer"] == pytest.approx(compute_wer(refs, rank1).wer)
    every = blank_refs(DATA, tmp_path / "empty.txt", range(len(ci_nbest)))
    res = run(["tune", "--nbest", DATA / "ci", "--ref", every, "--lm-weights", "9.5"])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert str(every) in res.output and "0 reference words" in res.output and "undefined" in res.output


def test_merge_refuses_references_that_are_all_empty(ci_nbest, DATA, tmp_path):
    every = blank_refs(DATA, tmp_path / "empty.txt", range(len(ci_nbest)))
    job = fake_job(tmp_path / "j1", ci_nbest, range(len(ci_nbest)), RANKS["rank1"])
    res = run(["merge", "--out", tmp_path / "merged", "--ref", every, job])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert f"{every}: the references of all 60 scored utterances are empty (0 reference words)" in res.output
    assert not (tmp_path / "merged").exists()
