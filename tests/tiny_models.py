"""Tiny per-family model settings shared by the model, adaptive-softmax, prefix-tree and
CUDA tests (one line per registered model; importable because tests/conftest.py puts
this folder on ``sys.path``)."""

SMALL = {"embedding_dim": 12, "hidden_size": 10}
EXTRA = {
    "amn": {"num_memcells": 3, "anneal_t0": 5.0},
    "hornn": {"order": 3, "pooling": "gated"},
    "transformer": {"num_layers": 2, "num_heads": 2, "ff_dim": 16, "window": 4, "dropout": 0.0},
    "attention": {"window": 4},
    "key-value": {"window": 3},
    "key-value-predict": {"window": 3},
    "ngram-rnn": {"order": 4},
    "dnc": {"memory_slots": 5, "memory_width": 4, "read_heads": 2, "deallocation": "fmd"},
    "lstm": {"num_layers": 2},
}


def random_checkpoint(nbest, path, family: str = "gru"):
    """Save a random model of ``family`` (SMALL sizes, seed 0) over the 300 most frequent
    words of the lists ``nbest`` to ``path``; returns ``path``."""
    from collections import Counter

    import torch

    from nbest_rescore.models import build_model, save_model
    from nbest_rescore.vocab import Vocabulary

    counts = Counter(w for u in nbest.utterances for h in u.hyps for w in h)
    vocab = Vocabulary(["</s>", "<unk>"] + sorted(w for w, _ in counts.most_common(300)))
    torch.manual_seed(0)
    save_model(path, build_model(family, {**SMALL, **EXTRA.get(family, {})}, len(vocab)).eval(), vocab,
               {"note": "random, for tests"})
    return path
