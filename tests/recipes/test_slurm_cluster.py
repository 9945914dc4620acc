"""The tests' private Slurm (tests/slurm_cluster.py, the ``slurm`` fixture): batch jobs
run and report their exit status, and a preemptible job is requeued the way a training
run that saves a checkpoint on SIGTERM and exits 75 will be: SIGTERM while running, or
a requeue after it ended, and the batch script starts again (SLURM_RESTART_COUNT 1) and
resumes from what the first run left (a real training job requeued while running:
tests/training/test_preemption.py). Skipped, with one line, without slurmctld, slurmd
and munge."""
import time

import pytest

# the first run saves "ckpt" and exits 75 on SIGTERM (or at once with EXIT_AT_ONCE);
# a run that finds ckpt resumes and exits 0. Slurm signals every process of the job: a
# script that ended with `sleep 60 & wait` could end (its sleep killed first) before
# its own SIGTERM trap ran, so it loops over short sleeps
SCRIPT = """#!/bin/bash
echo "run ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID"
if [ -f ckpt ]; then echo "resumed from $(cat ckpt)"; exit 0; fi
trap 'echo saved > ckpt; echo term; exit 75' TERM
echo started > started
[ -n "$EXIT_AT_ONCE" ] && { echo saved > ckpt; exit 75; }
for _ in $(seq 600); do sleep 0.1; done
"""


def wait_for_file(path, timeout=30):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} not written in {timeout} s"
        time.sleep(0.2)


def test_a_job_reports_its_exit_status(slurm, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\necho \"on $SLURMD_NODENAME in $SLURM_JOB_PARTITION\"\nexit 3\n")
    job = slurm.submit("-o", tmp_path / "job.out", script, cwd=tmp_path)
    info = slurm.wait(job, timeout=60)
    assert info["JobState"] == "FAILED" and info["exit_code"] == 3
    assert (tmp_path / "job.out").read_text() == f"on {slurm.node} in shared\n"


@pytest.mark.slow
def test_a_job_that_exited_75_is_requeued_and_resumes(slurm, tmp_path):
    (tmp_path / "job.sh").write_text(SCRIPT)
    job = slurm.submit("--requeue", "--open-mode=append", "-o", "job.out", "--export=ALL,EXIT_AT_ONCE=1", "job.sh",
                       cwd=tmp_path)
    info = slurm.wait(job, timeout=60)
    assert info["JobState"] == "FAILED" and info["exit_code"] == 75
    slurm.requeue(job)
    info = slurm.wait(job, timeout=60, min_restarts=1)
    out = (tmp_path / "job.out").read_text()
    assert (info["JobState"], info["exit_code"]) == ("COMPLETED", 0), (info.get("Reason"), out)
    assert out.endswith("resumed from saved\n")


def test_no_requeue_jobs_are_refused(slurm, tmp_path):
    job = slurm.submit("--no-requeue", "-o", "/dev/null", "--wrap", "sleep 30", cwd=tmp_path)
    try:
        with pytest.raises(RuntimeError, match="presently disabled"):
            slurm.requeue(job)
    finally:
        slurm.cancel(job)
