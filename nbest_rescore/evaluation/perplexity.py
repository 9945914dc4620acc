"""Corpus-level perplexity: the state is carried within a document and reset at
document boundaries, every word and ``</s>`` is predicted (natural log inside,
perplexity = exp(mean negative log-likelihood per token))."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

import numpy as np

from ..corpus import encode_document, model_documents, nll_of_streams
from ..models.base import LanguageModel
from ..rescoring.history import walk_documents
from ..rescoring.interface import SubwordScorer
from ..store_streams import make_streams
from ..vocab import Vocabulary


@dataclass(frozen=True)
class PerplexityReport:
    """perplexity over all ``tokens`` (words + ``</s>``; ``<unk>`` tokens included and
    scored with the ``<unk>`` probability), ``nll`` total negative natural-log
    likelihood in nats, ``oov_rate`` percent of words (not ``</s>``) outside the
    vocabulary, ``documents`` count; ``lm_tokens``: for a subword LM (hf:) the tokens it
    read (sentence ends included), else None."""

    perplexity: float
    nll: float
    tokens: int
    words: int
    oov_words: int
    documents: int
    lm_tokens: Optional[int] = None

    @property
    def oov_rate(self) -> float:
        """Percent of words (``</s>`` excluded) outside the vocabulary."""
        return 100.0 * self.oov_words / max(1, self.words)

    def to_dict(self) -> dict:
        """JSON-ready dict including ``oov_rate`` (and, for a subword LM, ``tokens_per_word``:
        its tokens, ends included, per word + ``</s>``)."""
        out = {**asdict(self), "oov_rate": self.oov_rate}
        if self.lm_tokens is None:  # a word-level LM: the report as before
            del out["lm_tokens"]
        else:
            out["tokens_per_word"] = self.lm_tokens / max(1, self.tokens)
        return out


def corpus_perplexity(model: LanguageModel, vocab: Vocabulary, documents: Sequence,
                      batch_size: int = 16, bptt: int = 64, device="cpu", progress=None) -> PerplexityReport:
    """Perplexity of ``documents`` (lists of word-tuple sentences) under ``model``.

    Documents are scored as parallel streams (``batch_size`` of them), each from the
    initial state. A backward model (``model.direction == "backward"``) reads each
    document reversed (:func:`~nbest_rescore.corpus.model_documents`): its
    perplexity is the one a forward model with the same weights gets on the reversed
    text (same tokens: every word and one ``</s>`` per sentence).
    ``progress(done, total)`` is called per segment of ``bptt`` positions with
    counts of scored tokens (e.g. a :class:`~nbest_rescore.progress.Progress`).
    Raises ValueError if there is nothing to score.
    """
    was_training = model.training
    model.eval()
    encoded = [encode_document(d, vocab) for d in model_documents(documents, model.direction) if d]
    if not encoded:
        raise ValueError("no sentences to score")
    streams = make_streams(encoded, batch_size, align=bptt)
    nll = nll_of_streams(model, streams, bptt, device, progress)
    sentences = [s for doc in documents for s in doc]
    words, oov = sum(len(s) for s in sentences), sum(1 for s in sentences for w in s if w not in vocab)
    model.train(was_training)
    tokens = streams.num_tokens
    return PerplexityReport(math.exp(nll / tokens), nll, tokens, words, oov, len(encoded))


def history_perplexity(scorer: SubwordScorer, documents: Sequence, progress=None) -> PerplexityReport:
    """Perplexity of ``documents`` (lists of word-tuple sentences) under a scorer with
    the rescoring interface and token counters (a
    :class:`~nbest_rescore.rescoring.interface.SubwordScorer`:
    :class:`~nbest_rescore.rescoring.hf_scorer.HfScorer`):
    each sentence's cost after the previous sentences of its document, exactly as an
    utterance is scored after its 1-best history; documents advance in parallel, one
    sentence position at a time. Per word: exp(nll / (words + sentences)).
    ``progress(done, total)`` counts sentences. Raises ValueError if there is nothing to score."""
    docs = [[tuple(s) for s in d] for d in documents if d]
    if not docs:
        raise ValueError("no sentences to score")
    sentences = [s for d in docs for s in d]
    total, done, nll = len(sentences), [0], [0.0]
    tokens_before = scorer.tokens

    def read(idx, states):
        sents = [sentences[i] for i in idx]
        nll[0] += float(scorer.costs(states, list(range(len(idx))), sents).sum())
        done[0] += len(idx)
        if progress is not None:
            progress(done[0], total)
        return sents

    starts = np.cumsum([0] + [len(d) for d in docs])
    walk_documents([list(range(a, a + len(d))) for a, d in zip(starts, docs)], scorer, read)
    nll = nll[0]
    words = sum(len(s) for d in docs for s in d)
    lm_tokens = scorer.tokens - tokens_before + total * scorer.end_tokens
    return PerplexityReport(math.exp(nll / (words + total)), nll, words + total, words, 0, len(docs), lm_tokens)
