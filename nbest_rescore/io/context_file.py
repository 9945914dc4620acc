"""``--context-file``: a text placed before the history of a document, or before the
hypotheses of an utterance, for an ``hf:`` LM (docs/models.md "Context").

The file has lines ``<id> text...`` (a document id or an utterance id of the N-best
lists, then the text's words, split on ASCII white space as a Kaldi text file); an id
that is a document id is a document's, else it must be an utterance id. Lists without a
line get no context.
"""
from __future__ import annotations

from typing import Dict, Mapping, Sequence, Tuple

from ..errors import DataError, format_location
from ..types import Words
from .kaldi_text import iter_kaldi_text

#: What a line of a context file holds, for the messages.
CONTEXT_LINE = "'<document-or-utterance-id> text...'"


def read_context_file(path) -> Dict[str, Tuple[int, Words]]:
    """``{id: (line number, words)}`` of a context file, in file order.

    Raises:
        DataError: the file is missing, not UTF-8 or empty; a line is blank, holds an id
            without text, or repeats an id (``path:line`` and the first line named).
    """
    entries: Dict[str, Tuple[int, Words]] = {}
    for line_no, key, words in iter_kaldi_text(path):
        loc = format_location(path, line_no)
        if not words:
            raise DataError(f"{loc}: the id {key!r} has no text; expected {CONTEXT_LINE}")
        if key in entries:
            raise DataError(f"{loc}: duplicate id {key!r} (first on line {entries[key][0]}); give one context per "
                            f"document or utterance")
        entries[key] = (line_no, words)
    if not entries:
        raise DataError(f"{path}: the context file is empty; expected lines {CONTEXT_LINE}")
    return entries


def match_contexts(entries: Mapping[str, Tuple[int, Words]], path, doc_ids: Sequence[str],
                   utt_ids: Sequence[str]) -> Tuple[Dict[str, Words], Dict[str, Words]]:
    """Split the entries of :func:`read_context_file` into (document id -> words,
    utterance id -> words): an id that is one of ``doc_ids`` is a document's, else it
    must be one of ``utt_ids``.

    Raises:
        DataError: ``path:line``: the first id (in file order) that names neither a
            document nor an utterance of the lists.
    """
    docs, utts = set(doc_ids), set(utt_ids)
    by_doc: Dict[str, Words] = {}
    by_utt: Dict[str, Words] = {}
    for key, (line_no, words) in entries.items():
        if key in docs:
            by_doc[key] = words
        elif key in utts:
            by_utt[key] = words
        else:
            raise DataError(f"{format_location(path, line_no)}: {key!r} is neither a document nor an utterance of "
                            f"the N-best lists; give contexts for their document ids (utt2doc) or utterance ids")
    return by_doc, by_utt
