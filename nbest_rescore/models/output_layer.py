"""The output layer each model holds as ``model.output``: features float [..., D] ->
natural-log probabilities of the next word. Its kind says how the model is scored:

* :class:`SoftmaxOutput`: dropout, the tied-weight projection if any, ``nn.Linear`` and
  the softmax; exact scoring ``plain`` (log-softmax of the [N, V] product) or ``fused``
  (vocabulary blocks, :mod:`.fused_output`), the training loss fused with
  ``fused_training``; a bfloat16 copy of the weights (:meth:`~OutputLayer.to_bfloat16`);
  ``int8`` once the decoder is dynamically quantised (always the full product).
* :class:`AdaptiveOutput` (Grave et al. 2017; ids by decreasing frequency): normalised,
  tail clusters only where a target lies (:func:`adaptive_log_probs_at`).
* :class:`LogProbOutput`: features that already are log-probabilities (the neural cache).

Checkpoints keep the flat names ``decoder.*``, ``adaptive.*``, ``project.*``
(:func:`keep_checkpoint_names`).
"""
from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate
from typing import ClassVar, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ..errors import DataError
from ..options import SOFTMAX_IMPLS, ScorerOptions, default_of
from ..validation import check_choice
from .fused_output import fused_linear_cross_entropy, fused_log_probs_at
from .rows import pad_rows

#: the kinds a model config chooses (``model_config.output``)
OUTPUT_LAYERS = ("softmax", "adaptive")


class OutputLayer(nn.Module):
    """Dropout, the projection (if any), then scores over V: subclasses implement
    :meth:`logits`, the rest defaults to its log-softmax. ``softmax_impl`` and
    ``fused_training`` (``score --softmax-impl``, ``optim.fused_softmax``) are set per
    instance; only the full softmax reads them."""

    kind: ClassVar[str]
    #: a training step through it can be captured as a CUDA graph
    graph_safe: ClassVar[bool] = True
    softmax_impl: str = default_of(ScorerOptions, "softmax_impl")
    fused_training: bool = False

    def __init__(self, in_features: int, dropout: float = 0.0, project: Optional[nn.Linear] = None):
        super().__init__()
        self.in_features = in_features  # D of the features it reads
        self.drop = nn.Dropout(dropout)
        self.project = project

    def inputs(self, features: Tensor) -> Tensor:
        """The features after dropout and projection."""
        h = self.drop(features)
        return self.project(h) if self.project is not None else h

    def fused(self, training: bool = False) -> bool:
        """Whether the full softmax runs through :mod:`.fused_output` (training or inference)."""
        return False

    def logits(self, features: Tensor) -> Tensor:
        """Scores float [..., V] from features [..., D] whose log-softmax is the log-probabilities."""
        raise NotImplementedError

    def target_log_probs(self, features: Tensor, targets: Tensor) -> Tensor:
        """Exact natural-log probabilities float32 [...] of ``targets`` int64 [...] (valid ids)."""
        logp = torch.log_softmax(self.logits(features).float(), dim=-1)
        return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)

    def log_probs_at(self, features: Tensor, rows: Tensor, targets: Tensor) -> Tensor:
        """Exact natural-log probabilities of ``targets[g]`` after ``features[rows[g]]``,
        several targets per row (prefix-tree scoring: a node's children's words and ``</s>``).

        features: float [N, D]; rows, targets: int64 [G] (rows in [0, N)) on the CPU or the
        features' device. Returns [G] on the features' device, float64 from the fused
        softmax, else float32; products on :func:`~.rows.safe_rows` rows (:mod:`.rows`).
        """
        dev = features.device
        logp = torch.log_softmax(self.logits(pad_rows(features)).float(), dim=-1)
        return logp[rows.to(dev), targets.to(dev)]

    def target_logits(self, features: Tensor, targets: Tensor) -> Tensor:
        """``logits(features)`` [B, T, D] gathered at ``targets`` [B, T] (up to summation order)."""
        return self.logits(features).gather(-1, targets.unsqueeze(-1)).squeeze(-1)

    def to_bfloat16(self) -> None:
        """The scoring product in bfloat16 from now on (in place); DataError without one."""
        raise DataError(f"a bfloat16 output layer needs the full or the adaptive softmax, not {self.kind} "
                        f"features (the neural cache): score in float32")

    def embedding_parameters(self, embedding: nn.Embedding) -> int:
        """Parameters counted as output embedding (not counting ``embedding``'s)."""
        return 0


class SoftmaxOutput(OutputLayer):
    """``nn.Linear`` to V and the softmax; the decoder's weight is ``tie``'s when given."""

    kind = "softmax"

    def __init__(self, in_features: int, vocab_size: int, dropout: float = 0.0, project: Optional[nn.Linear] = None,
                 tie: Optional[nn.Embedding] = None):
        super().__init__(in_features, dropout, project)
        self.decoder = nn.Linear(project.out_features if project is not None else in_features, vocab_size)
        if tie is not None:
            self.decoder.weight = tie.weight
        nn.init.zeros_(self.decoder.bias)
        #: bfloat16 copy (weight [V, D], bias [V]) of the decoder for the fused product, or None
        self.bf16: Optional[Tuple[Tensor, Tensor]] = None

    @property
    def int8(self) -> bool:
        """The decoder is dynamically quantised (no longer an ``nn.Linear``): the full product."""
        return type(self.decoder) is not nn.Linear

    def fused(self, training: bool = False) -> bool:
        if self.int8:
            return False
        check_choice("softmax_impl", self.softmax_impl, SOFTMAX_IMPLS)  # DataError, a ValueError
        return self.fused_training if training else self.softmax_impl == "fused"

    def _weights(self) -> Tuple[Tensor, Optional[Tensor]]:
        """(weight [V, D], bias [V]) of the fused product: the bfloat16 copy (inference) or the decoder's."""
        if self.bf16 is not None and not torch.is_grad_enabled():
            return self.bf16
        return self.decoder.weight, self.decoder.bias

    def logits(self, features: Tensor) -> Tensor:
        return self.decoder(self.inputs(features))

    def target_log_probs(self, features: Tensor, targets: Tensor) -> Tensor:
        """Fused ``cross_entropy`` (no second [N, V] tensor kept), or the fused layer."""
        h = self.inputs(features)
        flat, tgt = h.reshape(-1, h.shape[-1]), targets.reshape(-1)
        if self.fused(training=torch.is_grad_enabled() and self.training):
            w, b = self._weights()
            if torch.is_grad_enabled():
                return -fused_linear_cross_entropy(flat, w, b, tgt).view(targets.shape)
            rows = torch.arange(flat.shape[0], device=flat.device)
            return fused_log_probs_at(flat, w, b, rows, tgt).float().view(targets.shape)
        logits = self.decoder(flat).float()
        return -F.cross_entropy(logits, tgt, reduction="none").view(targets.shape)

    def log_probs_at(self, features: Tensor, rows: Tensor, targets: Tensor) -> Tensor:
        """:func:`~.fused_output.fused_log_probs_at` (no [N, V] tensor) when :meth:`fused`."""
        if not self.fused():
            return super().log_probs_at(features, rows, targets)
        dev = features.device
        w, b = self._weights()
        return fused_log_probs_at(self.inputs(pad_rows(features)), w, b, rows.to(dev), targets.to(dev))

    def target_logits(self, features: Tensor, targets: Tensor) -> Tensor:
        """features . W[target] + b[target] without the [B, T, V] product (but int8)."""
        if self.int8:
            return super().target_logits(features, targets)
        h = self.inputs(features)
        w = self.decoder.weight.index_select(0, targets.reshape(-1)).view(*targets.shape, -1)  # [B, T, D]
        b = self.decoder.bias.index_select(0, targets.reshape(-1)).view(targets.shape)
        return (h * w.to(h.dtype)).sum(-1) + b.to(h.dtype)

    def to_bfloat16(self) -> None:
        """A bfloat16 copy of the weights for the fused product (the float32 ones stay)."""
        if not self.int8:
            self.bf16 = (self.decoder.weight.detach().to(torch.bfloat16),
                         self.decoder.bias.detach().to(torch.bfloat16))

    def embedding_parameters(self, embedding: nn.Embedding) -> int:
        """The decoder's weight, unless it is ``embedding``'s (tied: counted once)."""
        return 0 if self.decoder.weight is embedding.weight else self.decoder.weight.numel()


class AdaptiveOutput(OutputLayer):
    """``nn.AdaptiveLogSoftmaxWithLoss`` over ``cutoffs`` (DataError outside [1, V - 1]),
    tail cluster i with D / div_value**(i+1) units (DataError for none)."""

    kind = "adaptive"
    graph_safe = False  # rows selected per tail cluster

    def __init__(self, in_features: int, vocab_size: int, dropout: float, cutoffs: List[int], div_value: float):
        super().__init__(in_features, dropout)
        if not cutoffs or not all(isinstance(c, int) and not isinstance(c, bool) for c in cutoffs) \
                or cutoffs != sorted(set(cutoffs)) or cutoffs[0] < 1 or cutoffs[-1] > vocab_size - 1:
            raise DataError(f"model_config.adaptive_cutoffs must be a non-empty list of increasing "
                            f"integers in [1, {vocab_size - 1}] (vocabulary {vocab_size}), got {cutoffs!r}")
        div = float(div_value)
        if int(in_features // div ** len(cutoffs)) < 1:
            raise DataError(f"model_config: the adaptive softmax's last tail cluster would get "
                            f"{in_features} // {div:g}^{len(cutoffs)} = 0 units; use fewer "
                            f"adaptive_cutoffs or a smaller adaptive_div_value (features: {in_features})")
        self.adaptive = nn.AdaptiveLogSoftmaxWithLoss(in_features, vocab_size, cutoffs, div_value=div)

    def logits(self, features: Tensor) -> Tensor:
        """The natural-log probabilities of every word, through every cluster."""
        h = self.inputs(features)
        return self.adaptive.log_prob(h.reshape(-1, h.shape[-1])).view(*h.shape[:-1], self.adaptive.n_classes)

    def target_log_probs(self, features: Tensor, targets: Tensor) -> Tensor:
        """The head and only the tail clusters a target lies in, in the layer's own dtype."""
        h = self.inputs(features)
        flat, tgt = h.reshape(-1, h.shape[-1]), targets.reshape(-1)
        dtype = next((p.dtype for p in self.adaptive.parameters()), torch.float32)
        with torch.autocast(flat.device.type, enabled=False):  # float32 unless cast
            return self.adaptive(flat.to(dtype), tgt).output.float().view(targets.shape)

    def log_probs_at(self, features: Tensor, rows: Tensor, targets: Tensor) -> Tensor:
        """:func:`adaptive_log_probs_at` (``rows``, ``targets`` best on the CPU)."""
        return adaptive_log_probs_at(self.adaptive, self.inputs(features), rows, targets)

    def target_logits(self, features: Tensor, targets: Tensor) -> Tensor:
        """The exact log-probabilities (:meth:`target_log_probs`): already normalised."""
        return self.target_log_probs(features, targets)

    def to_bfloat16(self) -> None:
        """The head and tail projections in bfloat16, their log-softmax in float32."""
        self.adaptive.to(torch.bfloat16)

    def embedding_parameters(self, embedding: nn.Embedding) -> int:
        """The whole adaptive layer counts as output embedding."""
        return sum(p.numel() for p in self.adaptive.parameters())


def cluster_of(adaptive: nn.AdaptiveLogSoftmaxWithLoss, targets: Tensor) -> Tensor:
    """int64 [...] 0 for a head word, i + 1 for a word of tail cluster i."""
    bounds = torch.tensor(adaptive.cutoffs[:-1], dtype=targets.dtype, device=targets.device)
    return torch.bucketize(targets, bounds, right=True)


def adaptive_log_probs_at(adaptive: nn.AdaptiveLogSoftmaxWithLoss, features: Tensor, rows: Tensor,
                          targets: Tensor) -> Tensor:
    """log P(targets[g] | features[rows[g]]) for every pair g, several targets per row
    (a prefix-tree node's children and ``</s>``): each row's head log-softmax once; a head
    word reads it, a word of tail cluster i adds ``log_softmax(tail_i(h))[word - cutoff_i]``,
    the tail run once on the distinct rows with a target in cluster i. Equal to
    ``adaptive.log_prob(h)`` gathered, up to float rounding. The pairs are grouped where
    ``rows``, ``targets`` live: on the CPU with features on a GPU, without device syncs.

    Args:
        adaptive: the output layer (float, cast or int8 dynamically quantised).
        features: [N, D] inputs of the output layer (after dropout / projection).
        rows: int64 [G] row of ``features`` of each pair (any order, repeats allowed).
        targets: int64 [G] word ids in [0, V). ``rows`` and ``targets`` on one device,
            the features' or the CPU (see the module docstring).
    Returns:
        float32 [G]; the log-softmaxes are taken in float32 whatever the features' dtype.
        Each product runs on at least :func:`~.rows.safe_rows` rows (copies of the
        first pad it), so a pair's value does not depend on the other rows.
    """
    if features.dim() != 2 or rows.shape != targets.shape or rows.dim() != 1:
        raise ValueError(f"expected features [N, D] and rows, targets [G], got {tuple(features.shape)}, "
                         f"{tuple(rows.shape)}, {tuple(targets.shape)}")
    if rows.numel() == 0:
        return torch.zeros(0, dtype=torch.float32, device=features.device)
    dev = features.device
    param = next(adaptive.parameters(), None)  # None: int8 modules (they take float32)
    if param is not None and features.dtype != param.dtype:
        features = features.to(param.dtype)  # e.g. a bfloat16 output layer after float32 recurrence
    cuts, shortlist = adaptive.cutoffs, adaptive.shortlist_size
    # every product on safe_rows rows: a row's values then do not depend on the others (.rows)
    head_logp = torch.log_softmax(adaptive.head(pad_rows(features)).float(), dim=-1)  # [N', c_0 + n_clusters]
    cluster = cluster_of(adaptive, targets)
    # the head entry each pair reads: its word (head) or its cluster's entry (tail)
    col = torch.where(cluster == 0, targets, cluster + (shortlist - 1))
    out = head_logp[rows.to(dev), col.to(dev)]
    for i in range(len(cuts) - 1):
        sel = torch.nonzero(cluster == i + 1).squeeze(1)
        if sel.numel() == 0:
            continue
        need, inv = torch.unique(rows.index_select(0, sel), return_inverse=True)
        # torch's own log_softmax, as in log_prob (logit - logsumexp is no faster on the CPU and
        # rounds differently)
        tail_in = pad_rows(features.index_select(0, need.to(dev)))
        tail_logp = torch.log_softmax(adaptive.tail[i](tail_in).float(), dim=-1)
        word = targets.index_select(0, sel) - cuts[i]
        out.index_add_(0, sel.to(dev), tail_logp[inv.to(dev), word.to(dev)])
    return out


class LogProbOutput(OutputLayer):
    """Features that already are natural-log probabilities [..., V] (the neural cache's
    mixture; built as ``LogProbOutput(V)``): :meth:`logits` returns them unchanged."""

    kind = "log-probs"

    def logits(self, features: Tensor) -> Tensor:
        return features


def output_layer(config, vocab_size: int, feature_dim: int, embedding: nn.Embedding) -> OutputLayer:
    """The output layer of a model config (:class:`~.base.ModelConfig`: ``output``,
    ``dropout_out``, ``tie_weights``, ``adaptive_cutoffs``, ``adaptive_div_value``)
    reading features of ``feature_dim``, with the random draws of earlier versions: the
    tied-weight projection (features not ``embedding_dim`` wide), then ``embedding``'s
    U(-0.1, 0.1) initialisation, then the scoring layer."""
    dropout = getattr(config, "dropout_out", 0.0)
    tie = getattr(config, "tie_weights", False)
    project = nn.Linear(feature_dim, config.embedding_dim) if tie and feature_dim != config.embedding_dim else None
    nn.init.uniform_(embedding.weight, -0.1, 0.1)
    if getattr(config, "output", "softmax") == "adaptive":
        v = vocab_size  # without cutoffs (no word counts known): head ~ V/8 (at least 1), one tail split
        cutoffs = (list(config.adaptive_cutoffs) if config.adaptive_cutoffs is not None
                   else sorted({max(1, min(v - 1, v // 8)), max(1, min(v - 1, v // 2))}))
        return AdaptiveOutput(feature_dim, vocab_size, dropout, cutoffs, config.adaptive_div_value)
    return SoftmaxOutput(feature_dim, vocab_size, dropout, project, embedding if tie else None)


def default_adaptive_cutoffs(counts: Sequence[int], coverage=(0.85, 0.97)) -> List[int]:
    """Cluster boundaries for the adaptive softmax from word frequencies.

    Args:
        counts: training count of each word id, ids ordered by decreasing frequency
            (specials first).
        coverage: token shares at which the head, then each further cluster, ends
            (the head holds the most frequent words covering 85% of the training
            tokens, the first tail cluster up to 97%, the second tail the rest).
    Returns:
        increasing cutoffs, each in [1, V - 1] (at least one); the head is kept at
        no fewer than min(V - 1, 128) words and each cluster non-empty.
    Raises:
        DataError: fewer than 3 words.
    """
    v = len(counts)
    if v < 3:
        raise DataError(f"the adaptive softmax needs a vocabulary of at least 3 words, got {v}")
    total = float(sum(counts)) or 1.0
    share = [c / total for c in accumulate(counts)]  # cumulative token shares (non-decreasing)
    cuts = [i + 1 for i in (bisect_left(share, t) for t in coverage) if i < v]  # equal cuts: spread below
    lo = min(v - 1, 128)
    out: List[int] = []
    for c in cuts:
        c = min(max(c, lo, (out[-1] + 1) if out else 1), v - 1)
        if not out or c > out[-1]:
            out.append(c)
    return out or [v - 1]


def keep_checkpoint_names(model: nn.Module) -> None:
    """Hooks that give ``model``'s state dict (and its load errors) the checkpoint names
    of its ``output`` layer's modules, ``decoder.weight`` for ``output.decoder.weight``."""
    model.register_state_dict_post_hook(_to_flat)
    model.register_load_state_dict_pre_hook(_to_nested)
    model.register_load_state_dict_post_hook(_flat_errors)


def _flat(key: str, prefix: str = "") -> str:
    return prefix + key[len(prefix) + 7:] if key.startswith(prefix + "output.") else key


def _to_flat(module, state, prefix, _meta) -> None:
    for k in list(state):  # every key re-inserted: the order is kept
        state[_flat(k, prefix)] = state.pop(k)


def _to_nested(module, state, prefix, *_) -> None:
    for k in list(state):
        if k.startswith(tuple(prefix + m for m in ("decoder.", "adaptive.", "project."))):
            state[prefix + "output." + k[len(prefix):]] = state.pop(k)


def _flat_errors(module, incompatible) -> None:
    for keys in incompatible:  # (missing, unexpected)
        keys[:] = [_flat(k) for k in keys]
