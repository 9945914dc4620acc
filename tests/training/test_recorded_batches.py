"""The training batches read from the token store equal those of the reader it replaced:
``fixtures/batches_before_store.json`` holds digests of the streams that reader dealt
(recorded at commit 742520c with ``read_lm_text``, ``build_vocab``, ``encode_document``
and ``epoch_streams``, before any of this code existed) for forward and backward models,
three vocabulary policies, several batch sizes and BPTT lengths, unshuffled and two
seeds, and the validation streams. Here the same text goes through ``prepare_text`` and
``load_train_data`` (the path ``train`` takes), and every segment the trainer would read
is gathered from the memory-mapped store."""
import hashlib
import json
from pathlib import Path

import pytest
import torch

from nbest_rescore.config import TrainConfig, _build
from nbest_rescore.corpus import deal
from nbest_rescore.store_streams import StoreStreams
from nbest_rescore.training import distributed
from nbest_rescore.training.data import load_train_data
from nbest_rescore.training.text_store import PrepareOptions
from nbest_rescore.training.passes import epoch_streams
from nbest_rescore.training.word_family import EVAL_BPTT, WordFamily

RECORDED = json.loads((Path(__file__).parent / "fixtures" / "batches_before_store.json").read_text())


def _digest(streams, bptt):
    """The recorded digests of every column of ``streams`` (as the old reader's arrays)."""
    parts = [streams.segment(k, bptt) for k in range(0, streams.shape[1], bptt)]
    cols = [torch.cat([p[i] for p in parts], 1) for i in range(4)]
    out = {k: hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()[:16]
           for k, t in zip(("inputs", "targets", "mask", "reset"), cols)}
    out["shape"] = list(streams.shape)
    return out


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_store_batches_equal_the_recorded_reader(name, DATA, tmp_path, monkeypatch):
    import nbest_rescore.training.data as data_mod

    case = RECORDED[name]["case"]
    lm = DATA / "lm"
    vocab = {k: (str(lm / "vocab.txt") if k in ("restrict_to", "file") else v) for k, v in case["vocab"].items()}
    cfg = _build(TrainConfig, {"model": "gru", "vocab": vocab,
                               "data": {"train": str(lm / "lm_train.txt"), "valid": str(lm / "lm_valid.txt"),
                                        "max_words": case["max_words"], "max_valid_words": 20000},
                               "optim": {"batch_size": case["batch"], "bptt": case["bptt"]}})
    # (one process: the 13 MB text is one job's work here; the worker pool is tested elsewhere)
    monkeypatch.setattr(data_mod, "PrepareOptions", lambda progress: PrepareOptions(jobs=1, progress=False))
    data = load_train_data(cfg, WordFamily().encoding(cfg, None, False), tmp_path / "m.pt", distributed.SINGLE,
                           case["direction"], progress=False)
    words = data.store.words
    assert hashlib.sha256("\n".join(words).encode()).hexdigest()[:16] == RECORDED[name]["vocab_sha"]
    for seed in (None, 3, 4):
        streams = epoch_streams(data.train, case["batch"], case["bptt"], seed)
        got = _digest(streams, case["bptt"])
        got["segment_tokens"] = hashlib.sha256(json.dumps(streams.segment_tokens(case["bptt"]).tolist()).encode()).hexdigest()[:16]
        assert got == RECORDED[name][f"seed_{seed}"], (name, seed)
    assert _digest(StoreStreams(deal(data.valid, 64, align=EVAL_BPTT)), EVAL_BPTT) == RECORDED[name]["valid"]
