"""Streams for tests that read them as whole tensors: :func:`make_streams` gives the
package's :class:`~nbest_rescore.store_streams.StoreStreams` with every column also
held as ``inputs``, ``targets`` (int64 [B, L]), ``mask`` and ``reset`` (bool [B, L]);
everything else (``segment``, ``rows``, ``to`` ...) is the store streams' own.
:func:`materialize` is an independent reference of the columns of a layout."""
import numpy as np
import torch

from nbest_rescore import store_streams


class WithColumns:
    """``streams`` (a StoreStreams) and its columns as attributes."""

    def __init__(self, streams):
        self.streams = streams
        self.inputs, self.targets, self.mask, self.reset = streams.segment(0, max(1, streams.shape[1]))[:4]

    def __getattr__(self, name):
        return getattr(self.streams, name)


def make_streams(*args, **kwargs) -> WithColumns:
    """:func:`nbest_rescore.store_streams.make_streams` with its columns."""
    return WithColumns(store_streams.make_streams(*args, **kwargs))


def materialize(layout):
    """(inputs, targets, mask, reset) [B, L] of ``layout``, every column written from
    the pieces directly (CPU tensors)."""
    b, length = layout.num_streams, layout.length
    inp, tgt, mask, reset = (np.zeros((b, length), dtype=t) for t in (np.int64, np.int64, bool, bool))
    offset = np.arange(int(layout.n.sum())) - np.repeat(np.cumsum(layout.n) - layout.n, layout.n)
    rows, cols = np.repeat(layout.lane, layout.n), np.repeat(layout.col, layout.n) + offset
    src = np.repeat(layout.start, layout.n) + offset
    inp[rows, cols] = layout.ids[src]
    tgt[rows, cols] = layout.ids[src + 1]
    mask[rows, cols] = True
    reset[layout.lane, layout.col] = True
    return tuple(torch.from_numpy(a) for a in (inp, tgt, mask, reset))
