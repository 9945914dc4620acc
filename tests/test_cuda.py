"""CUDA against CPU (skipped where no CUDA device is present, as in CI): every
registered model, and the GRU with the neural cache, scores the first ci utterances
with first-pass history to the same NN costs on both devices, in every scoring mode."""
import copy

import numpy as np
import pytest
import torch

from nbest_rescore.device import resolve_device
from nbest_rescore.models import MODEL_REGISTRY, build_model
from nbest_rescore.models.cache import with_cache
from nbest_rescore.rescoring.combine import Weights
from nbest_rescore.rescoring.history import rescore
from nbest_rescore.rescoring.scorer import NnScorer
from nbest_rescore.types import NbestSet
from nbest_rescore.vocab import Vocabulary

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"), pytest.mark.slow]


from tiny_models import EXTRA, SMALL  # noqa: E402  (tests/ is on sys.path, see conftest.py)


def test_resolve_device_turns_tf32_off():
    dev = resolve_device("cuda")
    assert dev.type == "cuda"
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32


@pytest.mark.parametrize("mode", ["tree", "padded"])
@pytest.mark.parametrize("name", sorted(MODEL_REGISTRY) + ["gru+cache"])
def test_cuda_costs_equal_cpu_costs(ci_nbest, name, mode):
    lists = NbestSet(ci_nbest.utterances[:12], ci_nbest.doc_source)
    counts = {}
    for u in lists.utterances:
        for h in u.hyps:
            for w in h:
                counts[w] = counts.get(w, 0) + 1
    vocab = Vocabulary(["</s>", "<unk>"] + sorted(sorted(counts, key=lambda w: -counts[w])[:200]))
    torch.manual_seed(0)
    base = name.split("+")[0]
    model = build_model(base, {**SMALL, **EXTRA.get(base, {})}, len(vocab)).eval()
    costs = {}
    for dev_name in ("cpu", "cuda"):
        dev = resolve_device(dev_name)
        m = copy.deepcopy(model).to(dev)
        if name.endswith("+cache"):
            m = with_cache(m, 20, 0.5, 0.2)
        res = rescore(lists, NnScorer(m, vocab, dev, mode=mode), Weights(), history="first-pass")
        costs[dev_name] = np.asarray(res.nn_cost)
    diff = np.abs(costs["cpu"] - costs["cuda"])
    assert np.isfinite(costs["cuda"]).all()
    if base == "dnc":
        # FMD deallocation and allocation take argmin / sort decisions: a near tie can go
        # either way in float32 arithmetic; all but a few hypotheses must agree
        assert np.mean(diff <= 1e-4) >= 0.99, diff.max()
    else:
        assert diff.max() <= 1e-4


def _random_streams(vocab_size=200, docs=40, bptt=10, batch=4, seed=0):
    from nbest_rescore.store_streams import make_streams

    rng = np.random.default_rng(seed)
    enc = []
    for _ in range(docs):
        ids = [0]
        for _ in range(int(rng.integers(2, 6))):
            ids += list(rng.integers(2, vocab_size, int(rng.integers(3, 12)))) + [0]
        enc.append(np.asarray(ids, dtype=np.int64))
    return make_streams(enc, batch, align=bptt)


@pytest.mark.parametrize("name", ["gru", "lstm", "amn"])
def test_cuda_graph_training_equals_eager(name):
    """The captured training step (optim.cuda_graph) gives the eager step's losses and
    weights (float32, TF32 off): the warm-up before capture leaves no trace."""
    from nbest_rescore.config import OptimConfig
    from nbest_rescore.training.passes import train_segments
    from nbest_rescore.training.step import StepOptions, make_optimizer

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    streams = _random_streams()
    torch.manual_seed(0)
    base = build_model(name, {**SMALL, **EXTRA.get(name, {})}, 200).cuda().train()
    out = {}
    for graphed in (False, True):
        m = copy.deepcopy(base)
        opt = make_optimizer(m, OptimConfig(lr=0.01), capturable=graphed)
        stats = [train_segments(m, opt, streams, 10, StepOptions(clip=1.0), max_steps=4, cuda_graph=graphed)
                 for _ in range(2)]
        out[graphed] = ([s.nll for s in stats], [p.detach().clone() for p in m.parameters()])
    assert out[True][0] == pytest.approx(out[False][0], rel=1e-5)
    for a, b in zip(out[True][1], out[False][1]):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_cuda_graph_falls_back_for_the_adaptive_softmax(caplog):
    """A step that reads back to the host (the adaptive softmax selects the rows of
    each tail cluster) is not captured: training goes on eagerly, with a warning."""
    from nbest_rescore.config import OptimConfig
    from nbest_rescore.training.passes import train_segments
    from nbest_rescore.training.step import StepOptions, make_optimizer

    streams = _random_streams()
    torch.manual_seed(0)
    m = build_model("gru", {**SMALL, "output": "adaptive", "adaptive_cutoffs": [20, 80]}, 200).cuda().train()
    opt = make_optimizer(m, OptimConfig(lr=0.01), capturable=True)
    first = train_segments(m, opt, streams, 10, StepOptions(), max_steps=4, cuda_graph=True)
    later = train_segments(m, opt, streams, 10, StepOptions(), max_steps=4, cuda_graph=True)
    assert np.isfinite(first.nll) and later.nll < first.nll
    assert "not captured" in caplog.text


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("history", ["first-pass", "interpolated"])
def test_cuda_hf_costs_equal_cpu_costs(ci_nbest, hf_lm, family, history):
    """An hf: LM (tiny, random) on CUDA: the shared-context tree and the padded path give
    the CPU's costs (float32, 1e-4); bfloat16 stays within 0.1 nats per token on average."""
    from nbest_rescore.api.lm_loading import load_lm
    from nbest_rescore.options import ScorerOptions

    lists = NbestSet(ci_nbest.utterances[:20], ci_nbest.doc_source)
    costs = {}
    for dev, mode, dtype in (("cpu", "tree", "float32"), ("cuda", "tree", "float32"), ("cuda", "padded", "float32"),
                             ("cuda", "tree", "bfloat16")):
        lm = load_lm(f"hf:{hf_lm(family)}", dev, context_tokens=128)
        scorer = lm.scorer(ScorerOptions(scoring=mode, dtype=dtype))
        assert scorer.mode == mode
        costs[dev, mode, dtype] = np.asarray(rescore(lists, scorer, Weights(), history=history).nn_cost)
    ref = costs["cpu", "tree", "float32"]
    assert np.abs(costs["cuda", "tree", "float32"] - ref).max() <= 1e-4
    assert np.abs(costs["cuda", "padded", "float32"] - ref).max() <= 1e-4
    tokens = np.array([len(h) + 1 for u in lists.utterances for h in u.hyps])
    assert np.mean(np.abs(costs["cuda", "tree", "bfloat16"] - ref) / tokens) <= 0.1
