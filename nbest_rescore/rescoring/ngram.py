"""N-gram costs recomputed from an ARPA file with kenlm (the only place where kenlm's
log10 scores are converted: cost = -ln(10) * log10 P)."""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from ..errors import DataError

LN10 = math.log(10.0)


class NgramScorer:
    """Sentence costs under an ARPA/binary n-gram (``<s>`` context, ``</s>`` scored).

    Raises:
        DataError: the model file cannot be loaded.
    """

    def __init__(self, path):
        import kenlm

        try:
            self.model = kenlm.Model(str(path))
        except (OSError, RuntimeError, Exception) as exc:  # kenlm raises plain Exception types
            raise DataError(f"cannot load n-gram model {path}: {exc}") from exc
        self.order = self.model.order

    def cost(self, words: Sequence[str]) -> float:
        """Negated natural-log probability of ``words`` followed by ``</s>``."""
        return -LN10 * self.model.score(" ".join(words), bos=True, eos=True)

    def costs(self, hyps: Iterable[Sequence[str]]) -> np.ndarray:
        """float64 [N] costs of several hypotheses."""
        return np.array([self.cost(h) for h in hyps], dtype=np.float64)
