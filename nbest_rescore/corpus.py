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


@dataclass
class Streams:
    """B parallel streams of equal padded length L.

    inputs, targets: int64 [B, L]; mask: bool [B, L] (False = padding);
    reset: bool [B, L] (True where a document starts: the state is reset before
    reading that input). ``align``: every document starts at a multiple of it (1 =
    packed tightly); with ``align`` = the BPTT length, resets fall on segment starts
    only and a segment runs as one model call (:func:`run_segment` ``aligned=True``).
    """

    inputs: Tensor
    targets: Tensor
    mask: Tensor
    reset: Tensor
    align: int = 1

    @property
    def num_tokens(self) -> int:
        """Number of real (unpadded) target tokens."""
        return int(self.mask.sum())

    def to(self, device) -> "Streams":
        """The same streams with every tensor on ``device``."""
        return Streams(*(t.to(device) for t in (self.inputs, self.targets, self.mask, self.reset)), self.align)

    def rows(self, index: slice) -> "Streams":
        """The streams ``index`` (a slice of the B rows), e.g. one process's share."""
        return Streams(*(t[index] for t in (self.inputs, self.targets, self.mask, self.reset)), self.align)


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


def make_streams(documents: Sequence[np.ndarray], num_streams: int, align: int = 1,
                 max_piece: Optional[int] = None, seed: Optional[int] = None) -> Streams:
    """Deal the encoded documents (from :func:`encode_document`) to ``num_streams``
    parallel streams.

    Args:
        documents: int64 arrays ``</s> s_1 </s> .. </s>``.
        num_streams: B (fewer if there are fewer documents).
        align: each document starts at a multiple of ``align`` columns (the columns
            after its last token are padding); use the BPTT length so that no reset
            falls inside a segment.
        max_piece: documents with more targets than this are cut into pieces
            (:func:`split_document`); None: never cut.
        seed: None: :func:`_deal_in_order`; an integer shuffles the documents with
            ``numpy.random.default_rng(seed)``, then :func:`_deal_balanced`.
    Returns:
        :class:`Streams` on the CPU.
    """
    documents = [d for d in documents if len(d) >= 2]
    if max_piece is not None:
        documents = [p for d in documents for p in split_document(d, max(1, max_piece))]
    num_streams = max(1, min(num_streams, len(documents)))
    align = max(1, int(align))
    widths = [-(-(len(d) - 1) // align) * align for d in documents]  # columns each document takes
    lanes = (_deal_in_order(widths, num_streams) if seed is None else
             _deal_balanced(widths, num_streams, np.random.default_rng(seed).permutation(len(documents))))
    length = max((sum(widths[i] for i in lane) for lane in lanes), default=0)
    inp, tgt, mask, reset = (np.zeros((num_streams, length), dtype=t) for t in (np.int64, np.int64, bool, bool))
    for k, lane in enumerate(lanes):
        pos = 0
        for i in lane:
            doc, n = documents[i], len(documents[i]) - 1
            inp[k, pos:pos + n] = doc[:-1]
            tgt[k, pos:pos + n] = doc[1:]
            mask[k, pos:pos + n] = True
            reset[k, pos] = True
            pos += widths[i]
    return Streams(*(torch.from_numpy(a) for a in (inp, tgt, mask, reset)), align)


def _deal_balanced(widths: Sequence[int], num_streams: int, order) -> List[List[int]]:
    """Document indices per stream, the streams about equally wide: the documents,
    widest first (equal widths in ``order``), each to the currently shortest stream
    (the first of equal ones); then each stream's documents in ``order``.

    Widest first bounds the streams' difference by about the narrowest documents'
    width. Dealt in ``order`` instead, a long document dealt late lands on a full
    stream, and the epoch ends with that one stream running alone for thousands of
    updates of a handful of tokens each (on 0.9M words of lm_train, 30 streams: 1,289 of
    2,837 updates held fewer than half the batch's tokens, and a GRU's validation
    perplexity rose from 251 to 397 over that tail).
    """
    rank = {int(i): r for r, i in enumerate(order)}
    lanes: List[List[int]] = [[] for _ in range(num_streams)]
    sizes = np.zeros(num_streams, dtype=np.int64)
    for i in sorted(rank, key=lambda i: (-widths[i], rank[i])):
        k = int(np.argmin(sizes))
        lanes[k].append(i)
        sizes[k] += widths[i]
    return [sorted(lane, key=rank.__getitem__) for lane in lanes]


def _deal_in_order(widths: Sequence[int], num_streams: int) -> List[List[int]]:
    """Document indices per stream: the documents in order, in ``num_streams``
    contiguous parts of about equal width."""
    lanes: List[List[int]] = [[] for _ in range(num_streams)]
    total, before = sum(widths), 0
    for i, w in enumerate(widths):
        # the part whose share of the corpus holds this document's midpoint; the
        # last documents go to the remaining empty streams so that none stays empty
        k = min(num_streams - 1, int((before + w / 2) * num_streams / total))
        k = max(k, num_streams - (len(widths) - i))
        lanes[k].append(i)
        before += w
    return lanes


def segment_tokens(streams: Streams, bptt: int) -> List[int]:
    """Real target tokens of each [B, bptt] segment (:func:`segments`), counted on the
    host (one read-back when the streams are on a device)."""
    counts = streams.mask.sum(0).cpu()
    return [int(counts[i:i + bptt].sum()) for i in range(0, counts.shape[0], bptt)]


def segments(streams: Streams, bptt: int) -> Iterator[Tuple[Tensor, Tensor, Tensor, Tensor]]:
    """Consecutive BPTT segments ``(inputs, targets, mask, reset)``, each [B, <=bptt]."""
    for start in range(0, streams.inputs.shape[1], bptt):
        yield tuple(t[:, start:start + bptt] for t in (streams.inputs, streams.targets, streams.mask, streams.reset))


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
    done = None if progress is None else np.cumsum(segment_tokens(streams, bptt)).tolist()
    streams = streams.to(device)
    aligned = streams.align == bptt
    state = model.init_state(streams.inputs.shape[0], device)
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
