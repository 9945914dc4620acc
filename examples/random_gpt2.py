#!/usr/bin/env python
"""A random GPT-2-style Hugging Face LM of the recipe's size, for speed benchmarks
(``python -m benchmarks.hf_scoring`` builds one when given no ``--lm``): a byte-level
BPE tokenizer trained on ``lm_train.txt`` and a ``GPT2LMHeadModel`` built from its
config with random weights (speed does not depend on the weights), written with
``save_pretrained`` so that ``--lm hf:DIR`` loads it.

    python examples/random_gpt2.py --text ../shared/data/abc-nbest/lm/lm_train.txt --out /tmp/gpt_random
"""
from __future__ import annotations

import argparse
import json
import os
from itertools import islice
from pathlib import Path

#: The recipe's model: 4 layers, 256 dimensions, 4 heads, 1024 positions.
RECIPE_GPT2 = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_positions": 1024}
RECIPE_VOCAB = 8000


def train_bpe(text, vocab_size: int, lines=None):
    """A ``PreTrainedTokenizerFast`` of ``vocab_size`` tokens: byte-level BPE trained on
    the first ``lines`` lines of ``text`` (None: all), ``<|endoftext|>`` as BOS and EOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    with open(text, encoding="utf-8") as f:
        sample = list(islice(f, lines))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(sample, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>")


def make_random_gpt2(out, text, vocab_size: int = RECIPE_VOCAB, bpe_lines: int = 0, seed: int = 0,
                     **config) -> Path:
    """Write a random GPT-2 (``RECIPE_GPT2`` updated by ``config``) and a BPE tokenizer of
    ``vocab_size`` tokens trained on the first ``bpe_lines`` lines of ``text`` (0: all)
    into ``out``; returns ``out``."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = train_bpe(text, vocab_size, bpe_lines or None)
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
    p.add_argument("--config-json", default="{}",
                   help="GPT-2 config overrides as JSON, e.g. '{\"n_layer\": 1, \"n_embd\": 32}'")
    args = p.parse_args(argv)
    try:
        config = json.loads(args.config_json)
    except json.JSONDecodeError as exc:
        p.error(f"--config-json: not valid JSON ({exc}); example: '{{\"n_layer\": 1}}'")
    if not isinstance(config, dict):
        p.error("--config-json: expected a JSON object, e.g. '{\"n_layer\": 1}'")
    print(make_random_gpt2(args.out, args.text, args.vocab_size, args.bpe_lines, **config))


if __name__ == "__main__":
    main()
