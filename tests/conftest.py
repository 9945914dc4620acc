"""Shared test fixtures."""
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/tiny_models.py

_BESIDE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "abc-nbest"
_DATA = Path(os.environ.get("ABC_NBEST_DATA", _BESIDE if _BESIDE.is_dir() else "/work/shared/data/abc-nbest"))


@pytest.fixture(scope="session")
def DATA() -> Path:
    """Root of the abc-nbest benchmark data (``ci/``, ``dev/``, ``lm/``); skips if absent."""
    if not _DATA.is_dir():
        pytest.skip(f"benchmark data not found at {_DATA} (set ABC_NBEST_DATA)")
    return _DATA


REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def tiny_lm(DATA, tmp_path_factory) -> Path:
    """A tiny GRU trained with ``nbest-rescore train --config examples/tiny.yaml`` on a
    prefix of the benchmark's LM text (shared by the whole session)."""
    from click.testing import CliRunner

    from nbest_rescore.cli import main

    out = tmp_path_factory.mktemp("lm") / "tiny.pt"
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        res = CliRunner().invoke(main, ["train", "--config", "examples/tiny.yaml", "--out", str(out),
                                        "--max-words", "30000", "--max-epochs", "1", "--no-progress"])
    finally:
        os.chdir(cwd)
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="session")
def ci_nbest(DATA):
    from nbest_rescore.io.kaldi_nbest import read_kaldi_nbest_dir

    return read_kaldi_nbest_dir(DATA / "ci")


@pytest.fixture
def one_thread():
    """One torch thread for the test (the 2 cores are shared); restored afterwards."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
