"""The bash stand-ins bundled in recipes/kaldi/utils/ (run.pl, parse_options.sh) behave
as a subset of Kaldi's own: the same command lines are run with the bundled script and,
when the real Kaldi is there (the kaldi_real fixture), with Kaldi's egs/wsj/s5/utils
one, and must give the same exit status, variables, positional arguments, log contents
(apart from the header and footer lines and timestamps), number of jobs running at
once, and refusals. Tests of the bundled scripts alone do not need Kaldi."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUNDLED = REPO / "recipes" / "kaldi" / "utils"


@pytest.fixture(params=["bundled", pytest.param("kaldi", marks=pytest.mark.slow)])
def utils(request):
    """The utils/ folder under test: the bundled one, then Kaldi's (skipped without it)."""
    if request.param == "bundled":
        return BUNDLED
    return request.getfixturevalue("kaldi_real").egs / "utils"


# ---------------------------------------------------------------------------------------
# parse_options.sh

DEFAULTS = {"nj": "4", "use_gpu": "false", "lm_weight": "10", "cmd": "run.pl", "score_opts": ""}
HARNESS = """{set_opts}
nj=4
use_gpu=false
lm_weight=10
cmd=run.pl
score_opts=
{help}
. "$PARSE_OPTIONS"
for v in nj use_gpu lm_weight cmd score_opts config; do
  if [ -n "${{!v+set}}" ]; then printf 'var %s=[%s]\\n' "$v" "${{!v}}"; fi
done
for a in "$@"; do printf 'arg [%s]\\n' "$a"; done
"""
HELP = 'help_message="Usage: harness.sh [options] <in> <out>"'
CONFIGS = {"a.conf": "nj=7\nlm_weight=3\n", "b.conf": "nj=8\nuse_gpu=true\n"}

# id, arguments, exit status, then for 0: variables set (over DEFAULTS) and positional
# arguments left, or for a refusal: words of the message (Kaldi's and the bundled one's)
PO_CASES = [
    ("name-value", ["--nj", "3", "--lm-weight", "12", "--score-opts", "--cache-size 500", "in", "out"], 0,
     {"nj": "3", "lm_weight": "12", "score_opts": "--cache-size 500"}, ["in", "out"]),
    ("boolean", ["--use-gpu", "true", "in"], 0, {"use_gpu": "true"}, ["in"]),
    ("value-with-spaces", ["--cmd", "queue.pl -l arch=*64 --mem 2G", "in"], 0,
     {"cmd": "queue.pl -l arch=*64 --mem 2G"}, ["in"]),
    ("single-dash-ends-options", ["--nj", "2", "-x", "in"], 0, {"nj": "2"}, ["-x", "in"]),
    ("empty-argument-ends-options", ["", "--nj", "2"], 0, {}, ["", "--nj", "2"]),
    ("config-then-option", ["--config", "a.conf", "--nj", "5", "in"], 0,
     {"nj": "5", "lm_weight": "3", "config": "a.conf"}, ["in"]),
    ("option-then-config", ["--nj", "5", "--config", "a.conf", "in"], 0,
     {"nj": "5", "lm_weight": "3", "config": "a.conf"}, ["in"]),
    ("configs-in-order", ["--config", "a.conf", "--lm-weight", "1", "--config", "b.conf"], 0,
     {"nj": "8", "use_gpu": "true", "lm_weight": "1", "config": "b.conf"}, []),
    ("boolean-refused", ["--use-gpu", "yes", "in"], 1, 'expected "true" or "false": --use-gpu yes'),
    ("boolean-from-config-refused", ["--config", "b.conf", "--use-gpu", "no", "in"], 1,
     'expected "true" or "false": --use-gpu no'),
    ("unknown-option", ["--nj", "2", "--no-such", "1", "in"], 1, "invalid option --no-such"),
    ("name=value-refused", ["--nj=3", "in"], 1, "must be of the form --name value, got '--nj=3'"),
    ("config=file-refused", ["--config=a.conf", "in"], 1, "must be of the form --name value, got '--config=a.conf'"),
    ("missing-config", ["--nj", "2", "--config", "none.conf", "in"], 1, "missing config 'none.conf'"),
    ("empty-cmd", ["--cmd", "", "in"], 1, "empty argument to --cmd option"),
]


def parse_options(utils_dir, args, cwd, set_opts="", help=HELP):
    cwd.mkdir(parents=True, exist_ok=True)
    for name, text in CONFIGS.items():
        (cwd / name).write_text(text)
    (cwd / "harness.sh").write_text(HARNESS.format(set_opts=set_opts, help=help))
    env = {**os.environ, "PARSE_OPTIONS": str(utils_dir / "parse_options.sh")}
    return subprocess.run(["bash", "harness.sh", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=10)


def dump(stdout):
    """(variables, positional arguments) printed by the harness."""
    variables = dict(re.findall(r"^var (\w+)=\[(.*)\]$", stdout, re.M))
    return variables, re.findall(r"^arg \[(.*)\]$", stdout, re.M)


@pytest.mark.parametrize("case", PO_CASES, ids=[c[0] for c in PO_CASES])
def test_parse_options_sets_and_refuses_as_kaldi(utils, case, tmp_path):
    """--name value (- to _), booleans checked, --config read before every other option
    whatever the order, --name=value, unknown options and an empty --cmd refused."""
    _, args, rc, *expected = case
    res = parse_options(utils, args, tmp_path)
    assert res.returncode == rc, res.stdout + res.stderr
    if rc == 0:
        assert dump(res.stdout) == ({**DEFAULTS, **expected[0]}, expected[1])
        assert res.stderr == ""
    else:
        assert "var " not in res.stdout
        assert expected[0] in res.stdout + res.stderr


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_parse_options_help(utils, flag, tmp_path):
    res = parse_options(utils, ["--nj", "3", flag, "in"], tmp_path / "with")
    assert res.returncode == 0 and res.stdout == "" and res.stderr == "Usage: harness.sh [options] <in> <out>\n"
    res = parse_options(utils, [flag], tmp_path / "without", help="")
    assert res.returncode == 0 and res.stdout == "" and res.stderr == "No help found.\n"


@pytest.mark.slow
def test_parse_options_output_same_as_kaldi(kaldi_real, tmp_path):
    """Every case run with both scripts: same exit status and, when accepted, the same
    variables, arguments and stderr (byte for byte)."""
    for name, args, *_ in PO_CASES + [("help", ["--nj", "2", "--help"], 0)]:
        mine = parse_options(BUNDLED, args, tmp_path / name / "bundled")
        real = parse_options(kaldi_real.egs / "utils", args, tmp_path / name / "kaldi")
        assert mine.returncode == real.returncode, name
        if real.returncode == 0:
            assert (mine.stdout, mine.stderr) == (real.stdout, real.stderr), name


def test_parse_options_refuses_what_kaldi_mishandles(tmp_path):
    """Bundled only: where Kaldi's parse_options.sh loops for ever (an option without a
    value) or silently eats an argument ("--"), the bundled one stops with a message; a
    value is stored as given (Kaldi's evals it); it works under set -eu."""
    res = parse_options(BUNDLED, ["--nj"], tmp_path / "novalue")
    assert res.returncode == 1 and "option --nj needs a value" in res.stderr
    res = parse_options(BUNDLED, ["--nj", "2", "--", "in"], tmp_path / "dashdash")
    assert res.returncode == 1 and "invalid option --" in res.stderr and "var " not in res.stdout
    res = parse_options(BUNDLED, ["--score-opts", "$HOME `id` \"x\"", "in"], tmp_path / "literal")
    assert res.returncode == 0 and dump(res.stdout)[0]["score_opts"] == "$HOME `id` \"x\""
    res = parse_options(BUNDLED, ["--nj", "2", "--config", "a.conf", "in"], tmp_path / "eu", set_opts="set -eu")
    assert res.returncode == 0, res.stderr
    assert dump(res.stdout) == ({**DEFAULTS, "nj": "2", "lm_weight": "3", "config": "a.conf"}, ["in"])
    res = parse_options(BUNDLED, ["-h"], tmp_path / "eu-help", set_opts="set -eu", help="")
    assert res.returncode == 0 and res.stderr == "No help found.\n"


# ---------------------------------------------------------------------------------------
# run.pl


def run_pl(utils_dir, args, cwd, timeout=60):
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run([str(utils_dir / "run.pl"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def read_log(path):
    """(the command header line, the lines written by the command, its exit code)"""
    lines = path.read_text().splitlines()
    ended = [m.group(1) for m in (re.match(r"# Ended \(code (\d+)\)", x) for x in lines) if m]
    return lines[0], [x for x in lines if not x.startswith("#")], int(ended[-1]) if ended else None


def logs(cwd):
    return {p.name: read_log(p) for p in sorted((cwd / "log").glob("*"))} if (cwd / "log").is_dir() else {}


# id, arguments, exit status, {log file name: (exit code, lines written)}
RUN_CASES = [
    ("pipe-and-list", ["JOB=1:3", "log/t.JOB.log", "echo", "job JOB", "|", "tr", "a-z", "A-Z", "&&",
                       "test", "JOB", "-ne", "2"], 1,
     {"t.1.log": (0, ["JOB 1"]), "t.2.log": (1, ["JOB 2"]), "t.3.log": (0, ["JOB 3"])}),
    ("queue-options-ignored", ["--gpu", "1", "-V", "-l", "arch=*64", "-pe", "smp", "2", "--mem", "2G",
                               "--num-threads", "2", "--config", "conf/queue.conf", "-sync", "y", "JOB=1:2",
                               "-tc", "2", "--max-jobs-run", "3", "log/q.JOB.log", "echo", "a  b", "JOB"], 0,
     {"q.1.log": (0, ["a  b 1"]), "q.2.log": (0, ["a  b 2"])}),
    ("single-value", ["X=3", "log/x.X.log", "echo", "X", "X"], 0, {"x.3.log": (0, ["3 3"])}),
    ("one-job-quoted-words", ["log/one.log", "echo", 'say "hi" now', ";", "exit", "3"], 1,
     {"one.log": (3, ['say "hi" now'])}),
    ("range-from-2", ["JOB=2:3", "log/r.JOB.log", "echo", "JOB"], 0, {"r.2.log": (0, ["2"]), "r.3.log": (0, ["3"])}),
    ("one-log-for-one-job", ["JOB=1:1", "log/same.log", "echo", "JOB"], 0, {"same.log": (0, ["1"])}),
]
# id, arguments, words of the message (Kaldi's and the bundled one's)
RUN_REFUSED = [
    ("one-log-for-many-jobs", ["JOB=1:3", "log/one.log", "echo", "JOB"], "log/one.log"),
    ("range-from-0", ["JOB=0:2", "log/z.JOB.log", "true"], "invalid job range JOB=0:2"),
    ("empty-range", ["JOB=3:1", "log/z.JOB.log", "true"], "invalid job range JOB=3:1"),
    ("zero-jobs-at-once", ["--max-jobs-run", "0", "JOB=1:2", "log/z.JOB.log", "true"], "run.pl: invalid option"),
    ("tc-not-a-number", ["-tc", "two", "JOB=1:2", "log/z.JOB.log", "true"], "run.pl: invalid option"),
]


@pytest.mark.parametrize("case", RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_run_pl_runs_jobs_as_kaldi(utils, case, tmp_path):
    """Job substitution in the log name and the command, words joined as Kaldi's does
    (a quoted | or && is a pipe or a list, a word with spaces stays one word), queue
    options accepted and ignored (also after JOB=), each job's output and exit code in
    its log, exit status 1 when a job fails."""
    _, args, rc, expected = case
    res = run_pl(utils, args, tmp_path)
    assert res.returncode == rc, res.stderr
    got = logs(tmp_path)
    assert {name: (code, lines) for name, (_, lines, code) in got.items()} == expected


@pytest.mark.parametrize("case", RUN_REFUSED, ids=[c[0] for c in RUN_REFUSED])
def test_run_pl_refuses_as_kaldi(utils, case, tmp_path):
    _, args, words = case
    res = run_pl(utils, args, tmp_path)
    assert res.returncode != 0 and words in res.stderr
    assert not (tmp_path / "log").exists()  # refused before any job ran


@pytest.mark.slow
def test_run_pl_logs_same_as_kaldi(kaldi_real, tmp_path):
    """Every case run with both scripts: same exit status, same log files, and in each
    the same command header line, output lines and exit code."""
    for name, args, *_ in RUN_CASES + RUN_REFUSED:
        mine = run_pl(BUNDLED, args, tmp_path / name / "bundled")
        real = run_pl(kaldi_real.egs / "utils", args, tmp_path / name / "kaldi")
        assert (mine.returncode == 0) == (real.returncode == 0), name
        if real.returncode in (0, 1):  # 255 etc.: Kaldi died, the bundled one says 1
            assert mine.returncode == real.returncode, name
        assert logs(tmp_path / name / "bundled") == logs(tmp_path / name / "kaldi"), name


# Each job marks itself running, counts the running jobs after 0.25 s and stops 0.1 s
# later: the largest count is the number of jobs run.pl runs at once.
JOB_SH = """touch running/$1
sleep 0.25
ls running | wc -l > seen/$1
sleep 0.1
rm running/$1
"""


def cpus():
    """The processors Kaldi's run.pl counts (/proc/cpuinfo)."""
    try:
        return sum(line.startswith("processor") for line in open("/proc/cpuinfo")) or os.cpu_count()
    except OSError:
        return os.cpu_count()


def gpus():
    if not shutil.which("nvidia-smi"):
        return 0
    res = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return len(res.stdout.splitlines()) if res.returncode == 0 else 0


def at_once(utils_dir, options, jobs, cwd):
    (cwd / "job.sh").write_text(JOB_SH)
    (cwd / "running").mkdir()
    (cwd / "seen").mkdir()
    res = run_pl(utils_dir, [*options, f"JOB=1:{jobs}", "log/c.JOB.log", "bash", "job.sh", "JOB"], cwd)
    assert res.returncode == 0, res.stderr
    seen = [int((cwd / "seen" / str(j)).read_text()) for j in range(1, jobs + 1)]
    return max(seen)


def default_cap(jobs):
    """Kaldi's run.pl without --max-jobs-run: the processors, or all the jobs when they
    are fewer than 1.4 times the processors."""
    n = cpus()
    return jobs if n < jobs < 1.4 * n else n


CAP_CASES = [
    ("max-jobs-run", ["--max-jobs-run", "2"], lambda: 4, lambda jobs: 2),
    ("tc", ["-tc", "2"], lambda: 4, lambda jobs: 2),
    ("smallest-wins", ["--max-jobs-run", "3", "-tc", "2", "-V"], lambda: 4, lambda jobs: 2),
    ("processors", [], lambda: 2 * cpus() + 1, default_cap),
    ("processors-plus-one", [], lambda: cpus() + 1, default_cap),
    ("gpus", ["--gpu", "1"], lambda: max(gpus(), 1) + 1, lambda jobs: max(gpus(), 1)),
]


@pytest.mark.parametrize("case", CAP_CASES, ids=[c[0] for c in CAP_CASES])
def test_run_pl_caps_the_jobs_run_at_once(utils, case, tmp_path):
    """--max-jobs-run N / -tc N (the smallest given), else one job per GPU with --gpu
    (1 without nvidia-smi), else one per processor (all the jobs when they are fewer
    than 1.4 times the processors)."""
    _, options, jobs, cap = case
    jobs = jobs()
    expected = cap(jobs)
    seen = at_once(utils, options, jobs, tmp_path)
    assert seen <= expected
    if expected <= 8:  # more jobs may not all have started within 0.25 s on a busy machine
        assert seen == expected
    else:
        assert seen > 8


def test_run_pl_pick_reruns_failed_or_incomplete_jobs(utils, tmp_path):
    """--pick failed reruns the jobs whose log does not say code 0, --pick incomplete the
    jobs without an "# Ended" line (a failed one counting as failed), --pick all every job."""
    (tmp_path / "job.sh").write_text('echo $1 >> runs\necho "job $1"\n[ "$1" != 2 ] || [ -f fixed ]\n')
    args = ["JOB=1:3", "log/p.JOB.log", "bash", "job.sh", "JOB"]

    def run(*options):
        (tmp_path / "runs").unlink(missing_ok=True)
        res = run_pl(utils, [*options, *args], tmp_path)
        runs = (tmp_path / "runs").read_text().split() if (tmp_path / "runs").exists() else []
        return res.returncode, sorted(runs)

    assert run() == (1, ["1", "2", "3"])
    (tmp_path / "log" / "p.3.log").write_text("# bash job.sh 3\n# Started at (killed)\n")
    assert run("--pick", "incomplete") == (1, ["3"])
    assert read_log(tmp_path / "log" / "p.2.log")[2] == 1  # not rerun, still failed
    (tmp_path / "fixed").write_text("")
    assert run("--pick", "failed") == (0, ["2"])
    assert run("--pick", "failed") == (0, [])
    assert run("--pick", "all") == (0, ["1", "2", "3"])
    assert [read_log(tmp_path / "log" / f"p.{j}.log")[1:] for j in (1, 2, 3)] == [
        (["job 1"], 0), (["job 2"], 0), (["job 3"], 0)]


def test_run_pl_bundled_messages_and_log_format(tmp_path):
    """Bundled only: the failed logs named one by one, the usage without a command, a
    bad --pick refused, the header and footer lines of a log."""
    res = run_pl(BUNDLED, ["JOB=1:3", "log/t.JOB.log", "test", "JOB", "-eq", "1"], tmp_path)
    assert res.returncode == 1 and "run.pl: 2 / 3 failed, see log/t.2.log log/t.3.log" in res.stderr
    res = run_pl(BUNDLED, ["JOB=1:3", "log/one.log", "true"], tmp_path / "one")
    assert res.returncode == 1 and "JOB=1:3" in res.stderr and "does not contain JOB" in res.stderr
    res = run_pl(BUNDLED, ["--gpu", "1", "log/x.log"], tmp_path / "usage")
    assert res.returncode == 1 and "usage: run.pl" in res.stderr
    res = run_pl(BUNDLED, ["--pick", "some", "log/x.log", "true"], tmp_path / "pick")
    assert res.returncode == 1 and "--pick must be all, failed or incomplete" in res.stderr
    assert not (tmp_path / "pick" / "log").exists()
    lines = (tmp_path / "log" / "t.2.log").read_text().splitlines()
    assert lines[0] == "# test 2 -eq 1 " and lines[1].startswith("# Started at ")
    assert re.fullmatch(r"# Ended \(code 1\) at .+, elapsed time \d+ seconds", lines[-1])
