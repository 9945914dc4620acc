"""Shared test fixtures."""
import os
import sys
from pathlib import Path

import pytest

# Torch's OpenMP threads wait for work asleep, not spinning (set before anything imports
# torch; inherited by the commands, torchrun ranks and Kaldi jobs the tests start): on the
# CI's 2 cores, 2 pytest workers with 2 torch threads each, a spinning thread burns the CPU
# its sibling needs (the 2-thread tests of test_batch_invariance.py took 10-30 times the
# CPU of the 1-thread ones). The results are the same: only how an idle thread waits changes.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/tiny_models.py

REPO = Path(__file__).resolve().parents[1]
# The examples/ and recipes/ configs name the data as ../shared/data/abc-nbest relative to
# the repository; ABC_NBEST_DATA points the tests elsewhere (no other fallback: a data
# directory the configs cannot see would make the config-based tests error, not skip).
_BESIDE = REPO.parent / "shared" / "data" / "abc-nbest"
_CONFIG_DATA = "../shared/data/abc-nbest"
_ENV = os.environ.get("ABC_NBEST_DATA") or None
_DATA = Path(_ENV) if _ENV else _BESIDE
_FOUND = (_DATA / "ci").is_dir() and (_DATA / "lm").is_dir()
SKIP_NO_DATA = (f"benchmark data not found at {_DATA}: put {_CONFIG_DATA} beside the repo "
                f"or set ABC_NBEST_DATA")


def pytest_report_header(config):
    how = "from ABC_NBEST_DATA" if _ENV else f"{_CONFIG_DATA} beside the repository; ABC_NBEST_DATA unset"
    state = "found" if _FOUND else "NOT FOUND (needs ci/ and lm/): every data test is skipped"
    return f"benchmark data: {_DATA} ({how}): {state}"


@pytest.fixture(scope="session")
def DATA() -> Path:
    """Root of the abc-nbest benchmark data (``ci/``, ``dev/``, ``lm/``); skips if absent.
    Every test that reads the data must depend on this fixture (directly or through
    another fixture), never on a path of its own."""
    if not _FOUND:
        pytest.skip(SKIP_NO_DATA)
    return _DATA


def _data_is_beside() -> bool:
    try:
        return _DATA.resolve() == _BESIDE.resolve()
    except OSError:
        return False


@pytest.fixture(scope="session")
def repo_data(DATA) -> Path:
    """DATA, for tests that read a repository config as it is (its paths name
    ../shared/data/abc-nbest): skips when the data is elsewhere (ABC_NBEST_DATA)."""
    if not _data_is_beside():
        pytest.skip(f"the repository configs name {_CONFIG_DATA} (= {_BESIDE}), but the data is at {DATA}")
    return DATA


@pytest.fixture(scope="session")
def example_config(DATA, tmp_path_factory):
    """``example_config(name)``: path of ``examples/<name>.yaml`` reading the data at DATA:
    the file itself when the data is beside the repository, else a copy whose
    ``../shared/data/abc-nbest`` paths point at DATA."""
    out_dir = tmp_path_factory.mktemp("configs")

    def get(name: str) -> str:
        src = REPO / "examples" / f"{name}.yaml"
        if _data_is_beside():
            return str(src)
        dst = out_dir / src.name
        dst.write_text(src.read_text().replace(_CONFIG_DATA, str(DATA)))
        return str(dst)

    return get


@pytest.fixture(scope="session")
def tiny_lm(DATA, example_config, tmp_path_factory) -> Path:
    """A tiny GRU trained with ``nbest-rescore train --config examples/tiny.yaml`` on a
    prefix of the benchmark's LM text (shared by the whole session)."""
    from click.testing import CliRunner

    from nbest_rescore.cli import main

    out = tmp_path_factory.mktemp("lm") / "tiny.pt"
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        res = CliRunner().invoke(main, ["train", "--config", example_config("tiny"), "--out", str(out),
                                        "--max-words", "30000", "--max-epochs", "1", "--no-progress"])
    finally:
        os.chdir(cwd)
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="session")
def hf_lm(DATA, tmp_path_factory):
    """``hf_lm(family)``: directory of a tiny random ``gpt2`` or ``llama`` Hugging Face LM
    with a BPE tokenizer trained on lm_train.txt (tests/hf_models.py), made once per
    session; skips without transformers."""
    pytest.importorskip("transformers")
    from hf_models import make_hf_lm

    made = {}

    def get(family: str = "gpt2") -> Path:
        if family not in made:
            made[family] = make_hf_lm(family, tmp_path_factory.mktemp(f"hf-{family}"), DATA / "lm" / "lm_train.txt")
        return made[family]

    return get


@pytest.fixture(scope="session")
def tiny_set(tmp_path_factory):
    """The project's own tiny N-best set (tests/tiny_data.py: 16 utterances of 4
    documents, 6 hypotheses each) in the Kaldi layout, as (folder, references); needs
    no benchmark data."""
    from tiny_data import write_tiny_set

    folder = tmp_path_factory.mktemp("tiny") / "nbest"
    return folder, write_tiny_set(folder)


def pytest_terminal_summary(terminalreporter):
    """Without the benchmark data: one line saying how many tests it skipped, and where
    it was looked for."""
    if _FOUND:
        return
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if isinstance(r.longrepr, tuple) and SKIP_NO_DATA in str(r.longrepr[2])]
    terminalreporter.write_line(f"{len(skipped)} tests skipped: {SKIP_NO_DATA} (the tests on the project's "
                                f"own tiny set, tests/tiny_data.py, ran without it)")


@pytest.fixture(scope="session")
def ci_nbest(DATA):
    from nbest_rescore.io.kaldi_nbest import read_kaldi_nbest_dir

    return read_kaldi_nbest_dir(DATA / "ci")


@pytest.fixture(scope="session")
def ci_shard(DATA, tmp_path_factory) -> Path:
    """The first of 3 document shards of ci (``nbest-rescore split --nj 3``: 3 of its 8
    documents, 23 utterances x 100 hypotheses, with its ``ref.txt``): for tests whose point
    is a command's behaviour, not the size of the list it scores."""
    from click.testing import CliRunner

    from nbest_rescore.cli import main

    out = tmp_path_factory.mktemp("ci_shards")
    res = CliRunner().invoke(main, ["split", "--nj", "3", str(DATA / "ci"), str(out)])
    assert res.exit_code == 0, res.output
    return out / "1"


@pytest.fixture
def one_thread():
    """One torch thread for the test (the 2 cores are shared); restored afterwards."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


# ---------------------------------------------------------------------------------------
# Real Kaldi (binaries built by recipes/kaldi/build_kaldi.sh, or an existing KALDI_ROOT)
KALDI_BINARIES = ("lattice-to-nbest", "nbest-to-linear", "linear-to-nbest", "nbest-to-lattice",
                  "lattice-lmrescore-const-arpa", "lattice-scale", "lattice-compose", "lattice-1best",
                  "lattice-best-path", "lattice-add-penalty", "arpa2fst", "arpa-to-const-arpa", "compute-wer",
                  "align-text", "compute-wer-bootci")
KALDI_TARBALL = REPO.parent / "shared" / "third_party" / "kaldi-57efb6b5e.tar.gz"
KALDI_CACHE = Path(os.environ.get("NBEST_KALDI_CACHE")
                   or Path.home() / ".cache" / "nbest-rescore" / KALDI_TARBALL.name.replace(".tar.gz", ""))
SKIP_NO_KALDI = ("real Kaldi not found: build it with `bash recipes/kaldi/build_kaldi.sh` (into "
                 f"{KALDI_CACHE}) or set KALDI_ROOT to a compiled Kaldi")


class Kaldi:
    """Where the real Kaldi is: ``path`` (folders with its binaries, OpenFst's tools
    last), ``egs`` (an ``egs/wsj/s5`` with Kaldi's own ``utils/`` and ``steps/``)."""

    def __init__(self, bin_dirs, egs):
        self.bin_dirs = [str(d) for d in bin_dirs]
        self.egs = Path(egs)

    def env(self, **extra):
        """os.environ with Kaldi's binaries and this Python's nbest-rescore first on PATH."""
        path = os.pathsep.join([str(Path(sys.executable).parent), *self.bin_dirs, os.environ.get("PATH", "")])
        return {**os.environ, "PATH": path, "LC_ALL": "C", **extra}


def _find_kaldi():
    root = os.environ.get("KALDI_ROOT")
    if root:
        src = Path(root) / "src"
        dirs = [src / d for d in ("latbin", "lmbin", "bin", "fstbin")] + [Path(root) / "tools" / "openfst" / "bin"]
        egs = Path(root) / "egs" / "wsj" / "s5"
    else:
        dirs, egs = [KALDI_CACHE / "bin"], KALDI_CACHE / "kaldi" / "egs" / "wsj" / "s5"
        if not (KALDI_CACHE / "bin" / "BUILD_OK").is_file():
            return None
    have = {b for d in dirs for b in KALDI_BINARIES if (d / b).is_file()}
    if have != set(KALDI_BINARIES) or not (egs / "utils" / "run.pl").is_file():
        return None
    return Kaldi([d for d in dirs if d.is_dir()], egs)


@pytest.fixture(scope="session")
def kaldi_real():
    """The real Kaldi (Kaldi): its binaries and egs/wsj/s5 scripts; skips with one line
    saying how to build them when absent. OpenFst's own tools (fstproject ...) come from
    PATH (Debian's libfst-tools) or KALDI_ROOT/tools/openfst/bin."""
    found = _find_kaldi()
    if found is None:
        pytest.skip(SKIP_NO_KALDI)
    return found


def pytest_configure(config):
    config.addinivalue_line("markers", "kaldi: needs the real Kaldi (kaldi_real); skipped without it "
                                       "(`-m kaldi` runs only these, `-m 'not kaldi'` leaves them out)")


def pytest_collection_modifyitems(config, items):
    for item in items:  # every test that takes the real Kaldi is marked for it
        if "kaldi_real" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kaldi)


# ---------------------------------------------------------------------------------------
# A private single-node Slurm (tests/slurm_cluster.py): Debian's slurmctld, slurmd, munge
@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A running private Slurm of this machine alone (:class:`slurm_cluster.SlurmCluster`:
    ``env`` with SLURM_CONF, ``submit``, ``wait``, ``requeue``), stopped after the session;
    skips with one line when slurmctld/slurmd/munge are not installed or do not come up."""
    import slurm_cluster

    try:
        cluster = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    except slurm_cluster.SlurmUnavailable as exc:
        pytest.skip(str(exc))
    yield cluster
    cluster.stop()
