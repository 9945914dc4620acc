"""recipes/abc-nbest/conf/cpu-ablation: the thesis's ablation rows differ from each other
only in what their names say, and the shapes' headers state their true sizes."""
import re
from pathlib import Path

import pytest
import yaml

from nbest_rescore.models import build_model
from nbest_rescore.models.cost import recurrent_macs

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "recipes" / "abc-nbest" / "conf" / "cpu-ablation"
ANNEAL = {"anneal_t0": 250.0, "anneal_gamma": 0.15, "anneal_fraction": 0.3}
DROP_MEM = {"dropout_mode": "mem", "dropout": 0.35, "dropout_emb": 0.0}
ITL = {"itl_weight": 0.5, "itl_reduction": "sum-token"}
ROWS = {  # row -> what it adds to the vanilla AMN
    "amn-vanilla": {},
    "amn-anneal": ANNEAL,
    "amn-dropmem": DROP_MEM,
    "amn-dropmem-itl": {**DROP_MEM, **ITL},
    "amn-full": {**ANNEAL, **DROP_MEM, **ITL},
    "amn-full-itl2": {**ANNEAL, **DROP_MEM, **ITL, "itl_weight": 2.0},
    "amn-full-floor": {**ANNEAL, **DROP_MEM, **ITL, "anneal_floor": 2.0},
    "amn-full-balance": {**ANNEAL, **DROP_MEM, **ITL, "balance_weight": 0.1},
    "amn-full-detach": {**ANNEAL, **DROP_MEM, **ITL, "itl_detach_attention": True},
}
SHAPE_KEYS = ("hidden_size", "input_projection")


def _load(name):
    return yaml.safe_load((CONF / f"{name}.yaml").read_text())


def _model_config(name):
    mc = dict(_load(name)["model_config"])
    mc["adaptive_cutoffs"] = [2943, 14651]  # the defaults for the 43k vocabulary
    return mc


def test_ablation_rows_differ_only_in_their_named_steps():
    vanilla = _load("amn-vanilla")
    for name, adds in ROWS.items():
        cfg = _load(name)
        assert {k: v for k, v in cfg.items() if k != "model_config"} == \
            {k: v for k, v in vanilla.items() if k != "model_config"}, name  # data, vocab, optim alike
        assert cfg["model_config"] == {**vanilla["model_config"], **adds}, name
    costeq = _load("amn-full-costeq")["model_config"]
    assert _load("amn-full-costeq-balance")["model_config"] == {**costeq, "balance_weight": 0.1}
    for baseline in ("gru", "lstm"):  # the same data, vocabulary and budget as the AMN rows
        assert {k: v for k, v in _load(baseline).items() if k not in ("model", "model_config")} == \
            {k: v for k, v in vanilla.items() if k not in ("model", "model_config")}


def _macs(mc, model="amn"):
    return recurrent_macs(build_model(model, mc, 43050))


@pytest.mark.parametrize("name, shape", [("amn-full-costeq", "b"), ("amn-full-eqparams", "c"), ("amn-full", "a")])
def test_shapes_state_their_sizes(name, shape):
    mc = _model_config(name)
    full = _model_config("amn-full")
    assert {k: v for k, v in mc.items() if k not in SHAPE_KEYS} == \
        {k: v for k, v in full.items() if k not in SHAPE_KEYS}  # the same training, another shape
    gru = build_model("gru", _model_config("gru"), 43050)
    amn = build_model("amn", mc, 43050)
    header = (CONF / f"{name}.yaml").read_text()
    gru_macs = _macs(_model_config("gru"), "gru")
    assert gru_macs == 3 * 256 * (256 + 256)  # the GRU's gates: 3 H (E + H)
    amn_macs = _macs(mc)
    if shape == "b":  # the GRU's cost per word: within 10%, as the header says
        assert abs(amn_macs / gru_macs - 1) < 0.1
        stated = re.search(r"per token (\d+)k against the GRU's (\d+)k", header.replace("\n# ", " "))
        assert (int(stated.group(1)), int(stated.group(2))) == (round(amn_macs / 1000), round(gru_macs / 1000))
    elif shape == "c":  # the GRU's parameters without embeddings
        counts = [m.num_parameters()["without_embeddings"] for m in (amn, gru)]
        stated = re.search(r"\((\d{3},\d{3}) against ([\d,]+)\)", header)
        assert [int(x.replace(",", "")) for x in stated.groups()] == counts
    else:  # as wide as the GRU
        assert mc["hidden_size"] == _model_config("gru")["hidden_size"]


def test_ensemble_set_trains_the_chosen_ablation_amn():
    ensemble = yaml.safe_load((CONF.parent / "cpu-ensemble" / "amn.yaml").read_text())
    assert ensemble["model_config"] == _load("amn-anneal")["model_config"]
