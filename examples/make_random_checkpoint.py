#!/usr/bin/env python
"""Write an untrained (randomly initialised) checkpoint of a given size, to benchmark
scoring speed at a target model size without training.

Speed does not depend on the weights: the same matrix products and state updates run
whatever the values (dense float kernels have no data-dependent shortcuts), so words/s
and memory measured with this checkpoint are those of a trained model of the same
architecture, vocabulary and size. Its costs are meaningless (near log V per word,
self-normalised costs far from the exact ones), and so is any WER obtained with it.
The checkpoint's info says ``untrained: true``.

Example (the issue's target size: a 1-layer 512-unit LSTM over the benchmark's full
vocabulary)::

    python examples/make_random_checkpoint.py --vocab ../shared/data/abc-nbest/lm/vocab.txt \\
        --model lstm --hidden 512 --out /tmp/lstm512.pt
    python -m benchmarks.rescore_speed --lm /tmp/lstm512.pt --nbest ../shared/data/abc-nbest/dev ...
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vocab", required=True, help="vocabulary file, one word per line (first column)")
    p.add_argument("--out", required=True, help="checkpoint to write (.pt)")
    p.add_argument("--model", default="lstm", help="registered model name (default: lstm)")
    p.add_argument("--hidden", type=int, default=512, help="hidden_size (default: 512)")
    p.add_argument("--embedding-dim", type=int, default=None, help="embedding_dim (default: --hidden)")
    p.add_argument("--layers", type=int, default=1, help="num_layers (default: 1)")
    p.add_argument("--config-json", default="{}",
                   help="further model config keys as JSON, e.g. '{\"num_heads\": 4}' (overrides the above)")
    p.add_argument("--seed", type=int, default=0, help="torch seed of the random weights")
    args = p.parse_args(argv)
    for name in ("hidden", "embedding_dim", "layers"):
        v = getattr(args, name)
        if v is not None and v < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {v}")
    try:
        args.extra = json.loads(args.config_json)
    except json.JSONDecodeError as exc:
        p.error(f"--config-json: not valid JSON ({exc}); example: '{{\"num_heads\": 4}}'")
    if not isinstance(args.extra, dict):
        p.error("--config-json: expected a JSON object, e.g. '{\"num_heads\": 4}'")
    return args


def main(argv=None):
    args = parse_args(argv)
    import torch

    from nbest_rescore.errors import DataError
    from nbest_rescore.models import build_model, get_model_class, save_model
    from nbest_rescore.vocab import Vocabulary

    torch.manual_seed(args.seed)
    sizes = {"embedding_dim": args.embedding_dim or args.hidden, "hidden_size": args.hidden,
             "num_layers": args.layers}
    try:
        fields = {f.name for f in dataclasses.fields(get_model_class(args.model).Config)}
        # --layers only where the model has layers (e.g. not the AMN)
        config = {**{k: v for k, v in sizes.items() if k in fields}, **args.extra}
        vocab = Vocabulary.from_file(args.vocab)
        model = build_model(args.model, config, len(vocab))
    except (DataError, KeyError, TypeError) as exc:
        sys.exit(f"error: {exc}")
    save_model(args.out, model, vocab, {"untrained": True, "seed": args.seed,
                                        "note": "random weights, for speed benchmarks only"})
    n = model.num_parameters()
    print(f"wrote {args.out}: untrained {args.model} {config}, vocabulary {len(vocab)}, "
          f"{n['total']} parameters ({n['without_embeddings']} without embeddings)")


if __name__ == "__main__":
    main()
