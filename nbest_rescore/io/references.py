"""Reference transcripts in Kaldi ``text`` format: ``<uttid> w1 w2 ...``."""
from __future__ import annotations

from typing import Dict, Tuple

from .kaldi_text import read_kaldi_text

__all__ = ["read_references"]


def read_references(path) -> Dict[str, Tuple[str, ...]]:
    """Read reference word sequences ``{uttid: (w1, w2, ...)}`` in file order.

    A bare utterance id is an empty reference. Words are returned as written (the
    benchmark's references are already normalised: lower case, no punctuation).

    Raises:
        DataError: the file is missing or not UTF-8, a line is blank, or an utterance
            id occurs twice (``path:line``).
    """
    return read_kaldi_text(path)
