"""Text before the history of an ``hf:`` LM (``--prompt``, ``--context-file``;
docs/models.md "Context"), as token rows of :class:`~.hf_scorer.HfScorer`'s state.

A context row is the tokens an utterance is scored after, at most K =
``--context-tokens`` of them. A document's row starts with its *prefix*: the document
start tokens, the prompt and the document's context, each text encoded as a sentence
(its words joined by single spaces, then the end tokens); the 1-best history follows,
cut from the left so that prefix + history stay within K: the history is cut, never the
prefix. An utterance's context (a sentence too) goes after the history, right before
its hypotheses, for that utterance only (it is not part of the history of the next
ones); the history is cut further to leave it room. Without a prompt and a document
context the prefix is empty and the start tokens are the history's first, cut with it
(the scorer's rows as before these options).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import DataError
from ..types import Words


@dataclass(frozen=True)
class TextContext:
    """What goes before the history: ``prompt`` (words; () for none) before every
    document's, ``documents`` (document id -> words) after the prompt, ``utterances``
    (utterance id -> words) after the history, before that utterance's hypotheses."""

    prompt: Words = ()
    documents: Mapping[str, Words] = field(default_factory=dict)
    utterances: Mapping[str, Words] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.prompt or self.documents or self.utterances)


class ContextTokens:
    """The token ids of a :class:`TextContext` under an hf: LM's text convention.

    Args:
        text: the :class:`~nbest_rescore.models.hf.HfText` (``sentences``, ``start_ids``).
        context: the texts.
        k: the context budget K (``--context-tokens``).
    Raises:
        DataError: the start tokens, the prompt and the longest document and utterance
            contexts take more than K tokens (no room would be left: checked before any
            scoring).
    """

    def __init__(self, text, context: TextContext, k: int):
        self.k, self.start = k, list(text.start_ids)
        self.prompt = text.sentences([context.prompt])[0] if context.prompt else []
        self.documents = _encode(text, context.documents)
        self.utterances = _encode(text, context.utterances)
        longest = len(self.start) + len(self.prompt) + _longest(self.documents) + _longest(self.utterances)
        if context and longest > k:
            raise DataError(f"--prompt/--context-file: the document start, the prompt and the longest document and "
                            f"utterance contexts take {longest} tokens, more than --context-tokens {k}: give a "
                            f"larger --context-tokens or shorter texts")

    def settings(self) -> dict:
        """What ``wer.json`` records: {} without a context, else the prompt's tokens and
        the number of document and utterance contexts."""
        if not (self.prompt or self.documents or self.utterances):
            return {}
        return {"prompt_tokens": len(self.prompt), "document_contexts": len(self.documents),
                "utterance_contexts": len(self.utterances)}

    def prefix(self, doc_id: Optional[str]) -> Tuple[List[int], int]:
        """(the first tokens of document ``doc_id``'s row, the prefix length kept whole):
        start + prompt + document context, or without a prompt and a context for it the
        start tokens (cut with the history: prefix length 0)."""
        ctx = self.documents.get(doc_id, []) if doc_id is not None else []
        if not self.prompt and not ctx:
            return self.start[-self.k:], 0
        row = self.start + self.prompt + ctx
        return row, len(row)

    def rows(self, doc_ids: Sequence[Optional[str]]) -> Tuple[np.ndarray, np.ndarray]:
        """(int64 [n, K] rows, -1 on the left; int64 [n] prefix lengths) of the
        documents ``doc_ids`` at their start."""
        ids = np.full((len(doc_ids), self.k), -1, dtype=np.int64)
        plen = np.zeros(len(doc_ids), dtype=np.int64)
        for i, d in enumerate(doc_ids):
            row, plen[i] = self.prefix(d)
            ids[i, self.k - len(row):] = row
        return ids, plen

    def with_utterances(self, ids: np.ndarray, plen: np.ndarray, utt_ids: Sequence[str]) -> Optional[np.ndarray]:
        """int64 [n, K]: row i of ``ids`` (prefix length ``plen[i]``) with utterance
        ``utt_ids[i]``'s context after its history (the history cut to leave it room);
        None when none of them has a context."""
        ctx = [self.utterances.get(u) for u in utt_ids]
        if not any(ctx):
            return None
        out = ids.copy()
        for i, c in enumerate(ctx):
            if c:
                out[i] = fit_row(ids[i], int(plen[i]), c, suffix=True)
        return out


def fit_row(row: np.ndarray, plen: int, new: Sequence[int], suffix: bool = False) -> np.ndarray:
    """int64 [K]: the row ``row`` (int64 [K], -1 on the left; its first ``plen`` real
    tokens the prefix) with the tokens ``new`` after its history, the history cut from
    the left to fit K; ``suffix``: ``new`` is kept whole (an utterance's context), else
    it is history too (a 1-best read by ``advance``)."""
    k, real = len(row), row[row >= 0]
    prefix, history = real[:plen], real[plen:]
    new = np.asarray(new, dtype=np.int64)
    if suffix:
        tail = np.concatenate([_last(history, k - plen - len(new)), new])
    else:
        tail = _last(np.concatenate([history, new]), k - plen)
    out = np.full(k, -1, dtype=np.int64)
    kept = np.concatenate([prefix, tail])
    out[k - len(kept):] = kept
    return out


def _last(tokens: np.ndarray, n: int) -> np.ndarray:
    """The last ``n`` of ``tokens`` (all when fewer; none when ``n`` <= 0)."""
    return tokens[max(0, len(tokens) - n):] if n > 0 else tokens[:0]


def _encode(text, texts: Mapping[str, Words]) -> Dict[str, List[int]]:
    """id -> token ids (a sentence: words, then the end tokens)."""
    keys = list(texts)
    return dict(zip(keys, text.sentences([tuple(texts[k]) for k in keys])))


def _longest(tokens: Mapping[str, List[int]]) -> int:
    return max((len(t) for t in tokens.values()), default=0)
