"""The declared scorer interface (nbest_rescore.rescoring.interface): both scorers
implement it, rescoring needs nothing else of a scorer, and the modules that take a
scorer read only its declared members."""
import ast
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from nbest_rescore.rescoring.combine import Weights, flat_scores, segment_argmax
from nbest_rescore.rescoring.history import rescore
from nbest_rescore.rescoring.interface import ContextScorer, Scorer, SubwordScorer
from nbest_rescore.rescoring.scorer import NnScorer
from nbest_rescore.types import NbestSet
from tiny_models import random_checkpoint

PKG = Path(__file__).resolve().parents[2] / "nbest_rescore"
WEIGHTS = Weights(1.0, 9.5, 0.5, -0.629606)


def members(proto) -> set:
    """The names a Protocol declares (methods, properties, annotated attributes)."""
    names = set()
    for klass in proto.__mro__:
        if klass.__module__ == proto.__module__:
            names |= {n for n in vars(klass) if not n.startswith("_")} | set(getattr(klass, "__annotations__", {}))
    return names


class CountingScorer:
    """Exactly the Protocol's members, nothing else (no ``model``): the state counts the
    words read so far; a cost is the hypothesis' words + 1, plus 1e-3 per history word."""

    def __init__(self, direction: str = "forward"):
        self.device, self._direction = torch.device("cpu"), direction

    @property
    def direction(self) -> str:
        return self._direction

    def initial_state(self, n):
        return (torch.zeros(n, 1, dtype=torch.float64),)

    def advance(self, states, hyps):
        return (states[0] + torch.tensor([[float(len(h))] for h in hyps], dtype=torch.float64),)

    def costs(self, states, rows, hyps):
        before = states[0][:, 0].numpy()[np.asarray(rows, dtype=np.int64)]
        return np.array([len(h) + 1.0 for h in hyps]) + 1e-3 * before

    def settings(self):
        return {"direction": self.direction}

    def word_stats(self, counts):
        return {}


@pytest.fixture(scope="module")
def nn_scorer(ci_nbest, tmp_path_factory):
    from nbest_rescore.models import load_model

    model, vocab, _ = load_model(random_checkpoint(ci_nbest, tmp_path_factory.mktemp("lm") / "gru.pt"))
    return NnScorer(model, vocab)


def test_protocol_members_are_what_its_users_read():
    """Every ``scorer.X`` / ``sc.X`` read in history, perplexity and the api is a declared
    member (and the Protocol declares nothing they do not read)."""
    used = {}
    for rel in ("rescoring/history.py", "evaluation/perplexity.py", "api/score_spans.py", "api/lm_jobs.py"):
        for node in ast.walk(ast.parse((PKG / rel).read_text())):
            if isinstance(node, ast.Attribute):
                base = node.value
                name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
                if name in ("scorer", "sc"):
                    used.setdefault(rel, set()).add(node.attr)
    assert used["rescoring/history.py"] <= members(ContextScorer), used  # its extra members: checked isinstance
    assert members(ContextScorer) - members(Scorer) <= used["rescoring/history.py"]
    assert used["api/score_spans.py"] <= members(Scorer), used
    assert used["evaluation/perplexity.py"] <= members(SubwordScorer), used
    every = set().union(*used.values())
    assert members(SubwordScorer) <= every | {"initial_state", "advance", "device"}  # read by walk_documents
    assert members(Scorer) == {"device", "direction", "initial_state", "advance", "costs", "settings", "word_stats"}


def test_nn_scorer_implements_the_protocol(nn_scorer):
    assert isinstance(nn_scorer, Scorer) and not isinstance(nn_scorer, SubwordScorer)
    assert nn_scorer.direction == "forward" and nn_scorer.settings()["direction"] == "forward"


def test_hf_scorer_implements_the_protocol_without_a_model(hf_lm, ci_nbest):
    import nbest_rescore as nr

    sc = nr.load_lm(f"hf:{hf_lm('gpt2')}", context_tokens=24).scorer()
    assert isinstance(sc, Scorer) and isinstance(sc, SubwordScorer)
    assert not hasattr(sc, "model")  # rescore reads ``direction``, a declared member
    assert sc.direction == sc.settings()["direction"] == "forward" and sc.end_tokens == len(sc.text.end_ids)
    few = NbestSet(ci_nbest.utterances[:3], ci_nbest.doc_source)
    res = rescore(few, sc, WEIGHTS, "first-pass")
    assert np.isfinite(res.nn_cost).all() and sc.tokens >= sum(len(h) for u in few.utterances for h in u.hyps)


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_rescore_needs_only_the_protocol(ci_nbest, direction):
    """A scorer with only the declared members runs every policy; first-pass costs carry
    the first-pass 1-best of the previous (backward: following) utterances of the document."""
    nbest = NbestSet(ci_nbest.utterances[:12], ci_nbest.doc_source)
    sc = CountingScorer(direction)
    assert isinstance(sc, Scorer)
    flat = nbest.flat()
    length = np.array([len(h) + 1.0 for h in flat.hyps])
    np.testing.assert_array_equal(rescore(nbest, sc, WEIGHTS, "none").nn_cost, length)
    fp = segment_argmax(flat_scores(flat, replace(WEIGHTS, interp=1.0)), flat.offsets)
    want = length.copy()
    for doc in nbest.documents():
        order = doc if direction == "forward" else doc[::-1]
        read = 0
        for u in order:
            want[flat.offsets[u]:flat.offsets[u + 1]] += 1e-3 * read
            read += len(flat.hyps[fp[u]])
    np.testing.assert_allclose(rescore(nbest, sc, WEIGHTS, "first-pass").nn_cost, want, rtol=0, atol=1e-12)
    for history in ("rescored", "interpolated"):
        assert np.isfinite(rescore(nbest, sc, WEIGHTS, history).nn_cost).all()
