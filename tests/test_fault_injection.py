"""Fault injection (issue 29): SIGKILL ``score``, ``tune``, ``kaldi-score``, ``merge``,
``split`` and ``convert --to jsonl`` on the ci lists at seeded random times and at the
phases of their output code (plus ``convert`` over its own input: refused, nothing
changed), and check what each kill leaves: the previous output set
or the new one, whole and byte for byte, plus only hidden staging folders or temporary
files of the killed process, which an uninterrupted rerun removes while writing exactly
the set of a run that was never killed.

The harness is tests/fault_table.py (its docstring says how the kills are made);
``python tests/fault_table.py`` prints the same cases as a Markdown table, and so
does this module into the file named by ``FAULT_TABLE`` when that is set. About 45 s
on one busy core; ``score`` also runs as a real ``python -m nbest_rescore`` process
(whole, and killed once), the rest are forked from a server that imported the toolkit.
"""
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

import fault_table as ft  # tests/fault_table.py

pytestmark = pytest.mark.slow  # forked and real command processes killed (about 45 s)

COMMANDS = ("score", "tune", "kaldi-score", "merge", "split", "convert --to jsonl")
WHOLE = ("previous set", "new set", "new set (ran to the end)")


@pytest.fixture(scope="module")
def faults(DATA, tmp_path_factory):
    """Every case of the harness (seed 0, 3 random kills per command), the control case
    and the Markdown table."""
    work = tmp_path_factory.mktemp("faults")
    with ft.Harness(DATA / "ci", work, seed=0, kills=3, real=("score",)) as h:
        cases = h.run_all()
        control = h.control("merge")
    print("fault injection, seconds:", {k: round(v, 1) for k, v in h.seconds.items()})
    table = ft.markdown(cases)
    if os.environ.get("FAULT_TABLE"):
        Path(os.environ["FAULT_TABLE"]).write_text(table)
    kills = [c for c in cases if c.command != ft.OVER_INPUT_NAME]
    return SimpleNamespace(cases=kills, over=cases[len(kills):], control=control, table=table,
                           identical=h.identical)


def _cases(faults, command):
    return [c for c in faults.cases if c.command == command]


def test_every_kill_leaves_one_whole_set(faults):
    """No kill leaves a partial set; the only mix of two runs is kaldi-score killed
    between its per-entry renames (atomic_entries: each file whole, one rename per
    entry, documented; at the phase kill point, or a random kill that fell in that
    commit), never a half-written file."""
    for c in faults.cases:
        if c.command == "kaldi-score" and c.point == "after 1st commit rename":
            assert c.state.startswith("MIXED"), c
        else:
            assert c.state in WHOLE or ft.documented_mix(c), c


def test_a_mix_of_the_two_sets_would_show(faults):
    """The previous and the new set share no file byte for byte, except the decode
    folder's files kaldi-score leaves alone and the tiny wer_details/{lmwt,wip} inside
    scoring_kaldi/ (a folder replaced as a whole, with best_wer, which differs)."""
    assert set(faults.identical) == set(COMMANDS)
    kept = {"decode/lat.1.gz", "decode/log/decode.1.log", "decode/num_jobs",
            "decode/scoring_kaldi/wer_details/lmwt", "decode/scoring_kaldi/wer_details/wip"}
    for command, same in faults.identical.items():
        assert set(same) <= (kept if command == "kaldi-score" else set()), (command, same)


def test_only_the_killed_process_leaves_hidden_files_and_a_rerun_removes_them(faults):
    for c in faults.cases:
        for hidden in c.hidden:
            name = Path(hidden).name
            assert name.startswith("."), c
            # of the killed process: a staging folder, a temporary file or a writability probe
            assert f".partial-{c.pid}-" in name or f".{c.pid}-" in name or f"-probe-{c.pid}-" in name, c
        assert "not of pid" not in c.leftovers, c
        assert c.rerun in ("OK", "OK (probe)"), c
        if c.hidden:
            assert c.rerun == "OK", c  # a real rerun removed them
    assert not [c for c in faults.cases if ft.unexpected(c)]
    assert ft.unexpected(faults.control)


def test_the_kills_land_before_during_and_after_the_output_phase(faults):
    """Per command: at least 3 random kills, kills that leave the killed run's staging
    behind (during writing) and a kill right after publishing (the new set whole)."""
    assert {c.command for c in faults.cases} == set(COMMANDS)
    for command in COMMANDS:
        cases = _cases(faults, command)
        assert sum(c.point.startswith("random") for c in cases) >= 3, command
        assert all(c.killed for c in cases if not c.point.startswith("random")), command
        assert sum(bool(c.hidden) for c in cases) >= 2, command
        after = [c for c in cases if c.point == "after 1st commit rename"]
        assert after and (after[0].state == "new set" or command == "kaldi-score"), command
        assert any(c.state == "previous set" for c in cases), command
    real = [c for c in faults.cases if c.how == "real"]
    assert [c.command for c in real] == ["score"] and real[0].killed and real[0].hidden


def test_convert_over_its_own_input_is_refused_and_changes_nothing(faults):
    """The table's rows for convert with --out on its input (a file, a folder, inside a
    folder): exit 1 with one line, every byte of the run folder as before."""
    over = faults.over
    assert [c.point for c in over] == [p for p, _ in ft.OVER_INPUT]
    for c in over:
        assert c.state == "input unchanged (exit 1)" and c.rerun == "OK (refused in one line)", c
    changed = ft.Case(ft.OVER_INPUT_NAME, "x", "fork", False, 0.0, "INPUT CHANGED (exit 0)", "none", "OK")
    assert ft.unexpected(changed)  # the check can fail


def test_a_sabotaged_swap_is_caught(faults):
    """The control: the folder swap replaced by a file-by-file copy killed after the
    first file; the checks must see a partial set (so they can fail)."""
    c = faults.control
    assert c.killed and c.state == "PARTIAL", c


def test_classify_tells_whole_mixed_and_partial_sets():
    prev = {"out": None, "out/a": b"1", "out/b": b"2"}
    new = {"out": None, "out/a": b"3", "out/b": b"4"}
    assert ft.classify(dict(prev), prev, new) == "previous set"
    assert ft.classify(dict(new), prev, new) == "new set"
    assert ft.classify({"out": None, "out/a": b"3", "out/b": b"2"}, prev, new) == "MIXED (1 new, 1 old)"
    assert ft.classify({"out": None, "out/a": b"3"}, prev, new) == "PARTIAL"  # a file missing
    assert ft.classify({"out": None, "out/a": b"3", "out/b": b"4x"}, prev, new) == "PARTIAL"  # half written
    assert ft.classify({**new, "out/c": b""}, prev, new) == "PARTIAL"  # a file of neither run
    # JSON outputs are compared without their timing fields, and a cut JSON file stays unequal
    assert ft._normalized("wer.json", b'{"seconds": 1.5, "wer": 3}') == \
        ft._normalized("wer.json", b'{"wer": 3, "seconds": 2.5}')
    assert ft._normalized("wer.json", b'{"wer": 3') == b'{"wer": 3'


def test_the_table_has_a_row_per_case(faults):
    rows = [line for line in faults.table.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| command | kill point |")
    assert len(rows) == 1 + len(faults.cases) + len(faults.over)
    assert any("kaldi-score | after 1st commit rename" in r and "MIXED" in r for r in rows)
