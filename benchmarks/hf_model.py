"""A random GPT-2-style Hugging Face LM of the recipe's size for the speed benchmarks
(``benchmarks/hf_scoring.py``): a byte-level BPE tokenizer trained on ``lm_train.txt``
(``tests/hf_models.py``'s :func:`train_bpe`) and a ``GPT2LMHeadModel`` built from its
config with random weights (speed does not depend on the weights), written with
``save_pretrained`` so that ``--lm hf:DIR`` loads it.

    python benchmarks/hf_model.py --text ../shared/data/abc-nbest/lm/lm_train.txt --out /tmp/gpt_random
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The recipe's model: 4 layers, 256 dimensions, 4 heads, 1024 positions.
RECIPE_GPT2 = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_positions": 1024}
RECIPE_VOCAB = 8000


def make_random_gpt2(out, text, vocab_size: int = RECIPE_VOCAB, bpe_lines: int = 0, seed: int = 0,
                     **config) -> Path:
    """Write a random GPT-2 (``RECIPE_GPT2`` updated by ``config``) and a BPE tokenizer of
    ``vocab_size`` tokens trained on the first ``bpe_lines`` lines of ``text`` (0: all)
    into ``out``; returns ``out``."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    sys.path.insert(0, str(REPO / "tests"))
    from hf_models import train_bpe  # tests/hf_models.py

    tok = train_bpe(Path(text), vocab_size=vocab_size, lines=bpe_lines or None)
    torch.manual_seed(seed)
    cfg = {**RECIPE_GPT2, **config, "vocab_size": len(tok), "bos_token_id": tok.bos_token_id,
           "eos_token_id": tok.eos_token_id}
    model = GPT2LMHeadModel(GPT2Config(**cfg))
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return Path(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--text", required=True, help="LM text to train the tokenizer on (lm_train.txt)")
    p.add_argument("--out", required=True, help="directory to write (save_pretrained)")
    p.add_argument("--vocab-size", type=int, default=RECIPE_VOCAB)
    p.add_argument("--bpe-lines", type=int, default=0, help="train the tokenizer on the first N lines (0: all)")
    args = p.parse_args(argv)
    print(make_random_gpt2(args.out, args.text, args.vocab_size, args.bpe_lines))


if __name__ == "__main__":
    main()
