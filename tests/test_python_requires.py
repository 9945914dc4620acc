"""The Python version the install claims is the one the code needs: ``vermin`` (a tool
that finds the minimum version from the syntax and the standard-library names a file
uses) reads the package, the tests, the benchmarks, the recipes' and the examples'
scripts, and its minimum must equal ``python_requires`` in setup.cfg, which README.md
and docs/getting-started.md must state ("Python 3.X+")."""
import configparser
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("nbest_rescore", "tests", "benchmarks", "recipes", "examples")


def claimed() -> tuple:
    """(3, 10) from setup.cfg's ``python_requires = >=3.10``."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    spec = cfg["options"]["python_requires"].strip()
    m = re.fullmatch(r">=\s*3\.(\d+)", spec)
    assert m, f"setup.cfg: python_requires should read '>=3.N', got {spec!r}"
    return 3, int(m.group(1))


def vermin_minimum(paths) -> tuple:
    """The minimum Python 3 version vermin finds for ``paths`` (type annotations evaluated)."""
    pytest.importorskip("vermin", reason="vermin not installed (pip install -e '.[test]')")
    res = subprocess.run([sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())", "--no-tips", "--eval-annotations", "--no-parse-comments",
                          *map(str, paths)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    m = re.search(r"Minimum required versions?:\s*(?:[^\n]*?,\s*)?3\.(\d+)", res.stdout)
    assert m, res.stdout
    return 3, int(m.group(1))


def test_the_code_needs_exactly_the_python_that_setup_cfg_claims():
    assert vermin_minimum(ROOT / s for s in SOURCES) == claimed()


def test_vermin_finds_a_newer_python_in_code_that_needs_it(tmp_path):
    # the check can fail: a match statement needs 3.10, a except* group 3.11
    (tmp_path / "new.py").write_text("try:\n    pass\nexcept* ValueError:\n    pass\n")
    assert vermin_minimum([tmp_path / "new.py"]) == (3, 11)


@pytest.mark.parametrize("doc", ["README.md", "docs/getting-started.md"])
def test_the_docs_state_the_same_version(doc):
    major, minor = claimed()
    text = (ROOT / doc).read_text()
    assert f"Python {major}.{minor}+" in text
    assert not re.search(rf"Python 3\.(?!{minor}\+)\d+\+", text), "another minimum Python named"
