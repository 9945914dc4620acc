"""The stateful interface every language model implements.

A model reads word ids ``[B, T]`` and predicts the next word at every position. Its
recurrent state (hidden vectors, memories) is a tuple of tensors, each batch-first
``[B, ...]``, so that the generic helpers :func:`select_state`, :func:`expand_state`
and :func:`reset_state` work for every model. A state tensor may only vary in length
along axis 1 where zeros in front mean empty slots (the neural cache keeps only the
slots filled so far, oldest first); :func:`cat_states` and :func:`reset_state` pad such
tensors in front to a common length. Rescoring starts each hypothesis from
the state reached after the 1-best history of its document; training carries the
state across BPTT segments and resets it only at document boundaries.

Subclasses implement :meth:`LanguageModel.init_state` and :meth:`LanguageModel.recur`;
embedding, input/output dropout, weight tying and the output softmax are shared here.
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import asdict, dataclass
from itertools import accumulate
from typing import ClassVar, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..options import SOFTMAX_IMPLS, ScorerOptions, default_of, option
from ..validation import check_choice, check_options
from ..errors import DataError
from .adaptive_output import adaptive_log_probs_at
from .fused_output import fused_linear_cross_entropy, fused_log_probs_at
from .rows import pad_rows

State = Tuple[Tensor, ...]


class Output(NamedTuple):
    """What :meth:`LanguageModel.forward` returns.

    features: float [B, T, D] inputs of the output layer.
    state: the state after the inputs (after ``lengths[b]`` inputs of row b when
        lengths are given, else after all T).
    aux_loss: scalar auxiliary training loss (e.g. AMN's implicit-target loss), or None.
    """

    features: Tensor
    state: State
    aux_loss: Optional[Tensor]


def select_state(state: State, index: Tensor) -> State:
    """Rows ``index`` (int64 [B']) of every state tensor -> state of batch B'."""
    return tuple(s.index_select(0, index) for s in state)


def expand_state(state: State, n: int) -> State:
    """Repeat each row ``n`` times (row b -> rows b*n .. b*n+n-1)."""
    return tuple(s.repeat_interleave(n, dim=0) for s in state)


def pad_front(t: Tensor, size: int) -> Tensor:
    """``t`` [B, S, ...] with ``size - S`` zero slots put in front along axis 1."""
    if t.dim() < 2 or t.shape[1] == size:
        return t
    return torch.cat([t.new_zeros((t.shape[0], size - t.shape[1], *t.shape[2:])), t], 1)


def align_slots(parts):
    """The tensors ``parts`` (one entry of several states, each [B_i, S_i, ...]) padded in
    front to the longest S_i (:func:`pad_front`; see the module docstring), so that
    they can be concatenated, written into one another or mixed row by row. Tensors that
    differ in another axis are left as they are (the caller's op raises RuntimeError)."""
    top = max((p.shape[1] for p in parts if p.dim() >= 2), default=0)
    return [pad_front(p, top) for p in parts]


def reset_state(state: State, mask: Tensor, initial: State) -> State:
    """Replace the rows where ``mask`` (bool [B]) is True by the rows of ``initial``
    (aligned first, :func:`align_slots`)."""
    out = []
    for s, s0 in zip(state, initial):
        s, s0 = align_slots((s, s0))
        m = mask.view(-1, *([1] * (s.dim() - 1)))
        out.append(torch.where(m, s0, s))
    return tuple(out)


def cat_states(states) -> State:
    """Concatenate states along the batch axis (aligned first, :func:`align_slots`)."""
    return tuple(torch.cat(align_slots(parts), 0) for parts in zip(*states))


def hold_done(t: int, lengths: Optional[Tensor], new: Tensor, old: Tensor, dim: int = 0) -> Tensor:
    """Step ``t`` of a step loop: ``new``, but ``old`` in the rows (batch axis ``dim``) that
    have read all their ``lengths[b]`` inputs already (``new`` itself when lengths is None)."""
    if lengths is None:
        return new
    shape = [1] * new.dim()
    shape[dim] = -1
    return torch.where((t < lengths).view(shape), new, old)


def state_row_bytes(state: State) -> int:
    """Bytes of one row (one stream) of ``state``."""
    return sum(s[:1].numel() * s.element_size() for s in state)


def detach_state(state: State) -> State:
    """The same state cut from the autograd graph (between BPTT segments)."""
    return tuple(s.detach() for s in state)


def run_rnn(rnn: nn.Module, x: Tensor, state: State, lengths: Optional[Tensor]) -> Tuple[Tensor, State]:
    """torch's batch-first ``nn.RNN``/``nn.GRU``/``nn.LSTM`` over ``x`` float [B, T, E] from
    the batch-first state ``(h,)`` or ``(h, c)`` float [B, L, H], packed when ``lengths``
    vary (each row's end state taken at its own length) -> (outputs [B, T, H], end state)."""
    hx = tuple(s.transpose(0, 1).contiguous() for s in state)
    hx = hx if len(hx) == 2 else hx[0]
    if lengths is None or bool((lengths == x.shape[1]).all()):
        y, hn = rnn(x, hx)
    else:
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        y, hn = rnn(packed, hx)
        y, _ = pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
    return y, tuple(s.transpose(0, 1) for s in (hn if isinstance(hn, tuple) else (hn,)))


def lstm_forget_bias(lstm: nn.Module, hidden: int) -> None:
    """Forget-gate bias 1 in every layer of ``lstm`` (``bias_ih`` 1, ``bias_hh`` 0; gates i, f, g, o)."""
    with torch.no_grad():
        for name, p in lstm.named_parameters():
            if name.startswith("bias_ih"):
                p[hidden:2 * hidden].fill_(1.0)
            elif name.startswith("bias_hh"):
                p[hidden:2 * hidden].zero_()


def slide_window(seq: Tensor, lengths: Optional[Tensor], size: int) -> Tensor:
    """The window carried to the next call: of ``seq`` [B, size + T, ...] (the state's
    ``size`` slots, then the T positions read), the ``size`` positions that end at each
    row's last real input, ``lengths[b]`` .. ``lengths[b] + size - 1`` (the last ``size``
    when ``lengths`` is None), so that padding never enters it."""
    t_len = seq.shape[1] - size
    if lengths is None or bool((lengths == t_len).all()):
        return seq[:, t_len:]
    idx = lengths.to(seq.device).view(-1, 1) + torch.arange(size, device=seq.device)  # [B, size]
    return seq.gather(1, idx.view(*idx.shape, *([1] * (seq.dim() - 2))).expand(-1, -1, *seq.shape[2:]))


OUTPUT_LAYERS = ("softmax", "adaptive")
#: reading directions of a model (``model_config.direction``)
DIRECTIONS = ("forward", "backward")


@dataclass
class ModelConfig:
    """Options shared by every model family: each family's ``Config`` derives from this
    dataclass and adds its own fields (so ``model_config: {output: adaptive}`` works
    for all). Every field is declared with its kind and range or choices
    (:func:`~nbest_rescore.options.option`) and checked when the config is built
    (:func:`~nbest_rescore.validation.check_options`; DataError naming
    ``model_config.<key>``); a family declares cross-field rules in its
    ``__post_init__`` (after ``super().__post_init__()``).

    Fields (defined in docs/models.md, "Options shared by all models" and "Backward
    LMs"): ``embedding_dim``, ``dropout_emb``/``dropout_out`` (on the embeddings / on the
    output layer's input), ``tie_weights`` (a projection when the features are not
    ``embedding_dim`` wide), ``output`` ``"softmax"`` or ``"adaptive"`` (Grave et al.
    2017, :mod:`.adaptive_output`; word ids by decreasing frequency; not with
    ``tie_weights``), ``adaptive_cutoffs`` (None: :func:`default_adaptive_cutoffs` by
    the trainer, stored in the checkpoint), ``adaptive_div_value`` (tail cluster i gets
    D / div_value**(i+1) units), ``direction`` (:data:`DIRECTIONS`; ignored by the model
    code: training, ``ppl`` and rescoring reverse the data; a checkpoint without it is
    forward).
    """

    embedding_dim: int = option(256, kind="int", range=">= 1")
    dropout_emb: float = option(0.0, kind="float", range="[0, 1)")
    dropout_out: float = option(0.0, kind="float", range="[0, 1)")
    tie_weights: bool = option(False, kind="bool")
    output: str = option("softmax", kind="str", choices=OUTPUT_LAYERS)
    adaptive_cutoffs: Optional[List[int]] = option(None, kind="int", range=">= 1", multiple=True, example=[2000, 10000])
    adaptive_div_value: float = option(4.0, kind="float", range=">= 1")
    direction: str = option("forward", kind="str", choices=DIRECTIONS)

    _SECTION = "model_config"

    def __post_init__(self):
        check_options(self)
        if self.output == "adaptive" and self.tie_weights:
            raise DataError("model_config: tie_weights cannot be combined with output: adaptive "
                            "(the adaptive softmax has no single output embedding matrix); "
                            "set tie_weights: false")
        cuts = self.adaptive_cutoffs
        if cuts is not None and (not cuts or list(cuts) != sorted(set(cuts))):
            raise DataError(f"model_config.adaptive_cutoffs must be a non-empty list of strictly increasing "
                            f"integers, got {cuts!r}; e.g. adaptive_cutoffs: [2000, 10000]")


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


def _fallback_cutoffs(v: int) -> List[int]:
    """Cutoffs when no word counts are known: head ~ V/8 (at least 1), one tail split."""
    return sorted({max(1, min(v - 1, v // 8)), max(1, min(v - 1, v // 2))})


class LanguageModel(nn.Module):
    """Base class: word embedding -> :meth:`recur` -> (dropout) -> output layer.

    The output layer is a linear layer + softmax over the vocabulary, or the adaptive
    softmax (``config.output == "adaptive"``, see :class:`ModelConfig`).
    Subclasses set ``Config`` (a dataclass deriving from :class:`ModelConfig`) and
    ``feature_dim``.
    """

    name: ClassVar[str] = "base"
    #: one line for ``nbest-rescore models`` (default: the docstring's first paragraph)
    summary: ClassVar[str] = ""
    Config: ClassVar[type]

    def __init__(self, config, vocab_size: int, feature_dim: int):
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, config.embedding_dim)
        self.drop_emb = nn.Dropout(getattr(config, "dropout_emb", 0.0))
        self.drop_out = nn.Dropout(getattr(config, "dropout_out", 0.0))
        self.project = None
        if getattr(config, "tie_weights", False) and feature_dim != config.embedding_dim:
            self.project = nn.Linear(feature_dim, config.embedding_dim)
            feature_dim = config.embedding_dim
        self.output_dim = feature_dim
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        self.decoder: Optional[nn.Linear] = None
        self.adaptive: Optional[nn.AdaptiveLogSoftmaxWithLoss] = None
        if getattr(config, "output", "softmax") == "adaptive":
            cutoffs = (_fallback_cutoffs(vocab_size) if config.adaptive_cutoffs is None
                       else list(config.adaptive_cutoffs))
            if not cutoffs or not all(isinstance(c, int) and not isinstance(c, bool) for c in cutoffs) \
                    or cutoffs != sorted(set(cutoffs)) or cutoffs[0] < 1 or cutoffs[-1] > vocab_size - 1:
                raise DataError(f"model_config.adaptive_cutoffs must be a non-empty list of increasing "
                                f"integers in [1, {vocab_size - 1}] (vocabulary {vocab_size}), got {cutoffs!r}")
            div = float(config.adaptive_div_value)
            if int(feature_dim // div ** len(cutoffs)) < 1:
                raise DataError(f"model_config: the adaptive softmax's last tail cluster would get "
                                f"{feature_dim} // {div:g}^{len(cutoffs)} = 0 units; use fewer "
                                f"adaptive_cutoffs or a smaller adaptive_div_value (features: {feature_dim})")
            self.adaptive = nn.AdaptiveLogSoftmaxWithLoss(feature_dim, vocab_size, cutoffs,
                                                          div_value=float(config.adaptive_div_value))
        else:
            self.decoder = nn.Linear(feature_dim, vocab_size)
            if getattr(config, "tie_weights", False):
                self.decoder.weight = self.embedding.weight
            nn.init.zeros_(self.decoder.bias)

    @property
    def direction(self) -> str:
        """``"forward"`` or ``"backward"`` (:class:`ModelConfig`; callers reverse the data)."""
        return getattr(self.config, "direction", "forward")

    # -- to implement ---------------------------------------------------------------
    def init_state(self, batch_size: int, device=None) -> State:
        """The state at the start of a document for ``batch_size`` streams."""
        raise NotImplementedError

    def recur(self, x: Tensor, state: State, lengths: Optional[Tensor]) -> Output:
        """Run the recurrence on embedded inputs ``x`` float [B, T, E]."""
        raise NotImplementedError

    # -- shared -------------------------------------------------------------------------
    def forward(self, tokens: Tensor, state: State, lengths: Optional[Tensor] = None) -> Output:
        """Read ``tokens`` int64 [B, T] (padding at or after ``lengths[b]``) from the
        batch-first ``state`` of batch B; ``lengths`` int64 [B] (CPU or the model's
        device), each in [1, T], or None. Returns :class:`Output` with features [B, T, D]
        and the state after ``lengths[b]`` inputs of row b (all T without lengths).
        Outputs at padded positions are unspecified; earlier positions never depend on
        later tokens (causality). Floating-point state tensors are cast to the
        embedding's dtype (a bfloat16 model accepts a float32 initial state).
        """
        x = self.drop_emb(self.embedding(tokens))
        state = tuple(s.to(x.dtype) if s.is_floating_point() else s for s in state)
        return self.recur(x, state, lengths)

    def _output_input(self, features: Tensor) -> Tensor:
        h = self.drop_out(features)
        return self.project(h) if self.project is not None else h

    def logits(self, features: Tensor) -> Tensor:
        """Output scores float [B, T, V] from features [B, T, D]: log-softmax of them
        gives the log-probabilities. Unnormalised logits for the full softmax; for the
        adaptive softmax the (already normalised) natural-log probabilities of every
        word, computed through every cluster."""
        h = self._output_input(features)
        if self.adaptive is not None:
            flat = h.reshape(-1, h.shape[-1])
            return self.adaptive.log_prob(flat).view(*h.shape[:-1], self.vocab_size)
        return self.decoder(h)

    def target_log_probs(self, features: Tensor, targets: Tensor) -> Tensor:
        """Exact natural-log probabilities float32 [...] of ``targets`` int64 [...] (valid
        ids, also at padding) after ``features`` float [..., D]: fused ``cross_entropy``
        (no second [N, V] tensor kept) for the full softmax; the head and only the tail
        clusters a target lies in for the adaptive one; the log-softmax of
        :meth:`logits` for a model that overrides it (the cache wrapper)."""
        if type(self).logits is not LanguageModel.logits:
            logp = torch.log_softmax(self.logits(features).float(), dim=-1)
            return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        h = self._output_input(features)
        flat, tgt = h.reshape(-1, h.shape[-1]), targets.reshape(-1)
        if self.adaptive is not None:  # autocast off: the layer's own dtype (float32 unless cast)
            dtype = next((p.dtype for p in self.adaptive.parameters()), torch.float32)
            with torch.autocast(flat.device.type, enabled=False):
                return self.adaptive(flat.to(dtype), tgt).output.float().view(targets.shape)
        if self.fused_output_active(training=torch.is_grad_enabled() and self.training):
            w, b = self._output_weights()
            if torch.is_grad_enabled():
                return -fused_linear_cross_entropy(flat, w, b, tgt).view(targets.shape)
            rows = torch.arange(flat.shape[0], device=flat.device)
            return fused_log_probs_at(flat, w, b, rows, tgt).float().view(targets.shape)
        logits = self.decoder(flat).float()
        return -F.cross_entropy(logits, tgt, reduction="none").view(targets.shape)

    #: a row's outputs depend on the width T of its call (attention over a segment): scoring
    #: reads rows of different lengths in separate calls (:mod:`.rows`)
    width_dependent: ClassVar[bool] = False
    #: the state summarises the history in fixed-size recurrent vectors, so histories that
    #: end in the same words may share one (``score --max-ngram-order``,
    #: :mod:`~nbest_rescore.rescoring.history_graph`); False for a window of exact past positions
    merges_histories: ClassVar[bool] = True
    #: set by the N-best scorer: computations that would round a row according to its batch
    #: take their slower row-by-row form (the neural cache's scores; :mod:`.rows`)
    row_invariant: bool = False
    #: exact full-softmax scoring (``ppl``, N-best costs), ``"fused"`` (:mod:`.fused_output`)
    #: or ``"plain"``; set per instance (``score --softmax-impl``, :class:`~nbest_rescore.options.ScorerOptions`)
    softmax_impl: str = default_of(ScorerOptions, "softmax_impl")
    #: the training loss through :func:`~.fused_output.fused_linear_cross_entropy`
    #: (``optim.fused_softmax``; 1.02x the words/s of the plain loss on the 2-core CPU, README)
    fused_training: bool = False
    #: bfloat16 copy of the output layer's weights for the fused product
    #: (:func:`~nbest_rescore.models.quantize.bfloat16_output_layer`), or None
    output_weights_bf16: Optional[Tuple[Tensor, Optional[Tensor]]] = None

    def fused_output_active(self, training: bool = False) -> bool:
        """Whether the full-softmax output goes through :mod:`.fused_output`: a plain
        ``nn.Linear`` decoder (not int8), not overridden ``logits``, and
        ``softmax_impl == "fused"`` (inference) or ``fused_training`` (training)."""
        if type(self).logits is not LanguageModel.logits \
                or type(getattr(self, "decoder", None)) is not nn.Linear:
            return False
        check_choice("softmax_impl", self.softmax_impl, SOFTMAX_IMPLS)  # DataError, a ValueError
        return self.fused_training if training else self.softmax_impl == "fused"

    def _output_weights(self) -> Tuple[Tensor, Optional[Tensor]]:
        """(weight [V, D], bias [V]) of the full-softmax product: the bfloat16 copy when
        one is set (inference only), else the decoder's own."""
        if self.output_weights_bf16 is not None and not torch.is_grad_enabled():
            return self.output_weights_bf16
        return self.decoder.weight, self.decoder.bias

    def log_probs_at(self, features: Tensor, rows: Tensor, targets: Tensor) -> Tensor:
        """Exact natural-log probabilities of ``targets[g]`` after ``features[rows[g]]``,
        several targets per row (prefix-tree scoring: a node's children's words and
        ``</s>``): :meth:`adaptive_log_probs_at`; for the full softmax with
        ``softmax_impl == "fused"`` :func:`~.fused_output.fused_log_probs_at` (no [N, V]
        tensor); otherwise (``plain``, int8 decoder, a model overriding :meth:`logits`
        such as the neural cache) ``log_softmax(logits(features))`` gathered.

        Args:
            features: float [N, D] (from :meth:`forward`, flattened).
            rows, targets: int64 [G]; rows in [0, N), valid word ids; on the CPU or
                the features' device.
        Returns:
            [G] on the features' device: float64 from the fused full softmax, float32
            otherwise. The products run on :func:`~.rows.safe_rows` rows, so a pair's
            value does not depend on the other rows (:mod:`.rows`).
        """
        if type(self).logits is LanguageModel.logits and getattr(self, "adaptive", None) is not None:
            return self.adaptive_log_probs_at(features, rows, targets)
        dev = features.device
        rows, targets = rows.to(dev), targets.to(dev)
        features = pad_rows(features)  # rows 0..N-1 are the real ones
        if self.fused_output_active():
            w, b = self._output_weights()
            return fused_log_probs_at(self._output_input(features), w, b, rows, targets)
        logp = torch.log_softmax(self.logits(features).float(), dim=-1)
        return logp[rows, targets]

    def adaptive_log_probs_at(self, features: Tensor, rows: Tensor, targets: Tensor) -> Tensor:
        """Adaptive softmax only: :meth:`log_probs_at` through
        :func:`~nbest_rescore.models.adaptive_output.adaptive_log_probs_at` (each row's head
        once, each tail cluster only on the rows with a target in it; no [N, V] tensor).
        ``rows``, ``targets`` may also stay on the CPU (grouped by cluster on the host,
        without device syncs). Returns float32 [G] on the features' device.
        Raises ValueError when the model's output layer is not the adaptive softmax."""
        if self.adaptive is None:
            raise ValueError(f"{self.name}: adaptive_log_probs_at needs output: adaptive")
        return adaptive_log_probs_at(self.adaptive, self._output_input(features), rows, targets)

    def target_logits(self, features: Tensor, targets: Tensor) -> Tensor:
        """The logit of each target word only, float [B, T] from features [B, T, D] and
        targets int64 [B, T]: features . W[target] + b[target] without the [B, T, V]
        product (``logits(features).gather(-1, targets)`` up to summation order). The
        adaptive softmax gives its exact log-probabilities (:meth:`target_log_probs`); a
        model that overrides :meth:`logits` (the cache) or an int8 decoder, the full product.
        """
        if type(self).logits is LanguageModel.logits and self.adaptive is not None:
            return self.target_log_probs(features, targets)
        if type(self).logits is not LanguageModel.logits or type(self.decoder) is not nn.Linear:
            return self.logits(features).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        h = self._output_input(features)
        w = self.decoder.weight.index_select(0, targets.reshape(-1)).view(*targets.shape, -1)  # [B, T, D]
        b = self.decoder.bias.index_select(0, targets.reshape(-1)).view(targets.shape)
        return (h * w.to(h.dtype)).sum(-1) + b.to(h.dtype)

    def log_probs(self, inputs: Tensor, targets: Tensor, state: State,
                  lengths: Optional[Tensor] = None) -> Tuple[Tensor, State]:
        """Natural-log probabilities of ``targets`` given ``inputs`` from ``state``.

        Args:
            inputs, targets: int64 [B, T] (targets are inputs shifted by one).
            state: state of batch B; lengths as in :meth:`forward`.
        Returns:
            (float32 [B, T] log P(targets[b, t] | inputs[b, :t+1], state), new state).
            Padded positions hold unspecified values: mask them.
        """
        out = self.forward(inputs, state, lengths)
        return self.target_log_probs(out.features, targets), out.state

    def self_normalized_log_probs(self, inputs: Tensor, targets: Tensor, state: State,
                                  lengths: Optional[Tensor] = None) -> Tuple[Tensor, State]:
        """:meth:`log_probs` with the target's logit alone as the log-probability (log Z
        taken as 0: self-normalisation, Chen et al. 2016, the thesis ``000`` section 3.5
        ref. [45]); only sensible for a model trained with ``optim.self_norm_weight > 0``;
        O(D) per word instead of O(V D). Not normalised: off by log Z of each position.
        """
        out = self.forward(inputs, state, lengths)
        return self.target_logits(out.features, targets).float(), out.state

    def supports_cuda_graph(self) -> bool:
        """Whether a training step can be captured as a CUDA graph
        (:mod:`nbest_rescore.training.cuda_graph`): ``graph_safe`` families (checked on
        CUDA) without the adaptive softmax (rows selected per tail cluster)."""
        return self.graph_safe and self.adaptive is None

    #: the family's step was checked to be capturable (see :meth:`supports_cuda_graph`)
    graph_safe: ClassVar[bool] = False

    def on_epoch_end(self, epoch: int) -> None:
        """Hook called by the trainer after each epoch (e.g. attention annealing)."""

    def on_progress(self, fraction: float) -> None:
        """Hook called by the trainer before every optimiser step with the share of the
        planned training done, in [0, 1]
        (:meth:`~nbest_rescore.training.schedule.LRSchedule.progress`), e.g. for an
        annealing schedule (the AMN's). Must not read device values back (hot loop)."""

    def begin_diagnostics(self) -> None:
        """Start accumulating model-specific health figures over the following
        forward passes (the trainer calls it before each validation)."""

    def token_mask(self, mask: Optional[Tensor]) -> None:
        """The real-token mask bool [B, T] of the positions the next forward calls cover,
        in column order, so that padding is left out of auxiliary losses and health
        figures (called by training and the evaluation loop before each segment)."""

    def target_aux_loss(self, targets: Tensor) -> Optional[Tensor]:
        """An auxiliary training loss that needs the targets int64 [B, T] of the positions
        the forward calls since :meth:`token_mask` covered (a scalar tensor, a mean over
        their real tokens, added to the loss by the trainer), or None (the default; the
        AMN's mixture-of-experts ITL defines one). Called once per training segment."""
        return None

    def end_diagnostics(self) -> Optional[dict]:
        """The figures accumulated since :meth:`begin_diagnostics` (JSON-ready), or
        None for models without any; stops accumulating."""
        return None

    def config_dict(self) -> dict:
        """The model config as a plain dict (stored in checkpoints)."""
        return asdict(self.config)

    def num_parameters(self) -> dict:
        """Parameter counts: ``total`` and ``without_embeddings`` (input and output
        embedding matrices excluded; a tied matrix is counted once; with the adaptive
        softmax the whole output layer counts as output embedding)."""
        total = sum(p.numel() for p in self.parameters())  # parameters() yields a shared tensor once
        emb = self.embedding.weight.numel()
        if self.adaptive is not None:  # the whole adaptive output layer counts as output embedding
            emb += sum(p.numel() for p in self.adaptive.parameters())
        elif self.decoder.weight is not self.embedding.weight:
            emb += self.decoder.weight.numel()
        return {"total": total, "without_embeddings": total - emb}
