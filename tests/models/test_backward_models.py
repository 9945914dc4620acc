"""Backward LMs (``model_config: {direction: backward}``): accepted by every family,
stored in the checkpoint, shown by ``info``, and ``ppl`` of a backward model equals
the perplexity of a forward model with the same weights on the hand-reversed text."""
import json

import pytest
import torch
from click.testing import CliRunner

from nbest_rescore.api import PerplexityJob
from nbest_rescore.cli import main
from nbest_rescore.errors import DataError
from nbest_rescore.models import MODEL_REGISTRY, build_model, load_model, save_model
from nbest_rescore.models.cache import CachedLM
from nbest_rescore.vocab import Vocabulary

from tiny_models import EXTRA, SMALL  # noqa: E402  (tests/ is on sys.path, see conftest.py)

V = 40


def _vocab(words):
    return Vocabulary(["</s>", "<unk>"] + sorted(words))


@pytest.mark.parametrize("name", sorted(MODEL_REGISTRY))
def test_every_family_stores_its_direction(name, tmp_path):
    torch.manual_seed(0)
    m = build_model(name, {**SMALL, **EXTRA.get(name, {}), "direction": "backward"}, V)
    assert m.direction == "backward" and m.config_dict()["direction"] == "backward"
    path = tmp_path / "m.pt"
    save_model(path, m, _vocab(f"w{i}" for i in range(V - 2)))
    m2, _, _ = load_model(path)
    assert m2.direction == "backward"
    assert build_model(name, {**SMALL, **EXTRA.get(name, {})}, V).direction == "forward"  # the default


def test_bad_direction_names_the_key_and_the_choices():
    with pytest.raises(DataError, match=r"model_config\.direction must be one of forward, backward, got 'sideways'"):
        build_model("gru", {**SMALL, "direction": "sideways"}, V)
    with pytest.raises(DataError, match=r"direction"):
        build_model("lstm", {**SMALL, "direction": 1}, V)


def test_old_checkpoint_without_direction_is_forward(tmp_path):
    m = build_model("gru", SMALL, V)
    path = tmp_path / "old.pt"
    save_model(path, m, _vocab(f"w{i}" for i in range(V - 2)))
    payload = torch.load(path, weights_only=True)
    del payload["config"]["direction"]
    torch.save(payload, path)
    assert load_model(path)[0].direction == "forward"


def test_cache_wrapper_keeps_the_direction():
    m = build_model("gru", {**SMALL, "direction": "backward"}, V)
    assert CachedLM(m, size=5).direction == "backward"


def _read_docs(path, max_words):
    """Documents of the LM text read by hand (blank lines between documents)."""
    docs, cur, n = [], [], 0
    for line in open(path, encoding="utf-8"):
        words = line.split()
        if not words:
            if cur:
                docs.append(cur)
                cur = []
            continue
        cur.append(words)
        n += len(words)
        if n >= max_words:
            break
    return docs + ([cur] if cur else [])


def _write(path, docs):
    path.write_text("\n\n".join("\n".join(" ".join(s) for s in d) for d in docs) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def twins(DATA, tmp_path_factory):
    """(text, hand-reversed text, backward checkpoint, forward checkpoint with the same
    weights) on the first ~1500 words of lm_valid (several documents)."""
    tmp = tmp_path_factory.mktemp("backward")
    docs = _read_docs(DATA / "lm" / "lm_valid.txt", 1500)
    assert len(docs) >= 3
    text, rev = tmp / "text.txt", tmp / "reversed.txt"
    _write(text, docs)
    _write(rev, [[s[::-1] for s in d[::-1]] for d in docs])
    words = {w for d in docs for s in d for w in s}
    vocab = _vocab(sorted(words)[: len(words) // 2])  # some <unk> too
    torch.manual_seed(1)
    bwd = build_model("lstm", {**SMALL, "direction": "backward"}, len(vocab))
    fwd = build_model("lstm", SMALL, len(vocab))
    fwd.load_state_dict(bwd.state_dict())
    save_model(tmp / "bwd.pt", bwd, vocab, {"epochs": 1})
    save_model(tmp / "fwd.pt", fwd, vocab, {"epochs": 1})
    return text, rev, tmp / "bwd.pt", tmp / "fwd.pt"


def test_backward_ppl_equals_forward_ppl_on_reversed_text(twins, one_thread):
    text, rev, bwd, fwd = twins
    b, _ = PerplexityJob(lm=str(bwd), text=str(text), batch_size=3).run()
    f, _ = PerplexityJob(lm=str(fwd), text=str(rev), batch_size=3).run()
    assert b.tokens == f.tokens and b.words == f.words and b.oov_words == f.oov_words > 0
    assert b.nll == pytest.approx(f.nll, abs=1e-5)
    # and the direction matters: the forward twin on the text itself differs
    same, _ = PerplexityJob(lm=str(fwd), text=str(text), batch_size=3).run()
    assert abs(same.nll - b.nll) > 1e-3


def test_info_shows_the_direction(twins):
    _, _, bwd, fwd = twins
    runner = CliRunner()
    rows = [json.loads(line) for line in runner.invoke(main, ["info", "--json", str(bwd), str(fwd)]).output.splitlines()]
    assert [r["direction"] for r in rows] == ["backward", "forward"]
    table = runner.invoke(main, ["info", str(bwd)]).output
    assert "| lstm | backward |" in table
