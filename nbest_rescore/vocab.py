"""Word vocabulary of a neural LM: ids, ``<unk>`` mapping and ``</s>``.

``</s>`` (end of sentence) is both the last target of every sentence and the first
input of the next one, so a document is the stream ``</s> w1 .. wn </s> v1 .. </s>``.
Words not in the vocabulary map to ``<unk>``.
"""
from __future__ import annotations

from collections import Counter
from itertools import repeat
from typing import Iterable, List, Sequence

from .errors import DataError
from .os_errors import os_error_message

UNK = "<unk>"
EOS = "</s>"
SPECIALS = (EOS, UNK)
#: the smallest useful vocabulary: the specials and at least one real word
MIN_VOCAB_SIZE = len(SPECIALS) + 1


class Vocabulary:
    """An ordered list of words; ``</s>`` is id 0 and ``<unk>`` id 1.

    Raises:
        DataError: duplicate words, or the special tokens not at ids 0 and 1.
    """

    def __init__(self, words: Sequence[str]):
        words = list(words)
        if words[:2] != [EOS, UNK]:
            raise DataError(f"vocabulary must start with {EOS!r}, {UNK!r}; found {words[:2]}")
        self.words: List[str] = words
        self.index = {w: i for i, w in enumerate(words)}
        if len(self.index) != len(words):
            dup = [w for w, c in Counter(words).items() if c > 1]
            raise DataError(f"vocabulary has duplicate words: {dup[:5]}")
        self.eos = 0
        self.unk = 1

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self.index

    def encode(self, words: Iterable[str]) -> List[int]:
        """Word ids; out-of-vocabulary words become ``<unk>`` (id 1)."""
        return list(map(self.index.get, words, repeat(1)))

    @classmethod
    def from_counts(cls, counts: Counter, max_size: int | None = None, min_count: int = 1,
                    restrict_to: Iterable[str] | None = None) -> "Vocabulary":
        """Most frequent words with count >= ``min_count``, ids in order of decreasing
        count (ties alphabetical) after ``</s>`` and ``<unk>`` (the order the adaptive
        softmax's clusters need).

        Args:
            counts: word counts of the training text.
            max_size: total size including ``</s>`` and ``<unk>`` (None: no limit);
                at least ``MIN_VOCAB_SIZE`` (3).
            min_count: minimum count of a kept word.
            restrict_to: if given, only these words may enter (e.g. the first-pass
                decoder's vocabulary, so every N-best word is known).
        Raises:
            DataError: ``max_size`` below ``MIN_VOCAB_SIZE``, or no word left besides
                the specials (``min_count`` too high, ``restrict_to`` shares no word).
        """
        if max_size is not None and (isinstance(max_size, bool) or not isinstance(max_size, int)
                                     or max_size < MIN_VOCAB_SIZE):
            raise DataError(f"vocabulary max_size must be an integer >= {MIN_VOCAB_SIZE} ({', '.join(SPECIALS)} "
                            f"and at least one word) or None, got {max_size!r}")
        allowed = set(restrict_to) if restrict_to is not None else None
        items = [(w, c) for w, c in counts.items()
                 if c >= min_count and w not in SPECIALS and (allowed is None or w in allowed)]
        items.sort(key=lambda wc: (-wc[1], wc[0]))
        if max_size is not None:
            items = items[: max_size - len(SPECIALS)]
        if not items:
            raise DataError(f"no word of the training text has count >= {min_count}"
                            + (" and is in the restrict_to word list" if allowed is not None else "")
                            + f" ({len(counts)} distinct words): the vocabulary would hold only "
                              f"{', '.join(SPECIALS)}; lower vocab.min_count or check vocab.restrict_to")
        return cls(list(SPECIALS) + [w for w, _ in items])

    def by_frequency(self, counts: Counter) -> "Vocabulary":
        """The same words re-ordered by decreasing ``counts`` (stable for ties; words
        never seen last), ``</s>`` and ``<unk>`` kept at ids 0 and 1."""
        rest = sorted(self.words[2:], key=lambda w: -counts.get(w, 0))
        return Vocabulary(list(SPECIALS) + rest)

    @classmethod
    def from_file(cls, path) -> "Vocabulary":
        """One word per line (first column); specials are added if missing.

        Raises:
            DataError: the file cannot be read or holds no words.
        """
        try:
            with open(path, encoding="utf-8") as f:
                words = [line.split()[0] for line in f if line.strip()]
        except OSError as exc:
            raise DataError(f"vocabulary file {os_error_message(exc, path, writing=False)}") from exc
        if not words:
            raise DataError(f"vocabulary file {path} is empty")
        rest = [w for w in dict.fromkeys(words) if w not in SPECIALS and w not in ("<s>", "<eps>")]
        if not rest:
            raise DataError(f"vocabulary file {path} holds no word besides {', '.join(SPECIALS)}, <s>, <eps>")
        return cls(list(SPECIALS) + rest)
