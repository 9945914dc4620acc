"""A byte-level BPE tokenizer trained on LM text, for ``model: hf`` configs that build a
new transformers model (docs/training.md "Training a Hugging Face model";
``recipes/abc-nbest/local/train_bpe.py`` is its command line).

GPT-2's scheme: the ByteLevel pre-tokenizer without a prefix space (so no unknown
characters), one special token :data:`END_TOKEN` that is BOS and EOS. Each sentence is
learned as :class:`~nbest_rescore.models.hf.HfText` encodes it: its words joined by
spaces after one leading space, so every word is learned as it appears inside running
text (``Ġword``).
"""
from __future__ import annotations

from typing import Iterable, Sequence

#: The special token that starts documents and ends sentences.
END_TOKEN = "<|endoftext|>"


def train_byte_level_bpe(sentences: Iterable[Sequence[str]], vocab_size: int, min_frequency: int = 2):
    """A ``transformers.PreTrainedTokenizerFast`` (byte-level BPE, :data:`END_TOKEN` as
    BOS and EOS) learned from ``sentences`` (word sequences) with at most ``vocab_size``
    tokens (the 256 bytes and the special token included).

    Raises:
        ValueError: ``vocab_size`` below 258 (the bytes and the special token).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 258:
        raise ValueError(f"vocab_size {vocab_size}: expected >= 258 (the 256 bytes and {END_TOKEN})")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[END_TOKEN],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator((" " + " ".join(words) for words in sentences if words), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=END_TOKEN, eos_token=END_TOKEN)
