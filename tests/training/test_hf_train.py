"""``train`` with ``model: hf``: a tiny GPT-2 (and a tiny Llama) from a transformers
config with a byte-level BPE trained here, through the CLI. The output loads with
``load_hf_lm``, the recorded validation perplexity is the per-word perplexity of the
windows docs/training.md describes (checked against plain transformers), ``--resume``
continues exactly, the output folder is written atomically and a bad ``hf`` block is one
error line naming the key."""
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from click.testing import CliRunner

pytest.importorskip("transformers")

from nbest_rescore.cli import main  # noqa: E402
from nbest_rescore.config import load_train_config  # noqa: E402
from nbest_rescore.io.checkpoint import load_checkpoint  # noqa: E402
from nbest_rescore.io.lm_text import read_lm_text  # noqa: E402
from nbest_rescore.models.hf import METADATA_FILE, load_hf_lm  # noqa: E402
from nbest_rescore.training import hf_train  # noqa: E402
from nbest_rescore.training.bpe import train_byte_level_bpe  # noqa: E402
from nbest_rescore.training.checkpointing import last_path  # noqa: E402
from nbest_rescore.training.trainer import train  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
GPT2 = {"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 64}
LLAMA = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
         "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 64}
VALID_WORDS = 1000
BPTT, CONTEXT = 16, 8


@pytest.fixture(autouse=True)
def restore_threads(monkeypatch):
    """One torch thread while training (the machine is shared); restored afterwards, as is
    the seed the CLI group leaves in the environment."""
    monkeypatch.setenv("NBEST_RESCORE_SEED", "0")
    monkeypatch.delenv("NBEST_RESCORE_SEED")
    old = torch.get_num_threads()
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def bpe(DATA, tmp_path_factory):
    """A byte-level BPE of 400 tokens learned from the first 3000 lines of lm_train.txt."""
    with open(DATA / "lm" / "lm_train.txt", encoding="utf-8") as f:
        lines = [line.split() for _, line in zip(range(3000), f)]
    out = tmp_path_factory.mktemp("bpe")
    train_byte_level_bpe(lines, 400).save_pretrained(str(out))
    return out


def write_config(path, DATA, bpe, hf=None, **optim):
    o = {"batch_size": 8, "bptt": BPTT, "lr": 0.003, "max_epochs": 2, "threads": 1, "seed": 1,
         "lr_schedule": "cosine", "warmup_steps": 5}
    o.update(optim)
    path.write_text(yaml.safe_dump({
        "model": "hf", "hf": hf or {"config": GPT2, "tokenizer": str(bpe), "context_tokens": CONTEXT},
        "data": {"train": str(DATA / "lm" / "lm_train.txt"), "valid": str(DATA / "lm" / "lm_valid.txt"),
                 "max_words": 2000, "max_valid_words": VALID_WORDS},
        "optim": o}))
    return path


def cli_train(cfg, out, *args):
    res = CliRunner().invoke(main, ["train", "--config", str(cfg), "--out", str(out), "--no-progress", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.output[res.output.index("{"):])


@pytest.fixture(scope="module")
def uninterrupted(DATA, bpe, tmp_path_factory):
    """Two epochs of the tiny GPT-2 (dropout 0.1, cosine schedule) in one run."""
    old = torch.get_num_threads()
    tmp = tmp_path_factory.mktemp("hf_full")
    out = tmp / "gpt"
    summary = cli_train(write_config(tmp / "c.yaml", DATA, bpe), out)
    torch.set_num_threads(old)
    return out, summary


def window_nll(model, ids, bptt, context):
    """NLL (nats) of ids[1:] in windows of ``bptt`` targets, each run after the
    ``context`` tokens before it (none before the document), with plain transformers."""
    n, total = len(ids) - 1, 0.0
    for k in range(0, n, bptt):
        a, b = max(0, k - context), min(n, k + bptt)
        logp = torch.log_softmax(model(torch.tensor([ids[a:b]])).logits[0].double(), -1)[k - a:]
        total -= logp.gather(1, torch.tensor(ids[k + 1:b + 1])[:, None]).sum().item()
    return total


def per_word_ppl(lm, DATA, bptt, context):
    """(perplexity per word, per token, tokens per word) of the validation text: each
    document is start_ids + every sentence's tokens and EOS."""
    docs = read_lm_text(DATA / "lm" / "lm_valid.txt", VALID_WORDS)
    nll, tokens, words = 0.0, 0, 0
    with torch.no_grad():
        for doc in docs:
            ids = list(lm.text.start_ids) + [i for s in lm.text.sentences(doc) for i in s]
            nll += window_nll(lm.model, ids, bptt, context)
            tokens += len(ids) - 1
            words += sum(len(s) + 1 for s in doc)
    return math.exp(nll / words), math.exp(nll / tokens), tokens / words


def test_output_loads_and_valid_ppl_is_per_word(uninterrupted, DATA):
    out, summary = uninterrupted
    assert summary["epochs"] == 2 and summary["words_per_s"] > 0
    assert (out / "model.safetensors").is_file() and not list(out.glob("*.bin"))
    assert Path(last_path(out)).is_file()
    lm = load_hf_lm(f"hf:{out}")
    info = json.loads((out / METADATA_FILE).read_text())["info"]
    assert info == lm.info and info["epochs"] == 2 and info["context_tokens"] == CONTEXT
    assert lm.context_tokens == 1  # scoring's default: the training window (16 + 8) less 32, at least 1
    assert load_hf_lm(f"hf:{out}", context_tokens=100).context_tokens == 100
    assert info["train_config"]["hf"]["config"] == GPT2 and len(info["history"]) == 2
    best = min(info["history"], key=lambda h: h["valid_ppl"])  # the weights written are the best epoch's
    assert summary["best_valid_ppl"] == info["best_valid_ppl"] == best["valid_ppl"]
    ppl, token_ppl, tokens_per_word = per_word_ppl(lm, DATA, BPTT, CONTEXT)
    assert ppl == pytest.approx(best["valid_ppl"], rel=1e-4)
    assert token_ppl == pytest.approx(best["valid_token_ppl"], rel=1e-4)
    assert tokens_per_word == pytest.approx(best["valid_tokens_per_word"], rel=1e-12) and tokens_per_word > 1
    assert ppl == pytest.approx(token_ppl ** tokens_per_word, rel=1e-9)
    # the model learned something from the uniform start (400 tokens)
    assert best["valid_token_ppl"] < 400


def test_resume_equals_an_uninterrupted_run(uninterrupted, DATA, bpe, tmp_path):
    a, _ = uninterrupted
    cfg = write_config(tmp_path / "c.yaml", DATA, bpe)
    b = tmp_path / "gpt"
    first = cli_train(cfg, b, "--stop-after-epochs", "1")
    assert first["epochs"] == 1
    after_one = load_checkpoint(last_path(b))["state_dict"]
    second = cli_train(cfg, b, "--resume", last_path(b))
    assert second["epochs"] == 2
    wa, wb = (load_checkpoint(last_path(p))["state_dict"] for p in (a, b))
    assert wa.keys() == wb.keys()
    assert any(not torch.equal(after_one[k], wb[k]) for k in wb)  # it trained on after the stop
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-6, rtol=0), k
    ha, hb = (json.loads((p / METADATA_FILE).read_text())["info"]["history"] for p in (a, b))
    assert [h["epoch"] for h in hb] == [1, 2]
    for x, y in zip(ha, hb):
        for key in ("train_ppl", "valid_ppl", "lr"):
            assert y[key] == pytest.approx(x[key], rel=1e-6), key
        assert (x["steps"], x["tokens"]) == (y["steps"], y["tokens"])
    ma, mb = (load_hf_lm(f"hf:{p}").model.state_dict() for p in (a, b))  # the best weights
    assert all(torch.allclose(ma[k], mb[k], atol=1e-6, rtol=0) for k in ma)


def test_sigterm_mid_epoch_and_resume_auto_end_on_the_uninterrupted_weights(uninterrupted, DATA, bpe, tmp_path,
                                                                            monkeypatch):
    """A SIGTERM during the 4th update of epoch 1 (sent from the learning-rate hook):
    that update finishes, exit 75 before the 5th (step 4, 0-based), a mid-epoch state in the .last.pt and no model folder yet; --resume auto
    ends on the uninterrupted run's weights."""
    import os
    import signal

    from nbest_rescore.training import epoch

    a, _ = uninterrupted
    cfg = write_config(tmp_path / "c.yaml", DATA, bpe)
    b = tmp_path / "gpt"
    calls, plain = [], epoch.set_lr

    def set_lr(opt, lr):
        calls.append(lr)
        if len(calls) == 4:
            os.kill(os.getpid(), signal.SIGTERM)
        plain(opt, lr)

    monkeypatch.setattr(epoch, "set_lr", set_lr)
    res = CliRunner().invoke(main, ["train", "--config", str(cfg), "--out", str(b), "--no-progress"])
    assert res.exit_code == 75 and "training stopped by SIGTERM in epoch 1 before step 4" in res.output, res.output
    position = load_checkpoint(last_path(b))["resume"]["position"]
    assert position["segments"] == 4 and not b.exists()
    monkeypatch.setattr(epoch, "set_lr", plain)
    assert cli_train(cfg, b, "--resume", "auto")["epochs"] == 2
    wa, wb = (load_checkpoint(last_path(p))["state_dict"] for p in (a, b))
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6, rtol=0) for k in wa)


def test_pretrained_fine_tunes_and_init_from_is_refused(uninterrupted, DATA, bpe, tmp_path):
    a, _ = uninterrupted
    cfg = write_config(tmp_path / "ft.yaml", DATA, bpe, hf={"pretrained": str(a), "context_tokens": CONTEXT},
                       max_epochs=1)
    res = cli_train(cfg, tmp_path / "ft")
    scratch = json.loads((a / METADATA_FILE).read_text())["info"]["history"][0]["valid_ppl"]
    assert res["best_valid_ppl"] < scratch
    res = CliRunner().invoke(main, ["train", "--config", str(cfg), "--out", str(tmp_path / "x"), "--no-progress",
                                    "--init-from", str(cfg)])
    assert res.exit_code == 1 and "--init-from" in res.output and "hf.pretrained" in res.output


def test_llama_config_trains_one_epoch(DATA, bpe, tmp_path):
    """A Llama (rotary positions, RMSNorm, untied output) from LlamaConfig, plain windows."""
    cfg = write_config(tmp_path / "c.yaml", DATA, bpe, hf={"config": LLAMA, "tokenizer": str(bpe)}, max_epochs=1)
    res = cli_train(cfg, tmp_path / "llama")
    lm = load_hf_lm(f"hf:{tmp_path / 'llama'}")
    assert type(lm.model).__name__ == "LlamaForCausalLM" and res["epochs"] == 1
    assert per_word_ppl(lm, DATA, BPTT, 0)[0] == pytest.approx(res["best_valid_ppl"], rel=1e-4)


def test_a_failed_run_leaves_no_folder(DATA, bpe, tmp_path, monkeypatch):
    def fail(directory, info):
        (Path(directory) / METADATA_FILE).write_text("half")
        raise OSError("disk full")

    monkeypatch.setattr(hf_train, "write_metadata", fail)
    cfg = load_train_config(write_config(tmp_path / "c.yaml", DATA, bpe, max_epochs=1))
    with pytest.raises(OSError, match="disk full"):
        train(cfg, tmp_path / "gpt", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "gpt.store"]  # (the prepared text stays)


@pytest.mark.parametrize("hf, key", [
    ({"config": {**GPT2, "n_embed": 32}, "tokenizer": "TOK"}, "hf.config: unknown key(s) ['n_embed']"),
    ({"config": {**GPT2, "model_type": "gpt3"}, "tokenizer": "TOK"}, "hf.config.model_type"),
    ({"config": GPT2}, "hf.tokenizer"),
    ({"config": GPT2, "tokenizer": "TOK", "context_tokens": 17}, "hf.context_tokens"),
    ({"config": {**GPT2, "n_positions": 20}, "tokenizer": "TOK", "context_tokens": 8}, "hf.context_tokens"),
    ({"config": GPT2, "tokenizer": "TOK", "pretrained": "TOK"}, "hf.pretrained"),
    ({"pretrained": "no/such/dir"}, "hf.pretrained"),
    ({"config": GPT2, "tokenizer": "TOK", "context": 8}, "hf: unknown key(s) ['context']"),
    (None, "hf: model: hf needs an hf block"),
    ({"config": {"model_type": "t5", "d_model": 8, "d_ff": 8, "d_kv": 4, "num_layers": 1, "num_heads": 2},
      "tokenizer": "TOK"}, "hf.config.model_type: 't5' is not a causal LM"),
])
def test_a_bad_hf_block_is_one_error_line_naming_the_key(DATA, bpe, tmp_path, hf, key):
    cfg = tmp_path / "c.yaml"
    write_config(cfg, DATA, bpe)
    raw = yaml.safe_load(cfg.read_text())
    raw["hf"] = json.loads(json.dumps(hf).replace("TOK", str(bpe))) if hf is not None else None
    cfg.write_text(yaml.safe_dump(raw))
    res = CliRunner().invoke(main, ["train", "--config", str(cfg), "--out", str(tmp_path / "m"), "--no-progress"])
    assert res.exit_code == 1, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and str(cfg) in lines[0], res.output
    assert not (tmp_path / "m").exists()


def test_an_encoder_config_is_refused_by_its_behaviour(DATA, bpe, tmp_path):
    """BERT passes the config checks (transformers maps it to BertLMHeadModel) but sees
    the words it predicts: refused once built, in one line, before any training."""
    bert = {"model_type": "bert", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
            "intermediate_size": 8}
    cfg = write_config(tmp_path / "c.yaml", DATA, bpe, hf={"config": bert, "tokenizer": str(bpe)}, max_epochs=1)
    res = CliRunner().invoke(main, ["train", "--config", str(cfg), "--out", str(tmp_path / "m"), "--no-progress"])
    assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
    assert res.output.startswith("Error: hf.config: the model (BertLMHeadModel) is not causal"), res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "m.store"]  # (the prepared text stays)


def test_train_bpe_script(DATA, tmp_path):
    import importlib.util

    import transformers

    path = REPO / "recipes" / "abc-nbest" / "local" / "train_bpe.py"
    spec = importlib.util.spec_from_file_location("train_bpe", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "bpe"
    assert script.main(["--text", str(DATA / "lm" / "lm_valid.txt"), "--vocab-size", "300", "--max-words", "3000",
                        "--out", str(out)]) == 0
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    text = hf_train.HfText(tok)
    assert len(tok) == 300 and text.prefix == " " and text.start_ids == text.end_ids == [tok.eos_token_id]
    assert tok.decode(text.sentences([("hello", "world")])[0]) == " hello world<|endoftext|>"
    assert script.main(["--text", str(DATA / "lm" / "lm_valid.txt"), "--vocab-size", "10", "--out",
                        str(tmp_path / "b2")]) == 1
    assert not (tmp_path / "b2").exists()


def encode_documents(docs, text):
    """The reference layout of a ``model: hf`` document (what the store must hold):
    int64 arrays, one per document: its single start token, then every sentence's
    tokens and EOS."""
    flat = [s for d in docs for s in d]
    ids = text.sentences(flat) if flat else []
    out, k = [], 0
    for d in docs:
        parts = [text.start_ids] + ids[k:k + len(d)]
        out.append(np.asarray([i for p in parts for i in p], dtype=np.int64))
        k += len(d)
    return out


def test_the_reference_layout_has_the_start_and_sentence_ends(bpe):
    import transformers

    text = hf_train.HfText(transformers.AutoTokenizer.from_pretrained(str(bpe)))
    docs = [[("the", "cat"), ()], [], [("a",)]]
    enc = encode_documents(docs, text)
    eos = text.end_ids[0]
    assert [list(e[:1]) for e in enc] == [text.start_ids] * 3
    assert list(enc[1]) == text.start_ids
    assert list(enc[0][1:]) == text.sentences([("the", "cat")])[0] + [eos]


def test_recipe_gpt_conf_has_the_gru_budget_and_validates(repo_data, bpe, tmp_path):
    """cpu-ablation/gpt.yaml trains on the GRU's text for the GRU's 10 minutes on one thread,
    validated on the same words; with a tokenizer in place it is a valid config."""
    conf = REPO / "recipes" / "abc-nbest" / "conf" / "cpu-ablation"
    gpt, gru = (yaml.safe_load((conf / f"{m}.yaml").read_text()) for m in ("gpt", "gru"))
    assert gpt["data"] == gru["data"]
    for key in ("max_seconds", "max_epochs", "threads", "lr_schedule", "clip"):
        assert gpt["optim"][key] == gru["optim"][key], key
    gpt["hf"]["tokenizer"] = str(bpe)
    gpt["data"] = {k: str(REPO / v) if k in ("train", "valid") else v for k, v in gpt["data"].items()}
    (tmp_path / "gpt.yaml").write_text(yaml.safe_dump(gpt))
    cfg = load_train_config(tmp_path / "gpt.yaml")
    assert cfg.model == "hf" and cfg.hf.config["model_type"] == "gpt2"


def test_an_hf_store_prepared_by_worker_processes_holds_the_trainer_s_ids(DATA, bpe, tmp_path, monkeypatch):
    """``prepare-text`` of a ``model: hf`` config: chunks encoded by two worker
    processes (each loading the tokenizer) give every document as
    :func:`encode_documents` lays it out."""

    from nbest_rescore.io import text_chunks
    from nbest_rescore.io.token_store import open_store
    from nbest_rescore.models.hf import HfText, import_transformers, load_tokenizer

    monkeypatch.setattr(text_chunks, "CHUNK_BYTES", 1 << 17)  # (the parent cuts the chunks: lm_valid is 6)
    corpus = DATA / "lm" / "lm_valid.txt"
    cfg = write_config(tmp_path / "c.yaml", DATA, bpe)
    whole = yaml.safe_load(cfg.read_text())
    whole["data"]["max_words"] = None  # (the whole text: both chunks)
    cfg.write_text(yaml.safe_dump(whole))
    res = CliRunner().invoke(main, ["prepare-text", "--config", str(cfg), "--text", str(corpus), "--out",
                                    str(tmp_path / "s"), "--jobs", "2", "--no-progress"])
    assert res.exit_code == 0, res.output
    store = open_store(tmp_path / "s")
    assert store.kind == "hf" and store.ids.dtype == np.uint16
    hf_text = HfText(load_tokenizer(import_transformers(), "tokenizer", str(bpe)))
    docs = read_lm_text(corpus)
    want = encode_documents(docs, hf_text)
    train = store.role("train")[0]
    got = [np.asarray(store.ids[store.docs[d]:store.docs[d + 1]]) for d in range(*train.documents)]
    assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want))
