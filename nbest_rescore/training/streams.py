"""Parallel document streams for corpus-level training and perplexity.

A document of sentences s_1..s_n becomes the token stream ``</s> s_1 </s> s_2 .. s_n
</s>``: inputs are all tokens but the last, targets all but the first, so every word
and every ``</s>`` is predicted. Whole documents are dealt to ``B`` parallel streams
(each to the currently shortest stream), so the recurrent state can be carried from
one BPTT segment to the next and reset exactly where a new document starts
(``000`` section 5.1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, List, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from ..models.base import LanguageModel, State, reset_state
from ..vocab import Vocabulary


def encode_document(sentences: Sequence[Sequence[str]], vocab: Vocabulary) -> np.ndarray:
    """int64 [n_tokens + 1]: ``</s>`` followed by each sentence and its ``</s>``."""
    ids = [vocab.eos]
    for s in sentences:
        ids.extend(vocab.encode(s))
        ids.append(vocab.eos)
    return np.asarray(ids, dtype=np.int64)


@dataclass
class Streams:
    """B parallel streams of equal padded length L.

    inputs, targets: int64 [B, L]; mask: bool [B, L] (False = padding);
    reset: bool [B, L] (True where a document starts: the state is reset before
    reading that input).
    """

    inputs: Tensor
    targets: Tensor
    mask: Tensor
    reset: Tensor

    @property
    def num_tokens(self) -> int:
        """Number of real (unpadded) target tokens."""
        return int(self.mask.sum())


def make_streams(documents: Sequence[np.ndarray], num_streams: int) -> Streams:
    """Cut the encoded documents (from :func:`encode_document`), in order, into
    ``num_streams`` contiguous parts of about equal token counts (one per stream)."""
    documents = [d for d in documents if len(d) >= 2]
    num_streams = max(1, min(num_streams, len(documents)))
    lanes: List[List[np.ndarray]] = [[] for _ in range(num_streams)]
    sizes = np.zeros(num_streams, dtype=np.int64)
    total = sum(len(d) - 1 for d in documents)
    before = 0
    for i, doc in enumerate(documents):
        # the part whose share of the corpus holds this document's midpoint; the last
        # documents go to the remaining empty streams so that none stays empty
        k = min(num_streams - 1, int((before + (len(doc) - 1) / 2) * num_streams / total))
        k = max(k, num_streams - (len(documents) - i))
        lanes[k].append(doc)
        sizes[k] += len(doc) - 1
        before += len(doc) - 1
    length = int(sizes.max())
    inp = np.zeros((num_streams, length), dtype=np.int64)
    tgt = np.zeros_like(inp)
    mask = np.zeros((num_streams, length), dtype=bool)
    reset = np.zeros_like(mask)
    for k, docs in enumerate(lanes):
        pos = 0
        for doc in docs:
            n = len(doc) - 1
            inp[k, pos:pos + n] = doc[:-1]
            tgt[k, pos:pos + n] = doc[1:]
            mask[k, pos:pos + n] = True
            reset[k, pos] = True
            pos += n
    return Streams(*(torch.from_numpy(a) for a in (inp, tgt, mask, reset)))


def segments(streams: Streams, bptt: int) -> Iterator[Tuple[Tensor, Tensor, Tensor, Tensor]]:
    """Consecutive BPTT segments ``(inputs, targets, mask, reset)``, each [B, <=bptt]."""
    length = streams.inputs.shape[1]
    for start in range(0, length, bptt):
        sl = slice(start, min(start + bptt, length))
        yield (streams.inputs[:, sl], streams.targets[:, sl], streams.mask[:, sl], streams.reset[:, sl])


def run_segment(model: LanguageModel, state: State, inputs: Tensor, reset: Tensor):
    """Run ``model`` over one segment, resetting streams where documents start.

    The segment is split at every column where some stream starts a document; before
    each piece the state of those streams is replaced by the initial state.

    Args:
        inputs: int64 [B, T]; reset: bool [B, T].
    Returns:
        (features float [B, T, D], state after the segment, aux loss or None).
    """
    b, t = inputs.shape
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
