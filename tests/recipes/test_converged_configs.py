"""The configs of issue 46: the converged set's backward GRU (run.sh --conf-set cpu-trio)
differs from its forward GRU only in the direction and the 40-minute cap; each new
experiment 1 row differs from the row it varies only in its regularisation (the
memcell-vector row also at the thesis's other dropout, 0.5, and with the thesis's ITL)."""
from dataclasses import asdict
from pathlib import Path

from nbest_rescore.config import load_train_config

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "recipes" / "abc-nbest" / "conf"


def _load(path):
    return asdict(load_train_config(path))


def test_backward_gru_differs_only_in_direction_and_cap(repo_data, monkeypatch):
    monkeypatch.chdir(REPO)
    fwd, bwd = _load(CONF / "cpu-converged" / "gru.yaml"), _load(CONF / "cpu-converged" / "gru-bwd.yaml")
    assert bwd["model_config"].pop("direction") == "backward" and "direction" not in fwd["model_config"]
    assert (fwd["optim"].pop("max_seconds"), bwd["optim"].pop("max_seconds")) == (3600, 2400)
    assert fwd == bwd
    run_sh = (REPO / "recipes" / "abc-nbest" / "run.sh").read_text()
    assert 'cpu-trio) set_models="gru gru-bwd amn"' in run_sh and "train_seconds=2400" in run_sh


def test_experiment_1_rows_vary_one_regularisation_each(repo_data, monkeypatch):
    monkeypatch.chdir(REPO)
    rows = {p.stem: _load(p) for p in (CONF / "cpu-thesis").glob("*.yaml")}
    out, vec, base = rows["amn-anneal-dropmem-out"], rows["amn-anneal-dropmemvec"], rows["amn-anneal-dropmem"]
    vec05, out05 = rows["amn-anneal-dropmemvec-05"], rows["amn-anneal-dropmem-out-05"]
    assert (out05["model_config"].pop("dropout"), out05["model_config"].pop("dropout_out")) == (0.5, 0.5)
    out05["model_config"].update(dropout=0.35, dropout_out=0.35)
    assert out05 == out
    assert (vec05["model_config"].pop("dropout"), vec["model_config"]["dropout"]) == (0.5, 0.35)
    vec05["model_config"]["dropout"] = 0.35
    assert vec05 == vec
    assert out["model_config"].pop("dropout_out") == 0.35 and "dropout_out" not in base["model_config"]
    assert (vec["model_config"].pop("dropout_mode"), base["model_config"].pop("dropout_mode"),
            out["model_config"].pop("dropout_mode")) == ("mem-vector", "mem", "mem")
    assert out == base == vec
    gru, gru_in = rows["gru-dropout"], rows["gru-dropout-in"]
    assert gru["model_config"].pop("dropout_out") == 0.35 and "dropout_out" not in gru_in["model_config"]
    assert gru == gru_in


def test_itl_rows_add_the_thesis_itl_to_the_memcell_vector_row(repo_data, monkeypatch):
    """amn-anneal-dropmemvec-05-itl{05,2}: the memcell-vector row at 0.5 plus eq. 4.32 as
    written (sum-token) at the thesis's lambda 0.5 and 2, nothing else changed."""
    monkeypatch.chdir(REPO)
    base = _load(CONF / "cpu-thesis" / "amn-anneal-dropmemvec-05.yaml")
    for name, weight in (("itl05", 0.5), ("itl2", 2.0)):
        row = _load(CONF / "cpu-thesis" / f"amn-anneal-dropmemvec-05-{name}.yaml")
        mc = row["model_config"]
        assert (mc.pop("itl_weight"), mc.pop("itl_reduction")) == (weight, "sum-token")
        assert row == base


def test_converged_memcell_vector_twin_differs_from_the_amn_as_its_row_does(repo_data, monkeypatch):
    """The cpu-converged twin of experiment 1's memcell-vector row at 0.5: the converged AMN
    with the row's regularisation (mem-vector, 0.5, no ITL), everything else equal."""
    monkeypatch.chdir(REPO)
    amn, twin = _load(CONF / "cpu-converged" / "amn.yaml"), _load(CONF / "cpu-converged" / "amn-memvec.yaml")
    row = _load(CONF / "cpu-thesis" / "amn-anneal-dropmemvec-05.yaml")["model_config"]
    keys = ("dropout_mode", "dropout", "itl_weight")
    assert [twin["model_config"].get(k) for k in keys] == [row.get(k) for k in keys] == ["mem-vector", 0.5, None]
    assert [amn["model_config"].get(k) for k in keys] == ["mem", 0.35, 2.0]
    for k in keys + ("itl_reduction",):
        twin["model_config"].pop(k, None), amn["model_config"].pop(k)
    assert twin == amn
