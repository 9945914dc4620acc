"""Reference transcripts in Kaldi ``text`` format: ``<uttid> w1 w2 ...``."""
from __future__ import annotations

from typing import Dict, Tuple

from .kaldi_text import read_kaldi_text

__all__ = ["read_references"]


def read_references(path) -> Dict[str, Tuple[str, ...]]:
    """Reference word sequences ``{uttid: (w1, w2, ...)}`` in file order, read as
    :func:`~.kaldi_text.read_kaldi_text` reads (a bare id is an empty reference; words
    as written: the benchmark's are normalised already). For a plain N-best list (:func:`~nbest_rescore.io.plain_nbest.read_plain_nbest`) read without
    ``utt_ids`` the utterance ids are the utterance indices (``0``, ``1``, ...), so the
    references must be keyed by those.

    Raises:
        DataError: the file is missing or not UTF-8, a line is blank, an utterance id
            occurs twice, or an utterance id holds a byte-order mark or zero-width
            character (``path:line``).
    """
    return read_kaldi_text(path)
