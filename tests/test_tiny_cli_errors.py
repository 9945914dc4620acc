"""The CLI's bad-input errors on the project's own tiny set (no benchmark data needed):
each ends in exit 1 and one line naming the file (and line) or option, and nothing is
written."""
import shutil

import pytest
from click.testing import CliRunner

from nbest_rescore.api.inputs import load_nbest
from nbest_rescore.cli import main
from tiny_models import random_checkpoint


def _broken(tiny_set, tmp_path, name, edit):
    folder, _ = tiny_set
    d = tmp_path / "nb"
    shutil.copytree(folder, d)
    if edit is None:
        (d / name).unlink()
    else:
        (d / name).write_text(edit((d / name).read_text()))
    return d


@pytest.mark.parametrize("name, edit, want", [
    ("ac_cost", lambda t: t.replace(t.split("\n")[2].split()[1], "12,5", 1), "ac_cost:3: "),
    ("lm_cost", lambda t: t.replace(t.split("\n")[0].split()[1], "nan", 1), "lm_cost:1: "),
    ("lm_cost", lambda t: "\n".join(t.splitlines()[:-1]) + "\n", "missing from lm_cost"),
    ("text", lambda t: t.replace("-1 ", "-1\t\t", 1), ""),
    ("lm_cost", None, "lm_cost"),
    ("ref.txt", lambda t: t.replace("tinyb-000", "tinyz-000"), "ref.txt"),
])
def test_bad_lists_end_in_one_line(tiny_set, tmp_path, name, edit, want):
    d = _broken(tiny_set, tmp_path, name, edit)
    res = CliRunner().invoke(main, ["tune", "--nbest", str(d), "--ref", str(d / "ref.txt"), "--lm-weights", "9.5",
                                    "--out", str(tmp_path / "t")])
    if name == "text":  # tabs between fields are white space like any other: read as written
        assert res.exit_code == 0, res.output
        return
    assert res.exit_code == 1 and res.output.startswith("Error: ") and res.output.count("\n") == 1, res.output
    assert want in res.output and "Traceback" not in res.output
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("args, want", [
    (["--lm-weight", "inf"], "--lm-weight must be a finite number"),
    (["--word-ins-penalty", "x"], "--word-ins-penalty"),
    (["--interp", "1.5"], "--interp"),
    (["--history", "previous"], "--history"),
    (["--lm", "no/such/model.pt"], "no/such/model.pt"),
])
def test_bad_options_end_in_one_line_before_any_work(tiny_set, tmp_path, args, want):
    folder, _ = tiny_set
    base = ["score", "--nbest", str(folder), "--out", str(tmp_path / "s")]
    if "--lm" not in args:
        base += ["--lm", str(random_checkpoint(load_nbest(folder), tmp_path / "m.pt"))]
    res = CliRunner().invoke(main, base + args)
    assert res.exit_code in (1, 2) and want in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "s").exists()
