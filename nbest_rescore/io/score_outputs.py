"""The new 1-best (``text``) and NN cost files (``nn_cost``, ``nn_cost.<name>``) of a
score run, written part by part: ``score`` writes one span of whole documents at a
time into the hidden folder of :func:`~.atomic.atomic_dir`, so that the folder holds
the whole set or nothing. Lines as :func:`~.kaldi_text.write_kaldi_text` and
:func:`~.score_ark.write_cost_ark` write them (costs ``%.6f``, negated natural logs).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence, Tuple

import numpy as np

from ..errors import DataError
from .kaldi_text import kaldi_text_line
from .nbest_writer import NbestWriter, open_files
from .score_ark import cost_ark_line

__all__ = ["ScoreFilesWriter"]


class ScoreFilesWriter(NbestWriter):
    """``with ScoreFilesWriter(folder, cost_names) as w: w.write(...)`` writes
    ``folder/text`` and ``folder/<cost name>`` for each name, appending one part per
    :meth:`write`; each file appears (atomically, :func:`~.atomic.atomic_write`) when
    the block ends without an error, and not at all otherwise (the mechanism of
    :class:`~.nbest_writer.NbestWriter`).

    Keys must be unique over all the parts (the N-best readers guarantee it); a key
    repeated within one part is refused.
    """

    def __init__(self, folder, cost_names: Sequence[str]):
        self.folder = Path(folder)
        self.names = ("text", *cost_names)

    def _open(self, stack) -> None:
        self._text, *self._costs = open_files(stack, self.folder, self.names).values()

    def write(self, one_best: Iterable[Tuple[str, Sequence[str]]], keys: Sequence[str],
              costs: Sequence[np.ndarray]) -> None:
        """Append one part: ``one_best`` (utterance id, words) pairs in order, the
        hypothesis ``keys`` [h] and one float64 [h] array of costs per cost file.

        Raises:
            DataError: a key or word that is empty or holds white space, a key repeated
                within the part, or a cost that is not finite.
        """
        self._text.write("".join(kaldi_text_line(u, words) for u, words in one_best))
        if len(set(keys)) != len(keys):
            seen = set()
            dup = next(k for k in keys if k in seen or seen.add(k))
            raise DataError(f"write_cost_ark: duplicate key {dup!r}")
        for fh, values in zip(self._costs, costs):
            where = f"write_cost_ark {fh.name}"
            fh.write("".join(cost_ark_line(k, v, where) for k, v in zip(keys, values.tolist())))
