"""Hypothesis costs through the prefix tree, with their gradient (MWER fine-tuning).

The N-best lists of a training step share most of their prefixes. :func:`forest_costs`
reads each distinct prefix once, as exact scoring does
(:func:`~.prefix_tree.pair_log_prob_tensor` over the exact
:func:`~.history_graph.scoring_graph`), and sums the log-probabilities along each
hypothesis' path with torch operations, one per depth, so the costs keep their graph
back to the model's weights. The values are those of :func:`~.prefix_tree.score_forest`
(the same float64 sums in the same order; bit for bit with the adaptive softmax, to
float32 rounding with a full softmax, which scoring sums in place by vocabulary blocks). Dropout, if the model is in training mode,
would draw one mask per prefix shared by all the hypotheses through it, so the caller
runs the model in evaluation mode (``finetune``'s default).
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..models.base import LanguageModel, State
from .history_graph import ScoringGraph, scoring_graph
from .prefix_forest import build_forest
from .prefix_tree import pair_log_prob_tensor


def path_cost_tensor(graph: ScoringGraph, pair_logp: torch.Tensor) -> torch.Tensor:
    """float64 [H] hypothesis costs (nats, words and ``</s>``) from the pairs'
    log-probabilities ``pair_logp`` float64 [P] (any device, with gradient): minus the
    sum along each path, accumulated level by level as
    :meth:`~.history_graph.ScoringGraph.costs` does."""
    f, dev = graph.hyps, pair_logp.device
    node_pair = torch.from_numpy(graph.node_pair).to(dev)
    node_lp = torch.where(node_pair >= 0, pair_logp[node_pair.clamp_min(0)], torch.zeros((), dtype=pair_logp.dtype,
                                                                                        device=dev))
    offs = f.level_offsets
    levels = [node_lp[offs[0]:offs[1]]]
    for d in range(1, len(offs) - 1):
        a, b = int(offs[d]), int(offs[d + 1])
        parent = torch.from_numpy(f.parent[a:b] - offs[d - 1]).to(dev)
        levels.append(node_lp[a:b] + levels[-1][parent])
    cum = torch.cat(levels)
    end_node, end_pair = (torch.from_numpy(x).to(dev) for x in (f.end_node, graph.end_pair))
    return -(cum[end_node] + pair_logp[end_pair])


def forest_costs(model: LanguageModel, seqs: Sequence[Sequence[int]], eos: int, states: State,
                 rows: Sequence[int]) -> torch.Tensor:
    """float64 [B] costs (nats, words + ``</s>``) of ``seqs`` [B] (word ids, without
    ``</s>``), sequence b read from row ``rows[b]`` of ``states`` (batch U), each
    distinct prefix read once, with gradient when it is enabled. The same values as
    the padded forward of :func:`nbest_rescore.training.mwer.hypothesis_costs`
    (to float32 rounding), in far fewer model positions."""
    graph = scoring_graph(build_forest(seqs, rows, eos), eos)
    return path_cost_tensor(graph, pair_log_prob_tensor(model, graph, states, eos))
