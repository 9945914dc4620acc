"""The output layer as a component (``model.output``), the checkpoint names of its
modules, and the neural cache as a wrapper (issue 47)."""
import ast
from pathlib import Path

import pytest
import torch

from nbest_rescore.errors import DataError
from nbest_rescore.models import LanguageModel, build_model
from nbest_rescore.models.cache import CachedLM
from nbest_rescore.models.output_layer import AdaptiveOutput, LogProbOutput, SoftmaxOutput
from nbest_rescore.models.quantize import bfloat16_output_layer, quantize_dynamic_int8

REPO = Path(__file__).resolve().parents[2]
V = 120
SMALL = {"embedding_dim": 16, "hidden_size": 24}


def test_no_function_identity_test_of_logits():
    """The output path is the output layer's answer, never ``type(m).logits is ...``."""
    for path in (REPO / "nbest_rescore").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
                for side in (node.left, *node.comparators):
                    assert not (isinstance(side, ast.Attribute) and side.attr == "logits"), (path, ast.unparse(node))


@pytest.mark.parametrize("cfg,kind,cls", [({}, "softmax", SoftmaxOutput), ({"tie_weights": True}, "softmax", SoftmaxOutput),
                                          ({"output": "adaptive"}, "adaptive", AdaptiveOutput)])
def test_checkpoint_keys_keep_the_flat_names(cfg, kind, cls):
    m = build_model("gru", {**SMALL, **cfg}, V)
    assert isinstance(m.output, cls) and m.output.kind == kind
    keys = list(m.state_dict())
    assert not any(k.startswith("output.") for k in keys)
    assert {k.split(".")[0] for k in keys} >= ({"decoder"} if kind == "softmax" else {"adaptive"})
    assert ("project.weight" in keys) == bool(cfg.get("tie_weights"))
    twin = build_model("gru", {**SMALL, **cfg}, V)
    twin.load_state_dict(m.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), twin.state_dict().values()))
    gone = "decoder.bias" if kind == "softmax" else "adaptive.head.weight"  # (load errors name it so)
    with pytest.raises(RuntimeError, match=f'Missing key.*"{gone}"'):
        twin.load_state_dict({k: v for k, v in m.state_dict().items() if k != gone})


def test_the_kinds_answer_the_scoring_questions():
    soft = build_model("gru", SMALL, V).eval()
    assert soft.output.fused() and not soft.output.fused(training=True) and not soft.output.int8  # the defaults
    soft.output.softmax_impl = "plain"  # what the scorer sets from --softmax-impl
    assert not soft.output.fused()
    soft.output.softmax_impl = "fused"
    soft.fused_training = True  # the trainer's optim.fused_softmax
    assert soft.output.fused(training=True) and soft.supports_cuda_graph() == soft.graph_safe
    soft.output.softmax_impl = "nope"
    with pytest.raises(DataError, match="softmax-impl .nope."):
        soft.output.fused()
    soft.output.softmax_impl = "fused"
    q = quantize_dynamic_int8(soft)
    assert q.output.int8 and not q.output.fused()
    bf = bfloat16_output_layer(soft)
    assert bf.output.bf16[0].dtype == torch.bfloat16 and soft.output.bf16 is None
    ad = build_model("gru", {**SMALL, "output": "adaptive"}, V)
    assert not ad.output.graph_safe and not ad.supports_cuda_graph()


def test_cache_wraps_the_model():
    m = build_model("gru", SMALL, V)
    c = CachedLM(m, 8)
    assert not isinstance(c, LanguageModel) and isinstance(c.output, LogProbOutput)
    assert c.model is m and c.feature_dim == 24 and c.output.kind == "log-probs"
    assert [p for p in c.parameters()] == [p for p in m.parameters()]  # shared, nothing added
    with pytest.raises(DataError, match="bfloat16"):
        bfloat16_output_layer(c)
    x = torch.randint(0, V, (2, 5))
    out = c(x, c.init_state(2))
    logp, _ = c.log_probs(x, x, c.init_state(2))
    assert torch.equal(c.output.target_logits(out.features, x), logp)
    assert torch.allclose(torch.logsumexp(out.features, -1), torch.zeros(2, 5), atol=1e-5)
