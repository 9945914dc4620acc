"""``nbest-rescore prepare-text`` and ``train`` on its store, through the real CLI: the
store holds what the config asks for, a run on it trains as a run on the text does
(the same weights), a config that does not fit the store is one line, and segments are
read from the store's file without mapping it."""
import json
import re

import numpy as np
import pytest
import torch
import yaml
from click.testing import CliRunner

from nbest_rescore.cli import main
from nbest_rescore.corpus import Documents, deal
from nbest_rescore.store_streams import StoreStreams
from nbest_rescore.io.lm_text import read_lm_text
from nbest_rescore.io.token_store import open_store


def _config(tmp_path, DATA, name="c.yaml", **data):
    lm = DATA / "lm"
    cfg = {"model": "gru", "model_config": {"embedding_dim": 8, "hidden_size": 8},
           "data": {"train": str(lm / "lm_valid.txt"), "max_words": 3000, **data},
           "vocab": {"max_size": 500, "restrict_to": str(lm / "vocab.txt")},
           "optim": {"batch_size": 4, "bptt": 10, "max_epochs": 1, "threads": 1, "checkpoint_interval": "off"}}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return path


def _run(*args):
    res = CliRunner().invoke(main, [str(a) for a in args])
    return res.exit_code, res.output


def test_prepare_text_then_train_on_the_store_as_on_the_text(DATA, tmp_path):
    code, out = _run("prepare-text", "--config", _config(tmp_path, DATA), "--out", tmp_path / "lm.store",
                     "--no-progress")
    assert code == 0, out
    report = json.loads(out)
    docs = read_lm_text(DATA / "lm" / "lm_valid.txt", 3000)  # independent: the old reader's prefix
    assert report["sources"] == [{"name": "lm_valid", "role": "train", "words": sum(len(s) for d in docs for s in d),
                                  "sentences": sum(len(d) for d in docs), "documents": len(docs)}]
    assert report["dtype"] == "uint16" and report["reused"] is False
    code, out = _run("prepare-text", "--config", _config(tmp_path, DATA), "--out", tmp_path / "lm.store",
                     "--no-progress")
    assert code == 0 and json.loads(out)["reused"] is True
    # train on the store (its budget is the store's: no data.max_words) and on the text
    on_store = _config(tmp_path, DATA, "s.yaml", train=str(tmp_path / "lm.store"), max_words=None)
    code, out = _run("train", "--config", on_store, "--out", tmp_path / "a.pt", "--no-progress")
    assert code == 0, out
    code, out = _run("train", "--config", _config(tmp_path, DATA), "--out", tmp_path / "b.pt", "--no-progress")
    assert code == 0, out
    assert (tmp_path / "b.store" / "manifest.json").exists()  # the text prepared beside --out
    a, b = (torch.load(tmp_path / f"{n}.pt", weights_only=False)["state_dict"] for n in "ab")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_config_that_does_not_fit_the_store_is_one_line(DATA, tmp_path):
    assert _run("prepare-text", "--config", _config(tmp_path, DATA), "--out", tmp_path / "lm.store",
                "--no-progress")[0] == 0
    other = _config(tmp_path, DATA, "o.yaml", train=str(tmp_path / "lm.store"), max_words=None)
    cfg = yaml.safe_load(other.read_text())
    cfg["vocab"]["max_size"] = 400
    other.write_text(yaml.safe_dump(cfg))
    code, out = _run("train", "--config", other, "--out", tmp_path / "m.pt", "--no-progress")
    assert code == 1
    assert out.startswith(f"Error: data.train {tmp_path / 'lm.store'}: prepared with another vocabulary") and \
        "max_size: the config gives 400, the store has 500" in out and len(out.strip().splitlines()) == 1
    assert not (tmp_path / "m.pt").exists()


def test_store_streams_read_the_file_and_map_none_of_it(DATA, tmp_path):
    """Segments gathered from a store (forward and reversed) equal those of the same
    layout in memory, and reading a whole epoch's segments leaves no page of the ids
    file resident in the process (they are read with pread, not through the map)."""
    assert _run("prepare-text", "--config", _config(tmp_path, DATA), "--text", DATA / "lm" / "lm_train.txt",
                "--out", tmp_path / "big.store", "--no-progress", "--jobs", "1")[0] == 0
    store = open_store(tmp_path / "big.store")  # (the config's budget: 3000 words)
    docs = Documents(store.ids, np.asarray(store.docs[:-1]), np.asarray(store.docs[1:]))
    ids = np.fromfile(tmp_path / "big.store" / "ids.bin", dtype=store.ids.dtype)  # (read, not mapped)
    in_memory = Documents(ids, docs.starts, docs.ends)

    def mapped_kb():
        """Resident KB of this process's mappings of this store's ids.bin (/proc/self/smaps;
        stores of other tests of the same process may still be mapped)."""
        total, inside, path = 0, False, str(tmp_path / "big.store" / "ids.bin")
        with open("/proc/self/smaps") as f:
            for line in f:
                if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):
                    inside = line.rstrip().endswith(path)
                elif inside and line.startswith("Rss:"):
                    total += int(line.split()[1])
        return total

    for d, m in ((docs, in_memory), (docs.reversed(), in_memory.reversed())):
        lazy, ref = StoreStreams(deal(d, 3, align=7, seed=2)), StoreStreams(deal(m, 3, align=7, seed=2))
        for k in range(0, lazy.shape[1], 7):
            assert all(torch.equal(a, b) for a, b in zip(lazy.segment(k, 7), ref.segment(k, 7)))
    assert mapped_kb() == 0
