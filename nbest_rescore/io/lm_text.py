"""LM training text: one sentence per line, documents separated by blank lines."""
from __future__ import annotations

from typing import List, Optional, Tuple

from ..errors import DataError
from ._common import iter_lines, split_fields

__all__ = ["read_lm_text", "reverse_documents"]


def read_lm_text(path, max_words: Optional[int] = None) -> List[List[Tuple[str, ...]]]:
    """Read documents of sentences: ``[[("w1", "w2", ...), ...], ...]``.

    One sentence per line, words split on ASCII white space; one or more blank (or
    white-space-only) lines end a document; leading/trailing blank lines are ignored.
    No ``<s>``/``</s>`` is added. A UTF-8 byte-order mark at the start of the file is
    ignored.

    Args:
        path: the text file (UTF-8).
        max_words: if given, keep whole sentences until the running word count reaches
            ``max_words`` (the sentence that reaches it is kept), then stop reading.

    Raises:
        DataError: the file is missing or not UTF-8 (``path:line``), or holds no
            sentence.
        ValueError: ``max_words`` is not a positive integer.
    """
    if max_words is not None and (isinstance(max_words, bool) or int(max_words) != max_words or max_words < 1):
        raise ValueError(f"max_words must be a positive integer, got {max_words!r}")
    docs: List[List[Tuple[str, ...]]] = []
    current: List[Tuple[str, ...]] = []
    total = 0
    for _, line in iter_lines(path):
        words = split_fields(line)
        if not words:
            if current:
                docs.append(current)
                current = []
            continue
        current.append(tuple(words))
        total += len(words)
        if max_words is not None and total >= max_words:
            break
    if current:
        docs.append(current)
    if not docs:
        raise DataError(f"{path}: no sentences (the file is empty or holds only blank "
                        f"lines); expected one sentence per line")
    return docs


def reverse_documents(documents) -> List[List[Tuple[str, ...]]]:
    """The documents as a backward LM reads them: each document's sentences in reverse
    order, the words of each sentence reversed (``[[("a", "b"), ("c",)]]`` ->
    ``[[("c",), ("b", "a")]]``). Documents keep their order; an empty document or
    sentence stays empty. Reversing twice gives the documents back. ``documents`` as
    :func:`read_lm_text` returns them; returns a new list of lists of word tuples."""
    return [[tuple(s)[::-1] for s in reversed(list(doc))] for doc in documents]
