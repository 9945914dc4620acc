"""Every command option is declared once (nbest_rescore.options): each click option of
each command maps to exactly one dataclass field, and its help, default and range or
choices are the field's; the validator and click agree on the bounds."""
import dataclasses
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from nbest_rescore import options as opt
from nbest_rescore.cli import main
from nbest_rescore.errors import DataError
from nbest_rescore.validation import range_bounds

GLOBAL = {"verbose", "seed", "log_file", "version", "help"}
CLI_ONLY = {"no_progress", "help"}  # declared once, in cli.py: not an option of any job


def _commands():
    return sorted(main.commands.items())


def _options(cmd):
    return [p for p in cmd.params if isinstance(p, click.Option) and p.name not in CLI_ONLY]


def test_group_has_only_the_global_options():
    assert {p.name for p in main.params} == GLOBAL - {"help"} | {"version"}


@pytest.mark.parametrize("name,cmd", _commands())
def test_each_option_is_one_field_with_the_same_help_default_and_range(name, cmd):
    params = _options(cmd)
    if not params:
        assert not hasattr(cmd.callback, "__options__")
        return
    cls, names = cmd.callback.__options__
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert sorted(p.name for p in params) == sorted(names), name
    assert len(set(names)) == len(names), f"{name}: a field given twice"
    for p in params:
        f = fields[p.name]
        m = f.metadata
        assert p.help == m["help"], (name, p.name)
        assert p.opts == [m["flag"] or "--" + f.name.replace("_", "-")]
        if f.default is dataclasses.MISSING:
            assert p.required, (name, p.name)
        else:
            assert not p.required and p.default == f.default and p.show_default, (name, p.name)
        if m["choices"]:
            assert isinstance(p.type, click.Choice) and tuple(p.type.choices) == m["choices"], (name, p.name)
        if m["range"] and m["parse"] is None:
            kind = click.IntRange if m["kind"] == "int" else click.FloatRange
            assert isinstance(p.type, kind), (name, p.name)
            lo, hi, lo_open, hi_open = range_bounds(m["range"])
            assert (p.type.min, p.type.max, p.type.min_open, p.type.max_open) == (lo, hi, lo_open, hi_open)
        if m["kind"] == "int" and not m["range"]:
            assert p.type is click.INT
        assert p.multiple == m["multiple"] and p.is_flag == m["is_flag"], (name, p.name)


def test_one_meaning_one_field_across_commands():
    """An option name shared by commands with the same meaning is one field (the same
    dataclass.Field object), e.g. --device, --threads, the cache and N-best options."""
    shared = {}
    for name, cmd in _commands():
        if _options(cmd):
            cls, _ = cmd.callback.__options__
            for f in dataclasses.fields(cls):
                shared.setdefault((f.name, f.metadata["help"]), set()).add(id(f))
    assert all(len(ids) == 1 for ids in shared.values())


def test_option_constants_are_defined_once():
    """The constants of the options (choices, defaults such as REPLICATIONS) are assigned
    only in nbest_rescore/options/: the code using them imports them (no copy kept equal)."""
    import ast
    from pathlib import Path

    pkg = Path(opt.__file__).resolve().parents[1]
    names = {n for n in opt.__all__ if n.isupper()}
    copies = []
    for path in sorted(pkg.rglob("*.py")):
        if path.parent.name == "options":
            continue
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) else []
            copies += [f"{path.relative_to(pkg)}:{node.lineno}: {t.id}" for t in targets
                       if isinstance(t, ast.Name) and t.id in names]
    assert names >= {"REPLICATIONS", "HISTORY_MODES", "SOFTMAX_IMPLS", "TRAIN_DTYPES"}
    assert not copies, f"constants of nbest_rescore.options assigned again (import them instead): {copies}"


def test_defaults_users_rely_on():
    s = opt.ScoreOptions(lm="m.pt", nbest="dir")
    assert (s.word_ins_penalty, s.lm_weight, s.interp, s.acoustic_scale) == (0.0, 9.5, 0.5, 1.0)
    # the API's weights are the options' (declared once): Weights() equals the CLI defaults
    from nbest_rescore.rescoring.combine import Weights
    w = Weights()
    assert (w.word_ins_penalty, w.lm_weight, w.interp, w.acoustic_scale) == (0.0, 9.5, 0.5, 1.0)
    assert (s.batch_size, s.max_tokens, s.span_hyps, s.history) == (256, 8192, 10000, ("first-pass",))
    assert (s.scoring, s.output, s.quantize, s.dtype, s.softmax_impl) == ("tree", "softmax", "none", "float32",
                                                                         "fused")
    assert (s.cache_size, s.cache_theta, s.cache_lambda) == (0, 0.3, 0.1)
    assert opt.PplOptions(lm="m", text="t").batch_size == 16


@pytest.mark.parametrize("value,ok", [(0.999999, True), (0.0, True), (1.0, False), (-0.1, False)])
def test_cache_lambda_bound_is_the_same_for_click_and_the_validator(value, ok):
    """Unified on the validator's bound [0, 0.999999] (click had [0, 1))."""
    msg = "--cache-lambda must be a finite number in [0, 0.999999]"
    if ok:
        assert opt.CacheOptions(cache_lambda=value).cache_lambda == value
    else:
        with pytest.raises(DataError, match=r"^--cache-lambda must be a finite number in \[0, 0\.999999\]"):
            opt.CacheOptions(cache_lambda=value)
    res = CliRunner().invoke(main, ["ppl", "--lm", __file__, "--text", __file__, "--cache-lambda", str(value)])
    assert (res.exit_code == 2 and msg in res.output) != ok, res.output  # valid: fails on reading --lm instead


@pytest.mark.parametrize("cls,kw,message", [
    (opt.ScorerOptions, {"batch_size": 0}, "--batch-size must be an integer >= 1, got 0"),
    (opt.ScorerOptions, {"softmax_impl": "blocked"}, "--softmax-impl 'blocked': expected one of fused, plain"),
    (opt.WeightOptions, {"interp": 1.5}, "--interp must be a finite number in [0, 1], got 1.5"),
    (opt.ScoringOptions, {"history": ("none", "later")}, "--history 'later': expected one of first-pass"),
    (opt.ScoringOptions, {"threads": 0}, "--threads must be an integer >= 1, got 0"),
    (opt.TrainOptions, {"config": "c", "out": "o", "max_seconds": 0.0}, "--max-seconds must be a finite number > 0"),
])
def test_one_validator_one_line_naming_the_option(cls, kw, message):
    with pytest.raises(DataError) as err:
        cls(**kw)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_click_refuses_out_of_range_with_the_validator_message():
    res = CliRunner().invoke(main, ["score", "--lm", __file__, "--nbest", __file__, "--batch-size", "0"])
    assert res.exit_code == 2 and "--batch-size must be an integer >= 1, got 0" in res.output


def test_help_imports_neither_torch_nor_numpy():
    code = ("import sys; from click.testing import CliRunner; from nbest_rescore.cli import main; "
            "assert CliRunner().invoke(main, ['score', '--help']).exit_code == 0; "
            "print('torch' in sys.modules, 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_jobs_take_their_options_from_the_option_classes():
    from nbest_rescore.api import AnalyzeJob, ConvertJob, KaldiScoreJob, PerplexityJob, ScoreJob, TrainJob, TuneJob
    from nbest_rescore.api.shards import MergeJob, SplitJob

    for job, cls in ((ScoreJob, opt.ScoreOptions), (PerplexityJob, opt.PplOptions), (TrainJob, opt.TrainOptions),
                     (AnalyzeJob, opt.AnalyzeOptions), (KaldiScoreJob, opt.KaldiScoreOptions),
                     (TuneJob, opt.TuneOptions), (SplitJob, opt.SplitOptions), (MergeJob, opt.MergeOptions),
                     (ConvertJob, opt.ConvertOptions)):
        assert issubclass(job, cls)
        own = {f.name: f for f in dataclasses.fields(job)}
        assert all(own[f.name] is f for f in dataclasses.fields(cls)), job  # the job's fields are the options'


def test_path_options_declare_their_role():
    """Every path option is an input unless declared ``output`` (each ``--out``, and only
    those)."""
    from nbest_rescore.validation import input_fields

    classes = [c for c in vars(opt).values() if isinstance(c, type) and dataclasses.is_dataclass(c)]
    for cls in classes:
        for f in dataclasses.fields(cls):
            if f.metadata.get("path") is not None:
                assert bool(f.metadata["output"]) == (f.name == "out"), (cls.__name__, f.name)
    assert input_fields(opt.TuneOptions) == ("nbest", "plain_ac", "plain_ngram", "plain_utt2doc", "plain_utt_ids",
                                             "nemo_manifest", "ref", "nn_cost")


def test_jobs_protect_the_declared_inputs(DATA, tmp_path):
    """The jobs check and protect exactly the declared inputs (no hand-kept lists): a
    TuneJob whose --out is its --nn-cost is refused naming that option."""
    from nbest_rescore.api import TuneJob

    data = DATA / "ci"
    cost = tmp_path / "nn_cost"
    cost.write_text("")
    with pytest.raises(DataError, match=f"--out {cost}: is the input --nn-cost {cost}, which writing it"):
        TuneJob(nbest=data, ref=f"{data}/ref.txt", nn_cost=str(cost), out=str(cost))
