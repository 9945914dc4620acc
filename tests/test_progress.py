"""The progress reporter: a tqdm bar on a terminal, log lines (done/total, rate, ppl,
ETA) at an interval elsewhere (the training run's lines: tests/training/test_resume.py)."""
import io
import logging
import re

import pytest

from nbest_rescore import progress as progress_mod
from nbest_rescore.progress import Progress


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def logged(caplog, monkeypatch):
    """The progress logger's records at INFO so far (also when a CLI test switched the
    package logger's propagation off)."""
    pkg = logging.getLogger("nbest_rescore")
    monkeypatch.setattr(pkg, "handlers", [caplog.handler])
    monkeypatch.setattr(pkg, "propagate", False)
    caplog.set_level(logging.INFO, logger="nbest_rescore")
    return lambda: [r for r in caplog.records if r.name == "nbest_rescore.progress"]


def test_a_stream_that_is_no_terminal_gets_log_lines_with_the_fields(logged):
    clock, out = FakeClock(), io.StringIO()
    p = Progress("tok", desc="epoch 2", interval=0, stream=out, clock=clock)
    p(0, 1000)
    clock.now += 2.0
    p.set_perplexity(123.456)
    p(500, 1000)
    lines = [r.getMessage() for r in logged()]
    assert lines[0] == "epoch 2: 0/1000 tok (0.0%), ? tok/s, ETA ?"
    assert lines[-1] == "epoch 2: 500/1000 tok (50.0%), 250 tok/s, ppl 123.46, ETA 2 s"
    assert all(r.levelno == logging.INFO for r in logged())
    assert out.getvalue() == ""  # no bar
    p.close()


def test_log_lines_come_at_the_interval_and_the_last_state_at_close(logged):
    clock = FakeClock()
    p = Progress("hyp", interval=30, stream=io.StringIO(), clock=clock)
    for done in range(1, 101):  # one hypothesis a second
        p(done, 100)
        clock.now += 1.0
    p.close()
    lines = [r.getMessage() for r in logged()]
    # the first at once, then every 30 s, then the end
    assert [int(m.split("/")[0]) for m in lines] == [1, 31, 61, 91, 100]
    assert lines[1] == "31/100 hyp (31.0%), 1 hyp/s, ETA 1 min 9 s"
    p.close()
    assert len(logged()) == 5  # nothing new


def test_the_default_interval_is_a_constant_of_the_module(monkeypatch):
    assert Progress().interval == progress_mod.INTERVAL_S == 30.0
    monkeypatch.setattr(progress_mod, "INTERVAL_S", 0.0)
    assert Progress().interval == 0.0


def test_a_terminal_gets_a_tqdm_bar_and_no_log_lines(logged):
    term = Terminal()
    p = Progress("hyp", stream=term, interval=0)
    p(5, 10)
    p(10, 10)
    p.set_perplexity(42.0)
    assert p.bar is not None and p.bar.n == 10 and p.bar.total == 10
    p.close()
    assert re.search(r"10/10 .*hyp/s", term.getvalue())  # the bar, left on the terminal
    assert not logged()


def test_disabled_reports_nothing(logged):
    term = Terminal()
    p = Progress("hyp", True, stream=term, interval=0)
    p(5, 10)
    p.close()
    assert term.getvalue() == "" and not logged()


def test_score_on_a_log_file_reports_hypotheses_from_the_start_to_the_end(tiny_lm, DATA, tmp_path):
    """``score`` with stderr not a terminal (CliRunner's): a line before any scoring (0 of
    all hypotheses), one per span at most every 30 s, and the last state at the end, shown
    without -v; --no-progress silences them."""
    from click.testing import CliRunner

    from nbest_rescore.cli import main

    args = ["score", "--lm", str(tiny_lm), "--nbest", str(DATA / "ci"), "--span-hyps", "2000"]
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.stderr.splitlines() if "nbest_rescore.progress" in ln]
    assert "0/6000 hyp (0.0%)" in lines[0] and "6000/6000 hyp (100.0%)" in lines[-1] and "ETA" in lines[-1]
    quiet = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "b"), "--no-progress"])
    assert quiet.exit_code == 0 and "nbest_rescore.progress" not in quiet.stderr
