"""recipes/kaldi/steps/nbest_rescore.sh with ``--cmd`` Kaldi's own
``utils/parallel/slurm.pl`` (from the real Kaldi's egs/wsj/s5) on the tests' private
single-node Slurm (the ``slurm`` fixture, tests/slurm_cluster.py): the ci lists (their
first 20 hypotheses, to keep it short) in three Kaldi jobs (one document split across
two, so the step re-shards), ``--nj 3``. The rescoring jobs go through sbatch as one
array job, and every output but the logs (shards, merged costs, per-job lmwt.nn and
lmwt.interp, 1-best, WER lines, Kaldi-style scoring) is byte-identical to the same step
run beside it with Kaldi's run.pl. Skipped, with one line, without the
real Kaldi or without slurmctld, slurmd and munge."""
import filecmp
import os
import re
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import nbest_rescore as nr
from kaldi_bed import STEP
from test_kaldi_step import WEIGHTS, lay_out, small_checkpoint

pytestmark = pytest.mark.slow  # the Kaldi step, twice


@pytest.fixture(scope="module")
def lm_and_data(ci_nbest, DATA, tmp_path_factory):
    """A random GRU checkpoint and a Kaldi data dir (text = the ci references, utt2doc)."""
    root = tmp_path_factory.mktemp("kaldi_slurm")
    data = root / "data"
    data.mkdir()
    (data / "utt2doc").write_text((DATA / "ci" / "utt2doc").read_text())
    (data / "text").write_text((DATA / "ci" / "ref.txt").read_text())
    return small_checkpoint(ci_nbest, root / "small.pt"), data


def egs_dir(root: Path, kaldi_real, data: Path) -> Path:
    """An egs folder: Kaldi's utils/, the step in steps/, data/, and a path.sh that puts
    nbest-rescore (this Python) and Kaldi on PATH; slurm.pl's jobs get PATH alone
    (sbatch --export=PATH) and source path.sh, so PYTHONPATH goes there too."""
    egs = root / "egs"
    (egs / "steps").mkdir(parents=True)
    (egs / "utils").symlink_to(kaldi_real.egs / "utils")
    (egs / "steps" / "nbest_rescore.sh").symlink_to(STEP)
    (egs / "data").symlink_to(data)
    path = os.pathsep.join([str(Path(sys.executable).parent), *kaldi_real.bin_dirs])
    lines = [f"export PATH={shlex.quote(path)}:$PATH", "export LC_ALL=C"]
    if os.environ.get("PYTHONPATH"):
        lines.append(f"export PYTHONPATH={shlex.quote(os.environ['PYTHONPATH'])}")
    (egs / "path.sh").write_text("\n".join(lines) + "\n")
    return egs


def first_hyps(nbest, n):
    """The lists cut to their first ``n`` hypotheses (ids kept)."""
    return replace(nbest, utterances=tuple(
        replace(u, keys=u.keys[:n], hyps=u.hyps[:n], ac_cost=u.ac_cost[:n], lm_cost=u.lm_cost[:n],
                graph_cost=u.graph_cost[:n]) for u in nbest.utterances))


def run_steps(runs, env):
    """Runs the step (--nj 3) side by side in each ``(egs, cmd)`` of ``runs``, output
    decode_nn; returns their CompletedProcess."""
    procs = [subprocess.Popen(["nice", "-n", "10", "bash", "steps/nbest_rescore.sh", "--cmd", str(cmd), "--nj", "3",
                               *WEIGHTS, str(lm), "data", "decode", "decode_nn"], cwd=egs, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for egs, cmd, lm in runs]
    done = []
    for proc, (_, cmd, _) in zip(procs, runs):
        try:
            out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail(f"the step with {Path(cmd).name} ran over 300 s")
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def compared_files(out: Path):
    """Every output file under ``out`` (relative), but the logs (log/, slurm.pl's q/) and
    the jobs' run records score.JOB/.nbest-rescore-run, which hold their times."""
    rel = (p.relative_to(out) for p in out.rglob("*") if p.is_file())
    return sorted(str(r) for r in rel if r.parts[0] not in ("log", "q")
                  and not (r.parts[0].startswith("score.") and r.name == ".nbest-rescore-run"))


def test_step_under_slurm_pl_equals_run_pl(kaldi_real, slurm, lm_and_data, ci_nbest, tmp_path):
    lm, data = lm_and_data
    nbest = first_hyps(ci_nbest, 20)
    parallel = kaldi_real.egs / "utils" / "parallel"
    runs = []
    for name in ("run", "slurm"):  # the same egs folder twice, outputs of the same name
        egs = egs_dir(tmp_path / name, kaldi_real, data)
        lay_out(nbest, egs, [0, 20, 40, 60])  # document abcr0143 in jobs 1 and 2
        runs.append((egs, parallel / f"{name}.pl", lm))
    env = kaldi_real.env(SLURM_CONF=slurm.env["SLURM_CONF"])
    for res in run_steps(runs, env):
        assert res.returncode == 0, res.stdout + res.stderr
        assert "re-sharding by document" in res.stdout
    run, srun = (egs / "decode_nn" for egs, _, _ in runs)

    # the three rescoring jobs were one sbatch array job, run by Slurm
    submitted = re.findall(r"Submitted batch job (\d+)", (srun / "q" / "rescore.log").read_text())
    assert len(submitted) == 1, submitted
    job = submitted[0]
    for j in (1, 2, 3):
        log = (srun / "log" / f"rescore.{j}.log").read_text()
        assert f"# SLURM_ARRAY_JOB_ID={job}\n" in log and f"# SLURM_ARRAY_TASK_ID={j}\n" in log
        assert log.rstrip().endswith("with status 0")
        assert "SLURM_ARRAY_JOB_ID" not in (run / "log" / f"rescore.{j}.log").read_text()
    tasks = slurm.jobs(job)
    assert len(tasks) == 3 and {(t["JobState"], t["ExitCode"]) for t in tasks} == {("COMPLETED", "0:0")}
    assert not (run / "q").exists()

    # every output alike, byte for byte, and the 1-best is one nbest-rescore run's over the whole set
    files = compared_files(run)
    assert files == compared_files(srun)
    for must in ("text", "score/wer", "score/nn_cost", "score/.nbest-rescore-run", "archives.3/lmwt.nn",
                 "archives.3/lmwt.interp", "shards/3/text", "wer_10_0.0", "scoring_kaldi/best_wer"):
        assert must in files, must
    _, mismatch, errors = filecmp.cmpfiles(run, srun, files, shallow=False)
    assert not mismatch and not errors, (mismatch, errors)
    whole = nr.score(nbest, nr.load_lm(lm), lm_weight=9.5, interp=0.5, word_ins_penalty=-0.629606,
                     history="first-pass")
    expected = "".join(" ".join((u, *w)) + "\n" for u, w in whole.one_best.items())
    assert (srun / "text").read_text() == expected
