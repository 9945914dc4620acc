"""Word alignment counts exactly as Kaldi's ``compute-wer`` counts them.

Kaldi's ``LevenshteinEditDistance(ref, hyp, &ins, &del, &sub)``
(``src/util/edit-distance-inl.h``) runs the usual word-level edit-distance recursion
row by row over the hypothesis, keeping in every cell the counts of *one* alignment,
chosen locally: a substitution (or match) only when it is strictly cheaper than both
the insertion and the deletion, then a deletion when it is strictly cheaper than the
insertion, else the insertion. The total (ins + del + sub) is the edit distance; the
split between the three depends on that rule, so another aligner (jiwer, sclite) may
report the same total with other counts.

This module computes the same counts with numpy, many pairs at once: every
hypothesis position is one step over a batch of pairs; within a step, the deletion
chain along the reference is a running minimum (``np.minimum.accumulate``), so no
Python loop runs over reference positions or pairs.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

__all__ = ["kaldi_error_counts"]

Words = Tuple[str, ...]

#: Pairs aligned together (sorted by length first, so padding stays small).
_CHUNK = 256


def _ids(seqs: Sequence[Words], vocab: Dict[str, int], pad: int) -> Tuple[np.ndarray, np.ndarray]:
    """[B, max_len] word ids (``pad`` beyond each length) and int64 [B] lengths."""
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    out = np.full((len(seqs), max(int(lengths.max(initial=0)), 1)), pad, dtype=np.int64)
    for i, s in enumerate(seqs):
        out[i, :len(s)] = [vocab.setdefault(w, len(vocab)) for w in s]
    return out, lengths


def _align_chunk(refs: Sequence[Words], hyps: Sequence[Words]) -> np.ndarray:
    """Kaldi's (ins, del, sub) of each pair of one chunk: int64 [B, 3]."""
    vocab: Dict[str, int] = {}
    ref, ref_len = _ids(refs, vocab, -1)
    hyp, hyp_len = _ids(hyps, vocab, -2)  # the two pads never match anything
    b, r1 = len(refs), ref.shape[1] + 1
    cols = np.arange(r1, dtype=np.int64)
    rows = np.arange(b)
    # row 0 (no hypothesis word yet): reference position r is reached by r deletions
    cost = np.broadcast_to(cols, (b, r1)).copy()
    counts = np.zeros((b, r1, 3), dtype=np.int64)  # (ins, del, sub) of each cell
    counts[:, :, 1] = cols
    out = np.zeros((b, 3), dtype=np.int64)
    done = hyp_len == 0
    out[done] = counts[rows[done], ref_len[done]]
    for h in range(int(hyp_len.max(initial=0))):
        miss = (ref != hyp[:, h:h + 1]).astype(np.int64)  # [B, R]
        ins_err = cost + 1
        sub_err = np.full_like(cost, np.iinfo(np.int64).max // 2)
        sub_err[:, 1:] = cost[:, :-1] + miss
        is_sub = sub_err < ins_err  # the local choice without the deletion
        local = np.where(is_sub, sub_err, ins_err)
        # a deletion extends the cell to its left in this row: running minimum
        new_cost = np.minimum.accumulate(local - cols, axis=1) + cols
        del_err = np.empty_like(cost)
        del_err[:, 0] = np.iinfo(np.int64).max // 2  # column 0 is always an insertion
        del_err[:, 1:] = new_cost[:, :-1] + 1
        is_del = (del_err < local) | ((del_err == local) & is_sub)
        local_counts = counts.copy()
        local_counts[:, :, 0] += 1  # insertion from the cell above
        sub_counts = np.empty_like(counts)
        sub_counts[:, 1:] = counts[:, :-1]
        sub_counts[:, 1:, 2] += miss
        local_counts[is_sub] = sub_counts[is_sub]
        # each deleting cell takes the counts of the last non-deleting cell to its left
        src = np.maximum.accumulate(np.where(is_del, 0, cols), axis=1)
        counts = local_counts[rows[:, None], src]
        counts[:, :, 1] += cols - src
        cost = new_cost
        now = hyp_len == h + 1
        out[now] = counts[rows[now], ref_len[now]]
    return out


def kaldi_error_counts(pairs: Sequence[Tuple[Sequence[str], Sequence[str]]]) -> np.ndarray:
    """Insertions, deletions and substitutions of each ``(reference, hypothesis)`` pair,
    as Kaldi's ``compute-wer`` counts them (see the module docstring).

    Args:
        pairs: P pairs of word sequences (either may be empty: an empty reference makes
            every hypothesis word an insertion, an empty hypothesis every reference word
            a deletion). Words compare as whole strings.
    Returns:
        int64 [P, 3]: columns insertions, deletions, substitutions; their row sum is
        the word-level edit distance of the pair.
    """
    out = np.zeros((len(pairs), 3), dtype=np.int64)
    if not pairs:
        return out
    unique: Dict[Tuple[Words, Words], int] = {}
    which = np.array([unique.setdefault((tuple(r), tuple(h)), len(unique)) for r, h in pairs], dtype=np.int64)
    keys: List[Tuple[Words, Words]] = list(unique)
    order = sorted(range(len(keys)), key=lambda i: (len(keys[i][0]), len(keys[i][1])))
    found = np.zeros((len(keys), 3), dtype=np.int64)
    for start in range(0, len(order), _CHUNK):
        part = order[start:start + _CHUNK]
        found[part] = _align_chunk([keys[i][0] for i in part], [keys[i][1] for i in part])
    return found[which]
