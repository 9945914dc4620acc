#!/usr/bin/env python3
"""Train a byte-level BPE tokenizer on LM text and save it with ``save_pretrained``
(for the ``hf.tokenizer`` of a ``model: hf`` config; docs/training.md "Training a
Hugging Face model").

Usage: python recipes/abc-nbest/local/train_bpe.py --text LM_TEXT --vocab-size N --out DIR
       [--max-words N] [--min-frequency 2]

The text is read as ``train`` reads it (one sentence per line, blank lines between
documents; ``--max-words`` takes the same prefix as ``data.max_words``). The tokenizer
is GPT-2's scheme (ByteLevel pre-tokenizer without a prefix space, ``<|endoftext|>`` as
BOS and EOS), see :mod:`nbest_rescore.training.bpe`. ``DIR`` is written atomically.
"""
import argparse
import json
import sys

from nbest_rescore.errors import DataError
from nbest_rescore.io.atomic import atomic_dir
from nbest_rescore.io.lm_text import read_lm_text
from nbest_rescore.training.bpe import train_byte_level_bpe


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--text", required=True, help="LM text (one sentence per line, blank lines between documents)")
    ap.add_argument("--vocab-size", type=int, required=True, help="tokens, the 256 bytes and <|endoftext|> included")
    ap.add_argument("--out", required=True, help="directory to write (tokenizer save_pretrained files)")
    ap.add_argument("--max-words", type=int, default=None, help="only the first N words of the text")
    ap.add_argument("--min-frequency", type=int, default=2, help="least count of a merged pair")
    args = ap.parse_args(argv)
    try:
        docs = read_lm_text(args.text, args.max_words)
        tok = train_byte_level_bpe((s for d in docs for s in d), args.vocab_size, args.min_frequency)
        settings = {"text": args.text, "vocab_size": args.vocab_size, "max_words": args.max_words,
                    "min_frequency": args.min_frequency}
        with atomic_dir(args.out, settings=settings) as tmp:
            tok.save_pretrained(str(tmp))
    except (DataError, ValueError) as exc:
        print(f"train_bpe.py: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"out": args.out, "vocab_size": len(tok)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
