"""Lists with one first-pass total score per hypothesis (end-to-end decoders: NeMo,
ESPnet, JSON Lines ``total_cost``), as docs/scoring.md ("One total score per
hypothesis") defines them: the total cost (-total log score, larger = worse) is held as
``ac_cost``, with ``lm_cost`` = ``graph_cost`` = 0, and the set is flagged
``total_scores`` (:class:`~nbest_rescore.types.NbestSet`). One mechanism then combines
every list: ``s(w) = -acoustic_scale * total_cost + delta * sum_k w_k * (-nn_cost_k) +
wip * |w|``.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from ..errors import DataError
from ..types import NbestList, Words
from ._common import parse_cost

__all__ = ["TOTAL_COST", "check_total_scores", "parse_log_score", "total_list"]

#: The JSON Lines score name of a hypothesis' total cost (-log, natural log).
TOTAL_COST = "total_cost"
# str() of a torch scalar, as ESPnet writes a hypothesis' score: tensor(-12.3456) or
# tensor(-12.3456, device='cuda:0') (dtype=... too, for float64).
_TENSOR = re.compile(r"tensor\(([^,()]*)(?:,[^()]*)?\)")


def parse_log_score(token: str, loc: str, what: str) -> float:
    """A total log score (natural log, larger = better) as a decoder writes it: a
    decimal number, or the text of a torch scalar ``tensor(-12.3456)`` (with
    ``, device='cuda:0'`` and the like, as ``str(hyp.score)`` gives in ESPnet).

    Raises:
        DataError: ``"<loc>: <what>: ... is not a decimal number ..."`` (the number
            inside ``tensor(...)`` checked as :func:`~._common.parse_cost` checks one).
    """
    m = _TENSOR.fullmatch(token)
    return parse_cost(m.group(1).strip() if m else token, loc, what)


def total_list(utt_id: str, doc_id: str, hyps: Sequence[Words], total_cost: Sequence[float]) -> NbestList:
    """The :class:`~nbest_rescore.types.NbestList` of one utterance with one total cost
    per hypothesis (float64 [N], negated natural logs): ``ac_cost`` = the totals,
    ``lm_cost`` = ``graph_cost`` = 0; keys ``<utt_id>-1 .. <utt_id>-N`` in list order.
    Raises ValueError: no hypotheses, or not one cost per hypothesis."""
    n = len(hyps)
    ac = np.asarray(total_cost, dtype=np.float64) + 0.0  # (no negative zeros)
    if len(ac) != n:
        raise ValueError(f"utterance {utt_id}: {len(ac)} total costs for {n} hypotheses")
    return NbestList(utt_id=utt_id, doc_id=doc_id, keys=tuple(f"{utt_id}-{r}" for r in range(1, n + 1)),
                     hyps=tuple(hyps), ac_cost=ac, lm_cost=np.zeros(n), graph_cost=np.zeros(n))


def check_total_scores(u: NbestList, where: str) -> None:
    """A list written as total scores has no n-gram or graph cost (all 0).
    Raises DataError naming the utterance."""
    if np.any(u.lm_cost) or np.any(u.graph_cost):
        raise DataError(f"{where}: utterance {u.utt_id!r} is in a set of total scores but has n-gram or graph "
                        f"costs; a total-score set holds the total in ac_cost and 0 in lm_cost and graph_cost")
