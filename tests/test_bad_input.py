"""One test per class of bad input found by the malformed-input corpus (issue 10):
each ends with the expected exit status (1 bad input, 2 usage error), one clear
message naming the file/option and value, no traceback, and no output left behind."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nbest_rescore.cli import main

REPO = Path(__file__).resolve().parents[1]


def invoke(args, **kw):
    return CliRunner().invoke(main, [str(a) for a in args], **kw)


def assert_clean_failure(res, code, *words):
    """Exit ``code``, the words in the message, no traceback anywhere."""
    text = res.output
    assert res.exit_code == code, text
    assert "Traceback" not in text
    low = text.lower()
    for w in words:
        assert w.lower() in low, (w, text)


# --- config values of the wrong type or range ------------------------------------------

BAD_CONFIGS = [
    ({"model_config": {"hidden_size": "512"}}, ["model_config.hidden_size", "'512'"]),
    ({"optim": {"lr": -0.1}}, ["optim.lr", "-0.1"]),
    ({"optim": {"bptt": 0}}, ["optim.bptt", "0"]),
    ({"optim": {"max_epochs": "10"}}, ["optim.max_epochs", "'10'"]),
    ({"optim": {"batch_size": 0}}, ["optim.batch_size", "0"]),
    ({"vocab": {"max_size": 2}}, ["vocab.max_size", "2"]),
]


@pytest.mark.parametrize("change,words", BAD_CONFIGS, ids=[w[0] for _, w in BAD_CONFIGS])
def test_train_bad_config_values(change, words, tmp_path, DATA):
    cfg = yaml.safe_load((REPO / "examples" / "tiny.yaml").read_text())
    for section, values in change.items():
        cfg.setdefault(section, {}).update(values)
    cfg["data"] = {"train": str(DATA / "lm" / "lm_train.txt"), "valid": None}
    conf = tmp_path / "bad.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    res = invoke(["train", "--config", conf, "--out", tmp_path / "m.pt", "--no-progress"])
    assert_clean_failure(res, 1, "bad.yaml", *words)
    assert not (tmp_path / "m.pt").exists()


# --- scoring, ppl and tune options out of range: usage errors before anything is read --

@pytest.mark.parametrize("opt", ["--batch-size", "--max-tokens"])
def test_score_option_zero_is_usage_error(opt, tmp_path, DATA):
    missing_lm = tmp_path / "never-read.pt"
    missing_lm.write_bytes(b"not a checkpoint")
    res = invoke(["score", "--lm", missing_lm, "--nbest", DATA / "ci", opt, "0"])
    assert_clean_failure(res, 2, opt, "0")


@pytest.mark.parametrize("opt", ["--max-words", "--batch-size"])
def test_ppl_option_zero_is_usage_error(opt, tmp_path, DATA):
    lm = tmp_path / "never-read.pt"
    lm.write_bytes(b"x")
    res = invoke(["ppl", "--lm", lm, "--text", DATA / "lm" / "lm_valid.txt", opt, "0"])
    assert_clean_failure(res, 2, opt)


@pytest.mark.parametrize("grid,words", [
    ("1:0:0.1", ["stop 0 is below start 1", "0:1:0.1"]),
    ("", ["empty"]),
    (",", ["empty"]),
    ("nan", ["finite"]),
    ("0:nan:0.1", ["finite"]),
    ("0:1:0", ["step must be > 0"]),
    ("0:1", ["start:stop:step"]),
    ("0:1:0.0000001", ["at most"]),
])
def test_tune_bad_grids(grid, words, DATA):
    res = invoke(["tune", "--nbest", DATA / "ci", "--ref", DATA / "ci" / "ref.txt", "--lm-weights", grid])
    assert_clean_failure(res, 2, "--lm-weights", *words)


def test_tune_interp_outside_unit_interval(DATA, tmp_path):
    nn = tmp_path / "nn_cost"
    nn.write_text("x 1.0\n")
    res = invoke(["tune", "--nbest", DATA / "ci", "--ref", DATA / "ci" / "ref.txt", "--nn-cost", nn,
                  "--interps", "0:1.5:0.5"])
    assert_clean_failure(res, 2, "--interps", "1.5")


# --- a checkpoint whose weights give NaN costs -------------------------------------------

def test_nan_checkpoint_names_model_and_key(tiny_lm, tmp_path, DATA):
    import torch

    from nbest_rescore.models import load_model, save_model

    model, vocab, info = load_model(tiny_lm)
    with torch.no_grad():
        next(model.parameters()).fill_(float("nan"))
    bad = tmp_path / "nan.pt"
    save_model(bad, model, vocab, info)
    out = tmp_path / "out"
    res = invoke(["score", "--lm", bad, "--nbest", DATA / "ci", "--out", out, "--no-progress"])
    assert_clean_failure(res, 1, "nan.pt", "non-finite", model.name, "abcr")
    assert not out.exists()


# --- --out below a regular file, or holding someone else's files -------------------------

def test_out_below_a_file(tiny_lm, tmp_path, DATA):
    f = tmp_path / "afile"
    f.write_text("x")
    res = invoke(["score", "--lm", tiny_lm, "--nbest", DATA / "ci", "--out", f / "sub", "--no-progress"])
    assert_clean_failure(res, 1, "--out", "is a file")


def test_out_with_foreign_files_is_refused_before_scoring(tiny_lm, tmp_path, DATA):
    out = tmp_path / "exp"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    res = invoke(["score", "--lm", tiny_lm, "--nbest", DATA / "ci", "--out", out, "--no-progress"])
    assert_clean_failure(res, 1, "notes.txt", "choose a new folder")
    assert (out / "notes.txt").read_text() == "mine" and sorted(p.name for p in out.iterdir()) == ["notes.txt"]


# --- costs written with '_' and a UTF-8 byte-order mark ----------------------------------

def _ci_copy(DATA, tmp_path) -> Path:
    d = tmp_path / "ci"
    shutil.copytree(DATA / "ci", d)
    return d


def test_cost_with_underscore(tmp_path, DATA):
    d = _ci_copy(DATA, tmp_path)
    lines = (d / "ac_cost").read_text().splitlines()
    key, _ = lines[4].split()
    lines[4] = f"{key} 1_000"
    (d / "ac_cost").write_text("\n".join(lines) + "\n")
    res = invoke(["tune", "--nbest", d, "--ref", d / "ref.txt", "--lm-weights", "9.5"])
    assert_clean_failure(res, 1, "ac_cost:5", "1_000")


def test_byte_order_mark_is_invisible_to_keys(tmp_path, DATA):
    d = _ci_copy(DATA, tmp_path)
    for name in ("text", "ref.txt", "utt2doc"):
        (d / name).write_bytes(b"\xef\xbb\xbf" + (d / name).read_bytes())
    args = ["tune", "--ref", d / "ref.txt", "--lm-weights", "9.5"]
    plain = invoke(args[:1] + ["--nbest", DATA / "ci"] + ["--ref", DATA / "ci" / "ref.txt", "--lm-weights", "9.5"])
    bom = invoke(args[:1] + ["--nbest", d] + args[1:])
    assert bom.exit_code == 0 and plain.exit_code == 0, bom.output
    assert bom.stdout.splitlines()[-1] == plain.stdout.splitlines()[-1]


# --- utt2doc whose documents are not contiguous ------------------------------------------

def test_non_contiguous_documents(tmp_path, DATA):
    d = _ci_copy(DATA, tmp_path)
    lines = (d / "utt2doc").read_text().splitlines()
    first_doc = lines[0].split()[1]
    last_utt = lines[-1].split()[0]
    lines[-1] = f"{last_utt} {first_doc}"
    (d / "utt2doc").write_text("\n".join(lines) + "\n")
    res = invoke(["tune", "--nbest", d, "--ref", d / "ref.txt", "--lm-weights", "9.5"])
    assert_clean_failure(res, 1, "utt2doc", first_doc, "consecutive")


# --- a Kaldi list whose utterance has hypotheses on non-consecutive lines (issue 27) ---------

def test_utterance_split_in_a_kaldi_list_found_before_scoring(tiny_lm, tmp_path, DATA, monkeypatch):
    d = _ci_copy(DATA, tmp_path)
    lines = (d / "text").read_text().splitlines()
    lines.append(lines.pop(1))  # the second hypothesis of the first utterance moved to the end
    (d / "text").write_text("\n".join(lines) + "\n")
    import nbest_rescore.api.score_spans as api_score  # where the spans are scored

    def no_scoring(*a, **k):
        raise AssertionError("scored before the lists were checked")

    monkeypatch.setattr(api_score, "rescore", no_scoring)
    out = tmp_path / "out"
    res = invoke(["score", "--lm", tiny_lm, "--nbest", d, "--out", out, "--no-progress"])
    key = lines[-1].split()[0]
    assert_clean_failure(res, 1, f"{d / 'text'}:{len(lines)}", repr(key), "consecutive lines", "fix:")
    assert not out.exists()
    tuned = invoke(["tune", "--nbest", d, "--ref", d / "ref.txt", "--lm-weights", "9.5"])
    assert_clean_failure(tuned, 1, f"{d / 'text'}:{len(lines)}", "consecutive lines")


# --- references that are all empty (WER undefined): found before scoring, nothing written
# (a single empty reference is valid: it is scored as Kaldi's compute-wer scores it)

def test_all_empty_references_found_before_scoring(tiny_lm, tmp_path, DATA, monkeypatch):
    ref = tmp_path / "ref.txt"
    lines = (DATA / "ci" / "ref.txt").read_text().splitlines()
    ref.write_text("".join(line.split()[0] + "\n" for line in lines))
    import nbest_rescore.api.score_spans as api_score

    def no_scoring(*a, **k):
        raise AssertionError("scored before checking the references")

    monkeypatch.setattr(api_score, "rescore", no_scoring)
    out = tmp_path / "out"
    res = invoke(["score", "--lm", tiny_lm, "--nbest", DATA / "ci", "--ref", ref, "--out", out, "--no-progress"])
    assert_clean_failure(res, 1, str(ref), "empty", "0 reference words", "undefined")
    assert not out.exists()


# --- anything unexpected: one line, no traceback; -v and --log-file show where ----------

def test_unexpected_error_is_one_line(tiny_lm, tmp_path, DATA, monkeypatch):
    import nbest_rescore.api.score_spans as api_score

    def boom(*a, **k):
        raise RuntimeError("simulated failure deep inside")

    monkeypatch.setattr(api_score, "rescore", boom)
    args = ["score", "--lm", tiny_lm, "--nbest", DATA / "ci", "--no-progress"]
    res = invoke(args)
    assert_clean_failure(res, 1, "unexpected RuntimeError: simulated failure deep inside", "-v")
    assert len(res.output.strip().splitlines()) == 1
    log = tmp_path / "run.log"
    res = invoke(["--log-file", log] + args)
    assert res.exit_code == 1
    text = log.read_text()
    assert "command line:" in text and "Traceback" in text and "simulated failure" in text


# --- the plain format as the mission writes it -------------------------------------------

def write_plain(nbest, folder: Path, name="dev17a", costs=False):
    """The ci lists as a plain N-best file with NAME.ac / NAME.ngram beside it, plus
    the utterance-id and utt2doc maps; returns (list path, utt ids path, utt2doc path)."""
    sign = 1.0 if costs else -1.0
    hyp, ac, ng, ids, u2d = [], [], [], [], []
    for i, u in enumerate(nbest.utterances):
        ids.append(f"{i} {u.utt_id}")
        u2d.append(f"{u.utt_id} {u.doc_id}")
        for h, a, l in zip(u.hyps, u.ac_cost, u.lm_cost):
            hyp.append(" ".join([str(i), *h, "<eos>"]))
            ac.append(repr(sign * float(a)))
            ng.append(repr(sign * float(l)))
    for ext, lines in (("txt", hyp), ("ac", ac), ("ngram", ng), ("ids", ids), ("utt2doc", u2d)):
        (folder / f"{name}.{ext}").write_text("\n".join(lines) + "\n")
    return folder / f"{name}.txt", folder / f"{name}.ids", folder / f"{name}.utt2doc"


def test_mission_usage_line_prints_one_best(tiny_lm, tmp_path, DATA, ci_nbest):
    lst, ids, u2d = write_plain(ci_nbest, tmp_path)
    res = invoke(["score", "--lm", tiny_lm, "--nbest", lst, "--no-progress"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == [str(i) for i in range(len(ci_nbest))]
    # with the id and document maps, the plain list gives the Kaldi directory's result
    mapped = invoke(["score", "--lm", tiny_lm, "--nbest", lst, "--plain-utt-ids", ids, "--plain-utt2doc", u2d,
                     "--no-progress"])
    kaldi = invoke(["score", "--lm", tiny_lm, "--nbest", DATA / "ci", "--no-progress"])
    assert mapped.exit_code == 0 and kaldi.exit_code == 0, mapped.output
    assert mapped.stdout == kaldi.stdout
    assert mapped.stdout != res.stdout  # keyed by index without the id map


def test_plain_costs_read_as_scores_warn(tmp_path, ci_nbest, DATA):
    lst, ids, _ = write_plain(ci_nbest, tmp_path, costs=True)
    res = invoke(["tune", "--nbest", lst, "--plain-utt-ids", ids, "--ref", DATA / "ci" / "ref.txt",
                  "--lm-weights", "9.5"])
    assert res.exit_code == 0, res.output
    assert "--plain-costs" in res.stderr and "look" in res.stderr
    ok = invoke(["tune", "--nbest", lst, "--plain-utt-ids", ids, "--plain-costs", "--ref", DATA / "ci" / "ref.txt",
                 "--lm-weights", "9.5"])
    assert ok.exit_code == 0 and "--plain-costs" not in ok.stderr
    kaldi = invoke(["tune", "--nbest", DATA / "ci", "--ref", DATA / "ci" / "ref.txt", "--lm-weights", "9.5"])
    assert ok.stdout.splitlines()[-1] == kaldi.stdout.splitlines()[-1]


def test_plain_options_on_a_kaldi_directory(DATA, tmp_path):
    f = tmp_path / "ids"
    f.write_text("0 a\n")
    res = invoke(["tune", "--nbest", DATA / "ci", "--plain-utt-ids", f, "--ref", DATA / "ci" / "ref.txt"])
    assert_clean_failure(res, 1, "--plain-utt-ids", "Kaldi N-best directory")


def test_plain_list_without_score_files(tmp_path, ci_nbest, DATA):
    lst, _, _ = write_plain(ci_nbest, tmp_path)
    (tmp_path / "dev17a.ngram").unlink()
    res = invoke(["tune", "--nbest", lst, "--ref", DATA / "ci" / "ref.txt"])
    assert_clean_failure(res, 1, "dev17a.ngram", "--plain-ngram")


def test_train_out_below_a_file(tmp_path, example_config):
    f = tmp_path / "afile"
    f.write_text("x")
    res = invoke(["train", "--config", example_config("tiny"), "--out", f / "m.pt", "--no-progress"])
    assert_clean_failure(res, 1, "--out", "is a file")


# --- the options this change added: one wrong value each ---------------------------------

def test_log_file_in_a_missing_folder(tmp_path):
    res = invoke(["--log-file", tmp_path / "no" / "such" / "run.log", "models"])
    assert_clean_failure(res, 2, "--log-file", "cannot open")


@pytest.mark.parametrize("opt", ["--plain-utt2doc", "--plain-utt-ids", "--plain-ac", "--plain-ngram"])
def test_plain_map_file_missing(opt, tmp_path, DATA):
    res = invoke(["tune", "--nbest", DATA / "ci", "--ref", DATA / "ci" / "ref.txt", opt, tmp_path / "missing"])
    assert_clean_failure(res, 2, opt, "does not exist")


@pytest.mark.parametrize("change,words", [
    ({"anneal_fraction": 1.5}, ["model_config.anneal_fraction", "1.5"]),
    ({"itl_reduction": "median-token"}, ["model_config.itl_reduction", "sum-token"]),
    ({"itl_ramp_fraction": -0.1}, ["model_config.itl_ramp_fraction", "-0.1"]),
    ({"itl_ramp_fraction": "0.2"}, ["model_config.itl_ramp_fraction", "'0.2'"]),
    ({"itl_ramp_fraction": 0.2, "anneal_fraction": None}, ["itl_ramp_fraction needs", "anneal_fraction: 0.5"]),
])
def test_train_bad_amn_options(change, words, tmp_path, DATA):
    cfg = yaml.safe_load((REPO / "examples" / "amn.yaml").read_text())
    cfg["model_config"].update(change)
    cfg["data"] = {"train": str(DATA / "lm" / "lm_train.txt"), "valid": None}
    cfg["vocab"] = {"max_size": 1000}
    conf = tmp_path / "amn_bad.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    res = invoke(["train", "--config", conf, "--out", tmp_path / "m.pt", "--no-progress"])
    assert_clean_failure(res, 1, "amn_bad.yaml", *words)


# --- JSON Lines N-best lists: one line naming file:line, exit 1, nothing written ---------

_HYP = {"words": ["a"], "scores": {"ac_cost": 1.5, "lm_cost": 2.5}}
_LINE = json.dumps({"utt_id": "u0", "document": "d0", "hypotheses": [_HYP]})
BAD_JSONL = [
    ("wrong-type", [_LINE.replace('"lm_cost": 2.5', '"lm_cost": "2.5"')], 1, ["'lm_cost' must be a finite number"]),
    ("missing-field", ['{"utt_id": "u0"}'], 1, ["no 'hypotheses' field"]),
    ("missing-cost", [_LINE.replace('"ac_cost": 1.5, ', "")], 1, ["has no 'ac_cost'"]),
    ("duplicate-id", [_LINE, _LINE], 2, ["duplicate utt_id 'u0' (first on line 1)"]),
    ("non-utf8", [_LINE, '{"utt_id": "u\udce91"}'], 2, ["not valid UTF-8"]),
    ("invalid-json", [_LINE, _LINE[:-1]], 2, ["invalid JSON"]),
    ("document-not-contiguous", [_LINE, _LINE.replace("u0", "u1").replace("d0", "d1"), _LINE.replace("u0", "u2")],
     3, ["document 'd0' reappears", "last seen at {p}:1"]),
]


@pytest.mark.parametrize("command", ["convert", "score"])
@pytest.mark.parametrize("lines,line,words", [b[1:] for b in BAD_JSONL], ids=[b[0] for b in BAD_JSONL])
def test_bad_jsonl_nbest(command, lines, line, words, tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_bytes("".join(ln + "\n" for ln in lines).encode("utf-8", "surrogateescape"))
    lm = tmp_path / "never-read.pt"
    lm.write_bytes(b"not a checkpoint")
    args = (["convert", "--to", "kaldi"] if command == "convert" else ["score", "--lm", lm]) + \
        ["--nbest", p, "--out", tmp_path / "out"]
    res = invoke(args)
    assert_clean_failure(res, 1, f"{p}:{line}: ", *(w.format(p=p) for w in words))
    assert len(res.output.strip().splitlines()) == 1, res.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name,kind", [("utt2doc", "dir"), ("lm_cost", "dir"), ("lm_cost", "fifo"),
                                       ("ac_cost", "fifo")])
def test_a_list_file_that_is_not_a_regular_file_is_named(name, kind, tiny_lm, tmp_path, DATA):
    """A directory or a named pipe where an N-best directory's file should be is refused by
    name before any scoring (a utt2doc directory used to be skipped: every utterance its
    own document; an lm_cost directory was reported as no n-gram costs)."""
    import os

    d = _ci_copy(DATA, tmp_path)
    (d / name).unlink()
    (d / name).mkdir() if kind == "dir" else os.mkfifo(d / name)
    res = invoke(["score", "--lm", tiny_lm, "--nbest", d, "--out", tmp_path / "out"])
    what = "a directory" if kind == "dir" else "a named pipe"
    assert_clean_failure(res, 1, f"{d / name} is {what}", f"the '{name}' file", "expected a regular file")
    assert not (tmp_path / "out").exists()


# --- kaldi-score filters that fail or print nothing (issue 29) ----------------------------

@pytest.mark.parametrize("option,command,words", [
    ("--hyp-filter", "echo 'no table here' >&2; exit 3",
     "failed on the 1-best at LMWT 9, WIP 0.0 with exit status 3: no table here"),
    ("--ref-filter", "echo 'no table here' >&2; exit 3", "failed on {ref} with exit status 3: no table here"),
    ("--hyp-filter", "cat > /dev/null", "printed nothing for the 1-best at LMWT 9, WIP 0.0 (60 lines in)"),
    ("--ref-filter", "sed d", "printed nothing for {ref} (60 lines in)"),
])
def test_kaldi_score_filter_that_fails_or_prints_nothing(option, command, words, tmp_path, DATA):
    """A filter's failure or empty output is named as such (an empty hyp-filter output
    was reported as references that do not belong to the lists)."""
    out, ref = tmp_path / "decode", DATA / "ci" / "ref.txt"
    res = invoke(["kaldi-score", "--lm-cost", "lm_cost", "--ref", ref, "--min-lmwt", 9, "--max-lmwt", 9,
                  "--word-ins-penalty", "0.0", option, command, "--out", out, DATA / "ci"])
    assert_clean_failure(res, 1, f"{option} {command!r} {words.format(ref=ref)}; the filter must read Kaldi text")
    assert len(res.output.strip().splitlines()) == 1, res.output
    assert not out.exists()


# --- inputs that are a named pipe or a directory (issue 29) -------------------------------

@pytest.fixture
def fifo(tmp_path):
    """``fifo(name, data)``: a named pipe fed ``data`` once a reader opens it (a pipe
    nothing opened is opened and closed at teardown, which ends its feeder)."""
    import os
    import threading

    made = []

    def make(name, data: bytes):
        path = tmp_path / name
        os.mkfifo(path)

        def feed():
            try:
                with open(path, "wb") as f:
                    f.write(data)
            except OSError:  # the reader went away
                pass

        threading.Thread(target=feed, daemon=True).start()
        made.append(path)
        return path

    yield make
    for path in made:
        try:
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        except OSError:
            pass


def _stream_case(command, tmp_path, DATA, ci_nbest, source):
    """The arguments of ``command`` reading ``source`` as --ref (--text for ppl)."""
    from tiny_models import random_checkpoint

    if command == "ppl":
        return ["ppl", "--lm", random_checkpoint(ci_nbest, tmp_path / "g.pt"), "--text", source, "--no-progress"]
    if command == "tune":
        return ["tune", "--nbest", DATA / "ci", "--ref", source, "--interps", "1", "--lm-weights", "10",
                "--replications", "10"]
    if command == "merge":  # a job folder as score writes it: the 1-best and a cost per hypothesis
        job = tmp_path / "job"
        job.mkdir(exist_ok=True)
        shutil.copyfile(DATA / "ci" / "decoder_1best.txt", job / "text")
        shutil.copyfile(DATA / "ci" / "lm_cost", job / "nn_cost")
        return ["merge", "--out", tmp_path / "merged", "--ref", source, job]
    return ["kaldi-score", "--lm-cost", "lm_cost", "--ref", source, "--min-lmwt", 9, "--max-lmwt", 9,
            "--out", tmp_path / "decode", DATA / "ci"]


@pytest.mark.parametrize("command", ["kaldi-score", "merge", "tune", "ppl"])
def test_ref_and_text_from_a_named_pipe_or_a_directory(command, fifo, tmp_path, DATA, ci_nbest):
    """--ref (--text of ppl) given a named pipe (``<(...)``) is read once, as a stream,
    with the same result as the file (kaldi-score used to say "no such file"); given a
    directory it is refused by name in one line."""
    real = DATA / "ci" / "ref.txt"
    if command == "ppl":
        real = tmp_path / "valid.txt"
        real.write_text("".join((DATA / "lm" / "lm_valid.txt").read_text().splitlines(True)[:40]))
    expected = invoke(_stream_case(command, tmp_path, DATA, ci_nbest, real))
    assert expected.exit_code == 0, expected.output
    piped = invoke(_stream_case(command, tmp_path, DATA, ci_nbest, fifo("pipe", real.read_bytes())))
    assert piped.exit_code == 0 and piped.output == expected.output, piped.output
    folder = tmp_path / "adir"
    folder.mkdir()
    res = invoke(_stream_case(command, tmp_path, DATA, ci_nbest, folder))
    assert_clean_failure(res, 2, "--text" if command == "ppl" else "--ref", f"'{folder}' is a directory")


def test_a_config_from_a_named_pipe_is_refused(fifo, tmp_path, example_config):
    """--config is read more than once and its relative paths resolve from its folder:
    a named pipe is refused by name (the second read found it empty)."""
    pipe = fifo("config.yaml", Path(example_config("tiny")).read_bytes())
    res = invoke(["train", "--config", pipe, "--out", tmp_path / "m.pt", "--no-progress"])
    assert_clean_failure(res, 1, f"--config {pipe}: is a named pipe, expected a regular file")
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "m.pt").exists()

