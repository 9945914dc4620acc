"""Every ``examples/<model>.yaml`` trains on a 20k-word prefix of the LM text with
``nbest-rescore train --config ... --max-words 20000`` (one epoch and 5k validation
words here, to keep the suite fast) and the checkpoint then scores a third of the ci
lists (``ci_shard``) with ``nbest-rescore score``; a few NN costs are recomputed
independently, one hypothesis at a time from the initial state (``--history none``)."""
import json
import os
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from nbest_rescore.cli import main
from nbest_rescore.io.kaldi_nbest import read_kaldi_nbest_dir
from nbest_rescore.models import MODEL_REGISTRY, load_model

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted(p.stem for p in (REPO / "examples").glob("*.yaml") if p.stem != "tiny")


def test_every_registered_model_has_an_example_config():
    import yaml

    names = {yaml.safe_load((REPO / "examples" / f"{c}.yaml").read_text())["model"] for c in CONFIGS}
    assert names == set(MODEL_REGISTRY)


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS)
def test_example_trains_on_20k_words_and_scores_ci(example_config, ci_shard, tmp_path, config):
    import yaml

    ckpt = tmp_path / "m.pt"
    cfg = yaml.safe_load(Path(example_config(config)).read_text())
    cfg["data"]["max_valid_words"] = 5000
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    cwd = os.getcwd()
    os.chdir(REPO)  # the configs name ../shared/... relative to the repository (example_config: or DATA)
    try:
        res = CliRunner().invoke(main, ["train", "--config", str(tmp_path / "config.yaml"), "--max-words", "20000",
                                        "--max-epochs", "1", "--out", str(ckpt), "--no-progress"])
    finally:
        os.chdir(cwd)
    assert res.exit_code == 0, res.output + repr(res.exception)
    out = tmp_path / "score"
    res = CliRunner().invoke(main, ["score", "--lm", str(ckpt), "--nbest", str(ci_shard), "--out", str(out),
                                    "--history", "none", "--no-progress"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    nn = dict(line.split() for line in (out / "nn_cost").read_text().splitlines())
    lists = read_kaldi_nbest_dir(ci_shard)
    assert len(nn) == sum(len(u) for u in lists.utterances)
    model, vocab, _ = load_model(ckpt)
    for u in (lists.utterances[0], lists.utterances[-1]):
        for i in (0, len(u) - 1):
            ids = [vocab.eos] + vocab.encode(u.hyps[i]) + [vocab.eos]
            x = torch.tensor(ids)[None]
            with torch.inference_mode():
                lp, _ = model.log_probs(x[:, :-1], x[:, 1:], model.init_state(1))
            assert float(nn[u.keys[i]]) == pytest.approx(-float(lp.double().sum()), abs=1e-3)


# --- examples/nbest_from_transformers.py and examples/nbest_from_kaldi.sh -------------------

def _example_module(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tiny_generator(kind):
    """A tiny random transformers model (built from a config, offline) and what
    ``generate`` takes: a decoder-only GPT-2 fed a prompt, or an encoder-decoder BART."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=20, n_positions=32, n_embd=8, n_layer=1, n_head=2, bos_token_id=0,
                                      eos_token_id=1, pad_token_id=1)
        model = transformers.GPT2LMHeadModel(cfg)
        inputs = {"input_ids": torch.tensor([[0, 5, 6]]), "attention_mask": torch.ones(1, 3, dtype=torch.long)}
    else:
        cfg = transformers.BartConfig(vocab_size=20, d_model=8, encoder_layers=1, decoder_layers=1,
                                      encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=8,
                                      decoder_ffn_dim=8, max_position_embeddings=32, bos_token_id=0, eos_token_id=2,
                                      pad_token_id=1, decoder_start_token_id=2, forced_bos_token_id=None,
                                      forced_eos_token_id=None)
        model = transformers.BartForConditionalGeneration(cfg)
        inputs = {"input_ids": torch.tensor([[0, 5, 6, 2]])}
    return model.eval(), inputs, cfg


def _teacher_forced_cost(model, inputs, cfg, words, ended):
    """-log p (natural log) of the word ids ``words`` (then the end token if ``ended``),
    one forward pass."""
    target = torch.tensor([[int(w[1:]) for w in words] + ([cfg.eos_token_id] if ended else [])])
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            dec = torch.cat([torch.tensor([[cfg.decoder_start_token_id]]), target], dim=1)
            logits = model(**inputs, decoder_input_ids=dec[:, :-1]).logits
        else:
            ids = torch.cat([inputs["input_ids"], target], dim=1)
            logits = model(input_ids=ids[:, :-1]).logits[:, -target.shape[1]:]
    lp = torch.log_softmax(logits.double(), -1).gather(-1, target[..., None])
    return -float(lp.sum())


@pytest.mark.parametrize("kind", ["gpt2", "bart"])
def test_nbest_from_transformers_writes_jsonl_that_loads(kind, tmp_path):
    from nbest_rescore.io.jsonl_nbest import read_jsonl_nbest

    model, inputs, cfg = _tiny_generator(kind)
    example = _example_module("nbest_from_transformers")
    special = {cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id}

    def decode(ids):
        return [f"w{int(i)}" for i in ids if int(i) not in special]

    path = tmp_path / "n.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for k, doc in ((0, "d0"), (1, "d0"), (2, "d1")):
            rec = example.nbest_record(model, inputs, f"utt{k}", decode, n=4, document=doc, max_new_tokens=6)
            f.write(json.dumps(rec) + "\n")
    s = read_jsonl_nbest(path)
    assert s.utt_ids == ["utt0", "utt1", "utt2"] and s.documents() == [[0, 1], [2]]
    u = s.utterances[0]
    assert s.total_scores and len(u) == 4 and all(c > 0 for c in u.ac_cost) and not u.lm_cost.any()
    assert any(len(h) < 6 for h in u.hyps) and any(len(h) == 6 for h in u.hyps)  # ended and cut beams
    for words, cost in zip(u.hyps, u.ac_cost):
        assert cost == pytest.approx(_teacher_forced_cost(model, inputs, cfg, words, ended=len(words) < 6), abs=1e-4)


def test_nbest_from_kaldi_script_on_ci(DATA, tmp_path):
    import subprocess
    import sys

    from nbest_rescore.io.jsonl_nbest import read_jsonl_nbest

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    out = tmp_path / "ci.jsonl"
    res = subprocess.run(["bash", str(REPO / "examples" / "nbest_from_kaldi.sh"), str(DATA / "ci"), str(out)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"60 utterances in {out}" in res.stdout
    s, k = read_jsonl_nbest(out), read_kaldi_nbest_dir(DATA / "ci")
    assert s.utt_ids == k.utt_ids and s.documents() == k.documents()
    for a, b in zip(s.utterances, k.utterances):
        assert (a.hyps, a.ac_cost.tolist(), a.lm_cost.tolist()) == (b.hyps, b.ac_cost.tolist(), b.lm_cost.tolist())
