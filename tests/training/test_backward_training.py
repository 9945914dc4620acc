"""Training a backward LM (``model_config: {direction: backward}``) is training the
same model on the reversed text: sentences word-reversed, each document's sentences
from its last to its first, ``</s>`` between them as in the forward stream."""
import math

import pytest
import torch

from nbest_rescore.config import DataConfig, OptimConfig, TrainConfig, VocabConfig, with_overrides
from nbest_rescore.errors import DataError
from nbest_rescore.models import load_model
from nbest_rescore.training.checkpointing import load_start
from nbest_rescore.corpus import encode_document, model_documents
from nbest_rescore.training.trainer import train
from nbest_rescore.vocab import Vocabulary

from tiny_models import SMALL  # noqa: E402  (tests/ is on sys.path, see conftest.py)


def test_backward_stream_mirrors_the_forward_one():
    vocab = Vocabulary(["</s>", "<unk>", "a", "b", "c", "d"])
    doc = [("a", "b"), ("c",), ("d", "a", "c")]
    assert model_documents([doc], "forward") == [doc]
    back = model_documents([doc], "backward")
    assert back == [[("c", "a", "d"), ("c",), ("b", "a")]]
    eos, a, b, c, d = vocab.encode(("</s>", "a", "b", "c", "d"))
    # </s> rev(s_3) </s> rev(s_2) </s> rev(s_1) </s>: every word and every </s> predicted once
    assert encode_document(back[0], vocab).tolist() == [eos, c, a, d, eos, c, eos, b, a, eos]
    with pytest.raises(ValueError, match="direction 'up'"):
        model_documents([doc], "up")


def _docs(path, max_words):
    docs, cur, n = [], [], 0
    for line in open(path, encoding="utf-8"):
        if not line.split():
            if cur:
                docs.append(cur)
                cur = []
            continue
        cur.append(line.split())
        n += len(cur[-1])
        if n >= max_words:
            break
    return docs + ([cur] if cur else [])


def _write(path, docs):
    path.write_text("\n\n".join("\n".join(" ".join(s) for s in d) for d in docs) + "\n", encoding="utf-8")


def _cfg(train_path, valid_path, direction):
    return TrainConfig(model="gru", model_config={**SMALL, "direction": direction},
                       data=DataConfig(train=str(train_path), valid=str(valid_path)),
                       vocab=VocabConfig(max_size=300),
                       optim=OptimConfig(batch_size=4, bptt=8, lr=0.01, max_epochs=2, patience=5, seed=7,
                                         threads=1, cuda_graph=False))


def test_backward_training_equals_forward_training_on_reversed_text(DATA, tmp_path, one_thread):
    train_docs, valid_docs = _docs(DATA / "lm" / "lm_train.txt", 2500), _docs(DATA / "lm" / "lm_valid.txt", 600)
    assert len(train_docs) >= 4
    paths = {}
    for name, docs in (("train", train_docs), ("valid", valid_docs)):
        paths[name], paths[name + "_rev"] = tmp_path / f"{name}.txt", tmp_path / f"{name}_rev.txt"
        _write(paths[name], docs)
        _write(paths[name + "_rev"], [[s[::-1] for s in d[::-1]] for d in docs])  # by hand
    back = train(_cfg(paths["train"], paths["valid"], "backward"), tmp_path / "bwd.pt", progress=False)
    ref = train(_cfg(paths["train_rev"], paths["valid_rev"], "forward"), tmp_path / "fwd.pt", progress=False)
    assert back.epochs == ref.epochs == 2 and math.isfinite(back.best_valid_ppl)
    assert back.best_valid_ppl == pytest.approx(ref.best_valid_ppl, rel=1e-6)
    assert [h["train_ppl"] for h in back.history] == pytest.approx([h["train_ppl"] for h in ref.history], rel=1e-6)
    mb, vb, info = load_model(tmp_path / "bwd.pt")
    mf, vf, _ = load_model(tmp_path / "fwd.pt")
    assert vb.words == vf.words and mb.direction == "backward" and mf.direction == "forward"
    for (k, a), (_, b) in zip(mb.state_dict().items(), mf.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=k)
    assert info["train_config"]["model_config"]["direction"] == "backward"


def test_resume_treats_missing_direction_as_forward(DATA, tmp_path, one_thread):
    docs = _docs(DATA / "lm" / "lm_valid.txt", 400)
    text = tmp_path / "t.txt"
    _write(text, docs)
    cfg = with_overrides(_cfg(text, text, "forward"), {("optim", "max_epochs"): 1})
    train(cfg, tmp_path / "m.pt", progress=False)
    plain = TrainConfig(model="gru", model_config=dict(SMALL), data=cfg.data, vocab=cfg.vocab, optim=cfg.optim)
    load_start(tmp_path / "m.last.pt", plain, resume=True)  # no error: the same model config
    with pytest.raises(DataError, match="model_config"):
        load_start(tmp_path / "m.last.pt", _cfg(text, text, "backward"), resume=True)
