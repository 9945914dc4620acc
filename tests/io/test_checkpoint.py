import pytest
import torch

from nbest_rescore.errors import DataError
from nbest_rescore.io import CHECKPOINT_FORMAT, load_checkpoint, save_checkpoint


def _payload():
    return {
        "format": CHECKPOINT_FORMAT,
        "model": "lstm",
        "config": {"hidden": 4, "layers": 1},
        "vocab": ["<unk>", "</s>", "a"],
        "state_dict": {"emb.weight": torch.arange(12, dtype=torch.float32).reshape(3, 4)},
    }


def test_round_trip(tmp_path):
    p = tmp_path / "m.pt"
    save_checkpoint(p, _payload())
    got = load_checkpoint(p)
    assert got["format"] == CHECKPOINT_FORMAT
    assert got["model"] == "lstm" and got["config"] == {"hidden": 4, "layers": 1}
    assert got["vocab"] == ["<unk>", "</s>", "a"]
    assert torch.equal(got["state_dict"]["emb.weight"], _payload()["state_dict"]["emb.weight"])
    assert sorted(x.name for x in tmp_path.iterdir()) == ["m.pt"]


def test_format_added_when_absent(tmp_path):
    payload = _payload()
    del payload["format"]
    save_checkpoint(tmp_path / "m.pt", payload)
    assert "format" not in payload
    assert load_checkpoint(tmp_path / "m.pt")["format"] == CHECKPOINT_FORMAT


def test_missing_vocab(tmp_path):
    p = tmp_path / "m.pt"
    payload = _payload()
    del payload["vocab"]
    with pytest.raises(DataError, match="missing key.*vocab"):
        save_checkpoint(p, payload)
    assert not p.exists()
    torch.save(payload, p)
    with pytest.raises(DataError, match=rf"{p}: checkpoint is missing key\(s\) vocab"):
        load_checkpoint(p)


def test_wrong_format(tmp_path):
    p = tmp_path / "m.pt"
    payload = _payload()
    payload["format"] = "other/9"
    torch.save(payload, p)
    with pytest.raises(DataError, match="format is 'other/9'"):
        load_checkpoint(p)


def test_not_a_checkpoint(tmp_path):
    p = tmp_path / "m.pt"
    p.write_text("this is text\n")
    with pytest.raises(DataError, match=rf"{p}: not a readable torch checkpoint"):
        load_checkpoint(p)
    torch.save([1, 2], p)
    with pytest.raises(DataError, match="payload is a list"):
        load_checkpoint(p)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_checkpoint(tmp_path / "none.pt")
