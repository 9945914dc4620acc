"""Every ``examples/<model>.yaml`` trains on a 20k-word prefix of the LM text with
``nbest-rescore train --config ... --max-words 20000`` (one epoch here, to keep the
suite fast) and the checkpoint then scores the ci lists with ``nbest-rescore score``;
a few NN costs are recomputed independently, one hypothesis at a time from the
initial state (``--history none``)."""
import os
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from nbest_rescore.cli import main
from nbest_rescore.models import MODEL_REGISTRY, load_model

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted(p.stem for p in (REPO / "examples").glob("*.yaml") if p.stem != "tiny")


def test_every_registered_model_has_an_example_config():
    import yaml

    names = {yaml.safe_load((REPO / "examples" / f"{c}.yaml").read_text())["model"] for c in CONFIGS}
    assert names == set(MODEL_REGISTRY)


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS)
def test_example_trains_on_20k_words_and_scores_ci(DATA, example_config, ci_nbest, tmp_path, config):
    ckpt = tmp_path / "m.pt"
    cwd = os.getcwd()
    os.chdir(REPO)  # the configs name ../shared/... relative to the repository (example_config: or DATA)
    try:
        res = CliRunner().invoke(main, ["train", "--config", example_config(config), "--max-words", "20000",
                                        "--max-epochs", "1", "--out", str(ckpt), "--no-progress"])
    finally:
        os.chdir(cwd)
    assert res.exit_code == 0, res.output + repr(res.exception)
    out = tmp_path / "score"
    res = CliRunner().invoke(main, ["score", "--lm", str(ckpt), "--nbest", str(DATA / "ci"), "--out", str(out),
                                    "--history", "none", "--no-progress"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    nn = dict(line.split() for line in (out / "nn_cost").read_text().splitlines())
    assert len(nn) == sum(len(u) for u in ci_nbest.utterances)
    model, vocab, _ = load_model(ckpt)
    for u in (ci_nbest.utterances[0], ci_nbest.utterances[-1]):
        for i in (0, len(u) - 1):
            ids = [vocab.eos] + vocab.encode(u.hyps[i]) + [vocab.eos]
            x = torch.tensor(ids)[None]
            with torch.inference_mode():
                lp, _ = model.log_probs(x[:, :-1], x[:, 1:], model.init_state(1))
            assert float(nn[u.keys[i]]) == pytest.approx(-float(lp.double().sum()), abs=1e-3)
