"""Parallel document streams for corpus-level training and perplexity.

A document of sentences s_1..s_n becomes the token stream ``</s> s_1 </s> s_2 .. s_n
</s>``: inputs are all tokens but the last, targets all but the first, so every word
and every ``</s>`` is predicted. Whole documents are dealt to ``B`` parallel streams
(each to the currently shortest stream), so the recurrent state can be carried from
one BPTT segment to the next and reset exactly where a new document starts
(``000`` section 5.1). A backward model (``model_config.direction: backward``) gets
the documents reversed first (:func:`model_documents`). A set of single sentences
(N-best hypotheses, MWER's training lists) is padded into one batch of rows
``</s> w_1 .. w_n`` -> ``w_1 .. w_n </s>`` by :func:`pad_batch`.
"""
from __future__ import annotations

import ctypes
import heapq
from dataclasses import dataclass
from itertools import chain
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from .io.lm_text import reverse_documents
from .models.base import DIRECTIONS, LanguageModel, State, detach_state, reset_state
from .vocab import Vocabulary


def model_documents(documents: Sequence[Sequence[Sequence[str]]], direction: str) -> list:
    """The documents in the order a model of ``direction`` reads them: unchanged for
    ``"forward"``; for ``"backward"`` each document's sentences in reverse order, each
    sentence word-reversed (:func:`~nbest_rescore.io.lm_text.reverse_documents`), so
    that :func:`encode_document` gives ``</s> rev(s_n) </s> .. rev(s_1) </s>``.

    Raises:
        ValueError: another direction (not in :data:`~nbest_rescore.models.base.DIRECTIONS`).
    """
    if direction == "forward":
        return list(documents)
    if direction == "backward":
        return reverse_documents(documents)
    raise ValueError(f"direction {direction!r}: expected one of {', '.join(DIRECTIONS)}")


def encode_document(sentences: Sequence[Sequence[str]], vocab: Vocabulary) -> np.ndarray:
    """int64 [n_tokens + 1]: ``</s>`` followed by each sentence and its ``</s>``."""
    ids = [vocab.eos] + [i for s in sentences for i in vocab.encode(s) + [vocab.eos]]
    return np.asarray(ids, dtype=np.int64)


@dataclass(frozen=True)
class Documents:
    """Encoded documents in one flat id array: document i is ``ids[starts[i]:ends[i]]``
    (as :func:`encode_document` makes it: the start token, then every sentence and its
    end token). ``ids`` may be a memory map of a token store
    (:mod:`~nbest_rescore.io.token_store`); nothing here copies it. ``weights``: an
    objective weight per document (float32 [D]; None: all 1)."""

    ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    weights: Optional[np.ndarray] = None

    @classmethod
    def of(cls, documents: Sequence[np.ndarray]) -> "Documents":
        """The arrays of :func:`encode_document` (copied into one array)."""
        lens = np.fromiter(map(len, documents), dtype=np.int64, count=len(documents))
        ends = np.cumsum(lens)
        ids = np.concatenate(documents).astype(np.int64, copy=False) if len(documents) else np.zeros(0, np.int64)
        return cls(ids, ends - lens, ends)

    def __len__(self) -> int:
        return len(self.starts)

    def reversed(self) -> "Documents":
        """Every document read backwards (``</s> rev(s_n) </s> .. rev(s_1) </s>``, what
        :func:`model_documents` ``"backward"`` encodes), in the same order; no copy."""
        n = len(self.ids)
        return Documents(self.ids[::-1], n - self.ends, n - self.starts, self.weights)


@dataclass(frozen=True)
class Layout:
    """Pieces of documents dealt to ``num_streams`` parallel streams of ``length``
    columns: piece p reads the inputs ``ids[start[p]:start[p] + n[p]]`` (targets one
    later) in stream ``lane[p]`` from column ``col[p]`` (a multiple of ``align``); the
    pieces sorted by (lane, col). ``weight``: float32 per piece, or None."""

    ids: np.ndarray
    start: np.ndarray
    n: np.ndarray
    lane: np.ndarray
    col: np.ndarray
    weight: Optional[np.ndarray]
    num_streams: int
    length: int
    align: int


def deal(documents: Documents, num_streams: int, align: int = 1, max_piece: Optional[int] = None,
         seed: Optional[int] = None) -> Layout:
    """Deal the documents to ``num_streams`` parallel streams (memory: a few integers
    per document, none per token).

    Args:
        documents: the encoded documents (those of fewer than 2 ids are left out).
        num_streams: B (fewer if there are fewer documents).
        align: each document starts at a multiple of ``align`` columns (the columns
            after its last token are padding); use the BPTT length so that no reset
            falls inside a segment.
        max_piece: documents with more targets than this are cut into pieces
            (:func:`split_document`); None: never cut.
        seed: None: :func:`_deal_in_order`; an integer shuffles the pieces with
            ``numpy.random.default_rng(seed)``, then :func:`_deal_balanced`.
    """
    start, n, weight = _pieces(documents, max_piece)
    num_streams = max(1, min(num_streams, len(n)))
    align = max(1, int(align))
    widths = n.astype(np.int64)  # columns each piece takes (in place: one array at a time)
    widths += align - 1
    widths //= align
    widths *= align
    widths = _compact(widths)
    if seed is None:
        lane = _deal_in_order(widths, num_streams)
        o = np.argsort(lane, kind="stable")
    else:
        rank = np.empty(len(n), dtype=_compact(np.array([len(n)])).dtype)
        rank[np.random.default_rng(seed).permutation(len(n))] = np.arange(len(n), dtype=rank.dtype)
        lane = _deal_balanced(widths, num_streams, rank)
        o = np.lexsort((rank, lane))
        del rank
    lane, widths, start, n = lane[o], widths[o], start[o], n[o]
    weight = None if weight is None else weight[o]
    del o
    col = np.cumsum(widths, dtype=np.int64)
    col -= widths
    first = np.searchsorted(lane, np.arange(num_streams))  # each lane's first piece
    if len(col):
        col -= col[np.minimum(first, len(col) - 1)][lane]
    length = int(np.bincount(lane, widths, minlength=num_streams).max()) if len(col) else 0
    del widths
    return Layout(documents.ids, start, n, lane, _compact(col, length), weight, num_streams, length, align)


def release_heap() -> None:
    """Give the memory freed on the C heap back to the system (glibc's ``malloc_trim``;
    elsewhere nothing): :func:`deal`'s temporary arrays of a few megabytes each come from
    the heap once larger ones were freed, and would otherwise stay resident."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _compact(a: np.ndarray, bound: Optional[int] = None) -> np.ndarray:
    """``a`` (non-negative integers below ``bound``, default its maximum + 1) as int32
    where that holds them, else int64: the layout keeps a few such arrays per document."""
    top = bound if bound is not None else (int(a.max()) + 1 if len(a) else 0)
    return a.astype(np.int32 if top < 1 << 31 else np.int64, copy=False)


def _pieces(documents: Documents, max_piece: Optional[int]):
    """(first input, targets, weight) of every piece: the documents of 2 ids or more,
    those longer than ``max_piece`` cut by :func:`split_document`, in document order."""
    lengths = documents.ends - documents.starts
    keep = lengths >= 2
    n = _compact(lengths[keep])
    del lengths
    n -= 1
    start = _compact(documents.starts[keep], len(documents.ids))
    weight = None if documents.weights is None else documents.weights[keep]
    limit = None if max_piece is None else max(1, max_piece)
    if limit is None or not len(n) or n.max() <= limit:
        return start, n, weight
    count = np.ones(len(n), dtype=np.int64)
    cut = {}
    for i in np.flatnonzero(n > limit).tolist():
        doc = np.asarray(documents.ids[start[i]:start[i] + n[i] + 1])
        cut[i] = np.array([len(p) - 1 for p in split_document(doc, limit)], dtype=np.int64)
        count[i] = len(cut[i])
    first = np.cumsum(count) - count
    out_start, out_n = np.repeat(start.astype(np.int64), count), np.repeat(n.astype(np.int64), count)
    for i, lens in cut.items():
        out_start[first[i]:first[i] + len(lens)] = start[i] + np.cumsum(lens) - lens
        out_n[first[i]:first[i] + len(lens)] = lens
    return (_compact(out_start, len(documents.ids)), _compact(out_n),
            None if weight is None else np.repeat(weight, count))


def _deal_balanced(widths: np.ndarray, num_streams: int, rank: np.ndarray) -> np.ndarray:
    """The stream of each piece, the streams about equally wide: the pieces, widest
    first (equal widths in ``rank`` order), each to the currently shortest stream (the
    first of equal ones); each stream then reads its pieces in ``rank`` order.

    Widest first bounds the streams' difference by about the narrowest pieces' width.
    Dealt in ``rank`` order instead, a long document dealt late lands on a full stream,
    and the epoch ends with that one stream running alone for thousands of updates of a
    handful of tokens each (on 0.9M words of lm_train, 30 streams: 1,289 of 2,837
    updates held fewer than half the batch's tokens, and a GRU's validation perplexity
    rose from 251 to 397 over that tail).
    """
    lane = np.empty(len(widths), dtype=np.int32)
    heap = [(0, k) for k in range(num_streams)]
    order = np.lexsort((rank, -widths))
    for at in range(0, len(order), 1 << 16):  # (in blocks: no Python int per piece held at once)
        block = order[at:at + (1 << 16)]
        got = []
        for w in widths[block].tolist():
            size, k = heap[0]
            got.append(k)
            heapq.heapreplace(heap, (size + w, k))
        lane[block] = got
    return lane


def _deal_in_order(widths: np.ndarray, num_streams: int) -> np.ndarray:
    """The stream of each piece: the pieces in order, in ``num_streams`` contiguous
    parts of about equal width (each piece to the part whose share of the corpus holds
    its midpoint; the last pieces to the remaining empty streams, so that none is empty)."""
    if not len(widths):
        return np.zeros(0, dtype=np.int32)
    before = np.cumsum(widths, dtype=np.int64) - widths
    k = np.floor((before + widths / 2) * num_streams / int(widths.sum())).astype(np.int64)
    k = np.minimum(num_streams - 1, k)
    return np.maximum(k, num_streams - (len(widths) - np.arange(len(widths)))).astype(np.int32)


def split_document(doc: np.ndarray, max_tokens: int) -> List[np.ndarray]:
    """Cut an encoded document (from :func:`encode_document`) into pieces of at most
    ``max_tokens`` targets, each cut after a ``</s>`` (so every piece again starts with
    the ``</s>`` input) where possible; every target stays in exactly one piece. A
    piece is read from the document-start state, like a document of its own."""
    n = len(doc) - 1
    if n <= max_tokens:
        return [doc]
    pieces, start = [], 0
    ends = np.flatnonzero(doc == doc[0])  # the </s> positions
    while n - start > max_tokens:
        limit = start + max_tokens
        cands = ends[(ends > start) & (ends <= limit)]
        cut = int(cands[-1]) if len(cands) else limit
        pieces.append(doc[start:cut + 1])
        start = cut
    pieces.append(doc[start:])
    return pieces


def segments(streams, bptt: int) -> Iterator[Tuple[Tensor, ...]]:
    """Consecutive BPTT segments ``(inputs, targets, mask, reset)``, each [B, <=bptt]
    (:class:`~nbest_rescore.store_streams.StoreStreams`)."""
    for start in range(0, streams.shape[1], bptt):
        yield streams.segment(start, bptt)[:4]


def run_segment(model: LanguageModel, state: State, inputs: Tensor, reset: Tensor, aligned: bool = False):
    """Run ``model`` over one segment, resetting streams where documents start.

    ``aligned=False``: the segment is split at every column where some stream starts
    a document; before each piece the state of those streams is replaced by the
    initial state (reads ``reset`` on the host: one synchronisation per segment on
    CUDA). ``aligned=True`` (streams made with ``align`` = the segment length, so
    resets fall in column 0 only): the rows of ``reset[:, 0]`` are reset and the
    whole segment is one model call (one cuDNN call for the recurrent models), with
    no host synchronisation.

    Args:
        inputs: int64 [B, T]; reset: bool [B, T].
    Returns:
        (features float [B, T, D], state after the segment, aux loss or None).
    """
    b, t = inputs.shape
    if aligned:
        state = reset_state(state, reset[:, 0], model.init_state(b, inputs.device))
        out = model(inputs, state)
        return out.features, out.state, out.aux_loss
    cols = torch.nonzero(reset.any(0)).flatten().tolist()
    bounds = sorted(set([0] + cols + [t]))
    feats, auxes = [], []
    initial = None
    for c0, c1 in zip(bounds[:-1], bounds[1:]):
        col = reset[:, c0]
        if bool(col.any()):
            if initial is None:
                initial = model.init_state(b, inputs.device)
            state = reset_state(state, col.to(inputs.device), initial)
        out = model(inputs[:, c0:c1], state)
        feats.append(out.features)
        state = out.state
        if out.aux_loss is not None:
            auxes.append(out.aux_loss * (c1 - c0) / t)
    aux = torch.stack(auxes).sum() if auxes else None
    return torch.cat(feats, 1), state, aux


@torch.inference_mode()
def nll_of_streams(model: LanguageModel, streams, bptt: int, device,
                   progress: Optional[Callable[[int, int], None]] = None) -> float:
    """Total negative natural-log likelihood (nats) of the streams' masked targets.

    The sum is kept on the device (float64) and read back once; streams aligned to
    ``bptt`` run each segment as one model call. ``progress(done, total)`` is called
    after each [B, bptt] segment with counts of real target tokens (counted on the
    host before the streams move to ``device``; no host synchronisation in the loop)."""
    done = None if progress is None else np.cumsum(streams.segment_tokens(bptt)).tolist()
    streams = streams.to(device)
    aligned = streams.align == bptt
    state = model.init_state(streams.shape[0], device)
    total = torch.zeros((), dtype=torch.float64, device=device)
    for k, (inp, tgt, mask, reset) in enumerate(segments(streams, bptt), 1):
        model.token_mask(mask)
        feats, state, _ = run_segment(model, state, inp, reset, aligned)
        logp = model.target_log_probs(feats, tgt)
        total -= (logp.double() * mask).sum()
        state = detach_state(state)
        if progress is not None:
            progress(done[k - 1], done[-1])
    return float(total)


@dataclass
class Batch:
    """inputs, targets: int64 [B, T]; lengths: int64 [B] (n + 1 per hypothesis);
    rows: int64 [B] index of each hypothesis's start state; items: int64 [B] position
    of each hypothesis in the caller's flat list."""

    inputs: Tensor
    targets: Tensor
    lengths: Tensor
    rows: Tensor
    items: Tensor


def pad_batch(seqs: Sequence[Sequence[int]], eos: int, rows, items) -> Batch:
    """Pad the id sequences (without ``</s>``) into one :class:`Batch`."""
    lengths = np.fromiter((len(s) + 1 for s in seqs), dtype=np.int64, count=len(seqs))
    t = int(lengths.max())
    inp = np.zeros((len(seqs), t), dtype=np.int64)
    tgt = np.zeros_like(inp)
    inp[:, 0] = eos
    words = np.arange(t) < (lengths - 1)[:, None]  # [B, T]: the words' target positions (the inputs': one later)
    flat = np.fromiter(chain.from_iterable(seqs), dtype=np.int64, count=int(lengths.sum()) - len(seqs))
    tgt[words] = flat
    inp[:, 1:][words[:, :-1]] = flat
    tgt[np.arange(len(seqs)), lengths - 1] = eos
    return Batch(torch.from_numpy(inp), torch.from_numpy(tgt), torch.from_numpy(lengths),
                 torch.as_tensor(np.asarray(rows, dtype=np.int64)),
                 torch.as_tensor(np.asarray(items, dtype=np.int64)))
