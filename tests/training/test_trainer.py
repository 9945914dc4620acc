"""Training: document streams, configs, and the trained checkpoint's recorded facts
checked against an independent perplexity computation."""
import math

import numpy as np
import pytest
import torch

from nbest_rescore.config import load_train_config
from nbest_rescore.errors import DataError
from nbest_rescore.evaluation.perplexity import corpus_perplexity
from nbest_rescore.io.lm_text import read_lm_text
from nbest_rescore.models import load_model
from nbest_rescore.corpus import encode_document, segments
from stream_columns import make_streams  # noqa: E402  (tests/ is on sys.path, see conftest.py)
from nbest_rescore.vocab import Vocabulary

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_streams_hold_every_token_once_and_reset_at_documents(DATA):
    docs = read_lm_text(DATA / "lm" / "lm_valid.txt", 5000)
    words = sorted({w for d in docs for s in d for w in s})
    vocab = Vocabulary(["</s>", "<unk>"] + words)
    enc = [encode_document(d, vocab) for d in docs]
    st = make_streams(enc, 4)
    assert st.num_tokens == sum(len(e) - 1 for e in enc)
    assert int(st.reset.sum()) == len(enc)
    # every document appears contiguously in some stream, starting at a reset
    found = 0
    for b in range(st.inputs.shape[0]):
        starts = torch.nonzero(st.reset[b]).flatten().tolist()
        ends = starts[1:] + [int(st.mask[b].sum())]
        for s0, s1 in zip(starts, ends):
            seq = np.concatenate([st.inputs[b, s0:s1].numpy(), st.targets[b, s1 - 1:s1].numpy()])
            assert any(len(e) == len(seq) and (e == seq).all() for e in enc)
            found += 1
    assert found == len(enc)
    segs = list(segments(st, 7))
    assert sum(int(m.sum()) for _, _, m, _ in segs) == st.num_tokens


def test_recorded_validation_perplexity_is_reproducible(tiny_lm, DATA):
    model, vocab, info = load_model(tiny_lm)
    cfg = info["train_config"]
    valid = read_lm_text(DATA / "lm" / "lm_valid.txt", cfg["data"]["max_valid_words"])
    rep = corpus_perplexity(model, vocab, valid, batch_size=3)
    assert rep.perplexity == pytest.approx(info["best_valid_ppl"], rel=1e-4)
    assert info["parameters"]["total"] == sum(p.numel() for p in model.parameters())
    assert info["history"][0]["train_ppl"] > rep.perplexity / 10


def test_config_paths_and_errors(repo_data, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    cfg = load_train_config("recipes/abc-nbest/conf/amn.yaml")
    assert cfg.model == "amn" and cfg.model_config["num_memcells"] == 5
    assert cfg.data.train.endswith("lm_train.txt")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: gru\noptim:\n  learning_rate: 0.1\n")
    with pytest.raises(DataError, match="learning_rate.*valid"):
        load_train_config(bad)
    missing = tmp_path / "missing.yaml"
    missing.write_text("data:\n  train: no/such/file.txt\n")
    with pytest.raises(DataError, match="no/such/file.txt"):
        load_train_config(missing)


def test_vocabulary_from_counts_and_unk():
    from collections import Counter

    v = Vocabulary.from_counts(Counter({"a": 5, "b": 5, "c": 1, "d": 3}), max_size=4, restrict_to=["a", "b", "c"])
    assert v.words == ["</s>", "<unk>", "a", "b"]
    assert v.encode(["a", "zzz", "</s>"]) == [2, 1, 0]
