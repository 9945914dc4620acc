"""``tune`` reads the lists one span at a time and keeps of each hypothesis only what
the search needs (nbest_rescore.api.tune_job.read_tune_data): the same arrays as the
whole-set preparation, the same tune.json (apart from the search time) for a grid over
one and two LMs and for the line search, NN cost files read alongside the lists or,
in another order, whole; and the errors of missing costs as ever."""
import json
import shutil

import numpy as np
import pytest

import nbest_rescore as nr
from nbest_rescore.api import TuneJob
from nbest_rescore.api.inputs import open_nbest
from nbest_rescore.api.tune_job import cost_file_names, plot_title, read_tune_data, write_tune_outputs
from nbest_rescore.errors import DataError
from nbest_rescore.evaluation.tune_data import tune_data
from nbest_rescore.io.score_ark import read_cost_ark, write_cost_ark


@pytest.fixture(scope="module")
def costs(ci_nbest, tmp_path_factory):
    """Two synthetic NN cost files of ci in the lists' order (as score writes them) and
    the first one shuffled."""
    rng = np.random.default_rng(5)
    d = tmp_path_factory.mktemp("costs")
    keys = [k for u in ci_nbest.utterances for k in u.keys]
    lm = np.concatenate([u.lm_cost for u in ci_nbest.utterances])
    paths = []
    for name, scale in (("nn_cost.a", 0.9), ("nn_cost.b", 1.1)):
        write_cost_ark(d / name, zip(keys, (scale * lm + rng.normal(0, 2, len(lm))).tolist()))
        paths.append(str(d / name))
    lines = open(paths[0]).read().splitlines()
    rng.shuffle(lines)
    (d / "shuffled").mkdir()
    (d / "shuffled" / "nn_cost.a").write_text("\n".join(lines) + "\n")
    return paths, str(d / "shuffled" / "nn_cost.a")


def test_span_by_span_data_equals_the_whole_set_preparation(ci_nbest, costs, DATA):
    refs = nr.load_references(DATA / "ci" / "ref.txt")
    maps = [read_cost_ark(p) for p in costs[0]]
    want = tune_data(ci_nbest, refs, maps, ["a", "b"], None)
    for paths in (costs[0], [costs[1], costs[0][1]]):  # read alongside, and (shuffled) whole
        for span in (1, 800, None):
            got = read_tune_data(open_nbest(DATA / "ci"), refs, paths, ("a", "b"), ["x", "y"], span_hyps=span)
            for name in ("offsets", "ac_cost", "lm_cost", "graph_cost", "num_words", "nn", "errors", "doc_index",
                         "utt_ref_words"):
                a, b = getattr(got, name), getattr(want, name)
                assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), name
            assert (got.ref_words, got.names, got.utt_ids) == (want.ref_words, want.names, want.utt_ids)


def _tune_json(path):
    data = json.loads(path.read_text())
    data.pop("seconds")
    return json.dumps(data, indent=2)


@pytest.mark.parametrize("kw", [dict(interps="0:1:0.25", lm_weights="8:11:1"),
                                dict(interps="0:1:0.25", lm_weights="9,10", two=True),
                                dict(search="line", restarts=1, two=True)])
def test_tune_json_as_from_the_lists_in_memory(kw, ci_nbest, costs, DATA, tmp_path):
    kw = dict(kw)
    paths = costs[0] if kw.pop("two", False) else costs[0][:1]
    nn = [read_cost_ark(p) for p in paths]
    job = TuneJob(nbest=str(DATA / "ci"), ref=str(DATA / "ci" / "ref.txt"), nn_cost=paths if len(paths) > 1
                  else paths[0], out=str(tmp_path / "job"), **kw)
    res = job.run()
    direct = nr.tune(ci_nbest, nr.load_references(DATA / "ci" / "ref.txt"), nn if len(nn) > 1 else nn[0],
                     interps=job.interps, lm_weights=job.lm_weights,
                     word_ins_penalties=(job.word_ins_penalty,), search=job.search, names=cost_file_names(paths),
                     restarts=job.restarts, seed=job.seed, word_ins_penalty=job.word_ins_penalty)
    write_tune_outputs(direct, tmp_path / "direct", plot_title(job.nbest, job.nn_cost))
    assert _tune_json(tmp_path / "job" / "tune.json") == _tune_json(tmp_path / "direct" / "tune.json")
    assert res.best == direct.best
    png = tmp_path / "job" / "tune_wer.png"
    if png.exists():
        assert png.read_bytes() == (tmp_path / "direct" / "tune_wer.png").read_bytes()


def test_shuffled_costs_and_missing_costs(ci_nbest, costs, DATA, tmp_path):
    ref = str(DATA / "ci" / "ref.txt")
    a = TuneJob(nbest=str(DATA / "ci"), ref=ref, nn_cost=costs[0][0], interps="0.5,1", lm_weights="9.5").run()
    b = TuneJob(nbest=str(DATA / "ci"), ref=ref, nn_cost=costs[1], interps="0.5,1", lm_weights="9.5").run()
    assert a.points == b.points
    short = tmp_path / "nn_cost"
    lines = open(costs[0][0]).read().splitlines()
    short.write_text("\n".join(lines[:100] + lines[101:-3]) + "\n")
    with pytest.raises(DataError) as got:
        TuneJob(nbest=str(DATA / "ci"), ref=ref, nn_cost=str(short), interps="0.5,1", lm_weights="9.5").run()
    with pytest.raises(DataError) as want:
        nr.tune(ci_nbest, nr.load_references(ref), read_cost_ark(short), labels=[f"--nn-cost {short}"])
    assert str(got.value) == str(want.value) and "lacks 4 of 6000 hypothesis keys" in str(got.value)
    # a repeated key after the lists' keys: an error, as when the file is read whole
    d = tmp_path / "dup"
    d.mkdir()
    shutil.copy(costs[0][0], d / "nn_cost")
    with open(d / "nn_cost", "a") as f:
        f.write(lines[0] + "\n")
    with pytest.raises(DataError, match="duplicate key"):
        TuneJob(nbest=str(DATA / "ci"), ref=ref, nn_cost=str(d / "nn_cost"), interps="1", lm_weights="9.5").run()
