"""The streams of a :class:`~nbest_rescore.corpus.Layout` read as they are used: each
segment of B parallel streams gathered from the document ids (a token store's file, or
an array) when training or scoring reads it, nothing per token held in memory.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from .corpus import Documents, Layout, deal
from .io.token_store import IdRanges


#: segments :meth:`StoreStreams.segment` gathers at once
BLOCK_SEGMENTS = 64


class StoreStreams:
    """The streams of a :class:`Layout`, each segment gathered from the ids when it is
    used (of a token store only the ids under the segment are read, from its file:
    :class:`~nbest_rescore.io.token_store.IdRanges`). ``align``: every document starts
    at a multiple of it (1 = packed tightly); with ``align`` = the BPTT length, resets
    fall on segment starts only and a segment runs as one model call
    (:func:`~nbest_rescore.corpus.run_segment` ``aligned=True``). ``segment`` adds the
    objective weight of each column (float32 [B, T]) when the layout has weights."""

    def __init__(self, layout: Layout, rows: slice = slice(None), device="cpu"):
        self.layout, self.device = layout, torch.device(device)
        self.first, self.stop, _ = rows.indices(layout.num_streams)
        self.align = layout.align
        # each row's pieces: layout.lane is sorted, so row r holds pieces rowptr[r]:rowptr[r + 1]
        self._rowptr = np.searchsorted(layout.lane, np.arange(layout.num_streams + 1))
        self._ids = IdRanges(layout.ids)  # (a store's ids read from its file, not mapped)
        self._block = None  # (first column, end column, the gathered arrays) of the last block

    @property
    def shape(self) -> Tuple[int, int]:
        """(rows, L)."""
        return (self.stop - self.first, self.layout.length)

    @property
    def num_tokens(self) -> int:
        """Real target tokens of these rows."""
        mine = (self.layout.lane >= self.first) & (self.layout.lane < self.stop)
        return int(self.layout.n[mine].sum())

    def rows(self, index: slice) -> "StoreStreams":
        """The rows ``index`` of these streams."""
        first, stop, _ = index.indices(self.stop - self.first)
        return StoreStreams(self.layout, slice(self.first + first, self.first + stop), self.device)

    def to(self, device) -> "StoreStreams":
        """The same streams, their segments made on ``device``."""
        return StoreStreams(self.layout, slice(self.first, self.stop), device)

    def segment(self, start: int, width: int) -> Tuple[Tensor, ...]:
        """Columns ``[start, start + width)`` of these rows: (inputs, targets, mask,
        reset[, weight]) on the device, each [rows, <=width] (no per-token Python).
        Gathered :data:`BLOCK_SEGMENTS` segments at a time (one read per row and piece
        for all of them), as training reads them in order."""
        length, block = self.layout.length, self._block
        if block is None or not (block[0] <= start <= block[1] and (start + width <= block[1] or block[1] == length)):
            stop = min(start + width * BLOCK_SEGMENTS, length)
            block = self._block = (start, stop, self._gather(start, stop - start))
        a = start - block[0]
        out = (torch.from_numpy(np.ascontiguousarray(x[:, a:a + width])) for x in block[2])
        if self.device.type == "cuda":  # through pinned memory without waiting (no host synchronisation per segment)
            return tuple(t.pin_memory().to(self.device, non_blocking=True) for t in out)
        return tuple(t.to(self.device) for t in out)

    def _gather(self, start: int, width: int) -> List[np.ndarray]:
        """The columns ``[start, start + width)`` as numpy arrays (:meth:`segment`'s)."""
        lay = self.layout
        cols = np.arange(start, min(start + width, lay.length))
        rows = np.arange(self.first, self.stop)
        shape = (len(rows), len(cols))
        if not len(lay.n):
            out = [np.zeros(shape, np.int64), np.zeros(shape, np.int64), np.zeros(shape, bool), np.zeros(shape, bool)]
        else:
            p = np.zeros(shape, dtype=np.int64)
            at = cols.astype(lay.col.dtype)  # (searched as the layout's dtype: no copy of its columns)
            for i, r in enumerate(rows.tolist()):  # (one search per row)
                p[i] = np.searchsorted(lay.col[self._rowptr[r]:self._rowptr[r + 1]], at, "right") + self._rowptr[r] - 1
            np.clip(p, 0, len(lay.n) - 1, out=p)
            off = cols[None, :] - lay.col[p]
            valid = (lay.lane[p] == rows[:, None]) & (off < lay.n[p])
            pos = lay.start[p] + off
            inputs, targets = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
            for i in range(len(rows)):  # (the ids at pos and one later; a row's columns of one piece are consecutive)
                v = valid[i]
                if not v.any():
                    continue
                pieces = p[i][v]
                masks = [v] if pieces[0] == pieces[-1] else [v & (p[i] == q) for q in np.unique(pieces).tolist()]
                for m in masks:
                    at = pos[i][m]
                    buf = self._ids.read(int(at[0]), int(at[-1]) + 2)
                    inputs[i][m], targets[i][m] = buf[at - at[0]], buf[at - at[0] + 1]
            out = [inputs, targets, valid, valid & (off == 0)]
            if lay.weight is not None:
                out.append(np.where(valid, lay.weight[p], 0).astype(np.float32))
        return out

    def segment_tokens(self, bptt: int) -> np.ndarray:
        """int64 [segments]: real target tokens of each [B, bptt] segment of all rows,
        from the layout."""
        lay = self.layout
        count = np.zeros(-(-lay.length // bptt) + 1, dtype=np.int64)
        full = np.zeros_like(count)  # (differences: bptt for each segment a piece covers whole)
        for b in range(0, len(lay.n), 1 << 18):  # (in blocks: a few small arrays at a time)
            a = lay.col[b:b + (1 << 18)].astype(np.int64)
            n = lay.n[b:b + (1 << 18)].astype(np.int64)
            e = a + n
            sa, se = a // bptt, (e - 1) // bptt
            one, two = sa == se, sa != se
            np.add.at(count, sa[one], n[one])
            np.add.at(count, sa[two], (sa[two] + 1) * bptt - a[two])
            np.add.at(count, se[two], e[two] - se[two] * bptt)
            np.add.at(full, sa[two] + 1, bptt)
            np.add.at(full, se[two], -bptt)
        np.cumsum(full, out=full)
        count += full
        return count[:-1]


def make_streams(documents: Sequence[np.ndarray], num_streams: int, align: int = 1,
                 max_piece: Optional[int] = None, seed: Optional[int] = None) -> StoreStreams:
    """The encoded documents (from :func:`~nbest_rescore.corpus.encode_document`) dealt
    to ``num_streams`` parallel streams (:func:`~nbest_rescore.corpus.deal`)."""
    return StoreStreams(deal(Documents.of(list(documents)), num_streams, align, max_piece, seed))
