"""Reference transcripts in Kaldi ``text`` format (``<uttid> w1 w2 ...``), or the
``text`` of a NeMo manifest (JSON Lines, :mod:`.nemo_nbest`)."""
from __future__ import annotations

import os
from typing import Dict, Tuple

from .jsonl_nbest import is_jsonl
from .kaldi_text import read_kaldi_text
from .nemo_nbest import manifest_references

__all__ = ["read_references"]


def read_references(path) -> Dict[str, Tuple[str, ...]]:
    """Reference word sequences ``{uttid: (w1, w2, ...)}`` in file order, read as
    :func:`~.kaldi_text.read_kaldi_text` reads (a bare id is an empty reference; words
    as written: the benchmark's are normalised already). For a plain N-best list
    (:func:`~.plain_nbest.read_plain_nbest`) read without ``utt_ids`` the utterance ids
    are the utterance indices (``0``, ``1``, ...), so the references must be keyed by
    those. A regular file starting with ``{`` (or named ``.jsonl``) is a NeMo manifest:
    ids from ``audio_filepath``, words from ``text`` (:func:`~.nemo_nbest.manifest_references`);
    a pipe is read once, as Kaldi text (sniffing its first bytes would consume them).

    Raises:
        DataError: the file is missing or not UTF-8, a line is blank, an utterance id
            occurs twice, or an utterance id holds a byte-order mark or zero-width
            character (``path:line``); a manifest as :func:`~.nemo_nbest.read_manifest`
            or an entry without ``text``.
    """
    manifest = os.path.isfile(os.fspath(path)) and is_jsonl(path)
    return manifest_references(path) if manifest else read_kaldi_text(path)
